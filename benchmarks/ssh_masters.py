"""Find the ssh ControlPersist masters Ansible left behind, count what they used, end them.

A master backgrounds itself, so GNU time never sees its CPU. It is found by its control socket,
not by guessing from process names: every listening Unix socket in /proc/net/unix bound under
the scratch control dir, then the process holding that socket's inode open (/proc/PID/fd).
OpenSSH binds the socket under a temporary name (`PATH.XXXXXXXXXXXXXXXX`) and then links it to
the ControlPath, so /proc/net/unix shows the temporary name; the control path is that name
without its last suffix. Just before `ssh -O exit`, each master's CPU is read: its time on CPU
from /proc/PID/schedstat (nanoseconds; /proc/PID/stat's utime+stime is in 10 ms ticks, and a
master forked off at ControlPersist detach serves five commands in ~5 ms, which reads as 0
there), plus cutime+cstime (children it reaped) and the same for any child still running; its
memory is its peak RSS (VmHWM) and its children's.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from proctree import PROC, descendants, exact_tree_cpu_s, peak_rss_kb

UNIX_TABLE = PROC / "net" / "unix"
LISTENING = 0x10000  # __SO_ACCEPTCON in the Flags column


@dataclass(frozen=True, slots=True)
class ControlMaster:
    """One ssh master: its control path (for `ssh -O`) and its pid."""

    control_path: Path
    pid: int


@dataclass(frozen=True, slots=True)
class MasterCost:
    """What the masters used, which GNU time cannot see."""

    count: int
    cpu_s: float
    rss_kb: int


def listening_sockets(directory: Path, table: str) -> dict[int, Path]:
    """Socket inode -> bound path, for each listening Unix socket bound under `directory`.

    `table` is the text of /proc/net/unix: `Num RefCount Protocol Flags Type St Inode Path`.
    """
    prefix = str(directory).rstrip("/") + "/"
    found: dict[int, Path] = {}
    for line in table.splitlines()[1:]:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith(prefix) and int(fields[3], 16) & LISTENING:
            found[int(fields[6])] = Path(fields[7])
    return found


def socket_holders(inodes: Iterable[int]) -> dict[int, int]:
    """Socket inode -> pid of a process holding it open (the lowest pid if several do)."""
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    found: dict[int, int] = {}
    pids = sorted(int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit())
    for pid in pids:
        with contextlib.suppress(OSError):  # gone, or not ours to read
            for fd in (PROC / str(pid) / "fd").iterdir():
                inode = wanted.get(os.readlink(fd))
                if inode is not None:
                    found.setdefault(inode, pid)
    return found


def control_path(bound: Path) -> Path:
    """The ControlPath a master answers on: its bound name, or that name minus the temp suffix."""
    if bound.exists() or not bound.suffix:
        return bound
    return bound.with_suffix("")


def find_masters(directory: Path) -> list[ControlMaster]:
    """Every process listening on a control socket under `directory`, by socket inode."""
    sockets = listening_sockets(directory, UNIX_TABLE.read_text(encoding="utf-8"))
    holders = socket_holders(sockets)
    return sorted(
        (ControlMaster(control_path(sockets[inode]), pid) for inode, pid in holders.items()),
        key=lambda master: master.pid,
    )


def end_ssh_masters(directory: Path) -> MasterCost:
    """Read each master's CPU and memory, then ask it to exit (`ssh -O exit`)."""
    cpu_s, rss_kb = 0.0, 0
    masters = find_masters(directory) if directory.is_dir() else []
    for master in masters:
        cpu_s += exact_tree_cpu_s(master.pid)
        rss_kb += sum(peak_rss_kb(p) for p in [master.pid, *descendants(master.pid)])
        ssh_exit(master.control_path)
    return MasterCost(len(masters), cpu_s, rss_kb)


def ssh_exit(path: Path) -> None:
    """`ssh -O exit`: the master closes its connection and exits."""
    subprocess.run(
        ["ssh", "-o", f"ControlPath={path}", "-O", "exit", "lab-node"],
        capture_output=True,
        timeout=30,
        check=False,
    )
