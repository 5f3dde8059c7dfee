"""A process tree read from /proc: threads, children, descendants, their CPU and peak memory.

Children come from /proc/PID/task/TID/children (every thread's: a child belongs to the thread
that forked it). CPU is utime+stime plus cutime+cstime (children the process reaped), summed
over the live tree, so a child that exits and is reaped moves from its own line to its parent's
and the total stays right.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")


def threads(pid: int) -> list[int]:
    """Every thread id of `pid` (empty once it is gone)."""
    try:
        return [int(entry.name) for entry in (PROC / str(pid) / "task").iterdir()]
    except OSError:
        return []


def children(pid: int) -> list[int]:
    """The direct children of `pid`, from each of its threads' `children` file."""
    found: list[int] = []
    for tid in threads(pid):
        with contextlib.suppress(OSError):
            text = (PROC / str(pid) / "task" / str(tid) / "children").read_text(encoding="ascii")
            found.extend(int(field) for field in text.split())
    return found


def descendants(pid: int) -> Iterator[int]:
    """Every process below `pid` (not `pid` itself), parents before their children."""
    pending = children(pid)
    while pending:
        child = pending.pop()
        yield child
        pending.extend(children(child))


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and its descendants, reaped (cutime+cstime) and still running."""
    ticks = 0
    for process in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError):
            text = (PROC / str(process) / "stat").read_text(encoding="ascii")
            utime, stime, cutime, cstime = text.rsplit(")", 1)[1].split()[11:15]
            ticks += int(utime) + int(stime) + int(cutime) + int(cstime)
    return ticks / os.sysconf("SC_CLK_TCK")


def own_cpu_s(pid: int) -> float:
    """Seconds on CPU of `pid` itself (all its threads, no children), to the nanosecond."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        schedstat = (PROC / str(pid) / "schedstat").read_text(encoding="ascii")
        return int(schedstat.split()[0]) / 1e9
    return 0.0


def exact_tree_cpu_s(pid: int) -> float:
    """tree_cpu_s to the nanosecond for the live processes: /proc/PID/schedstat's time on CPU.

    /proc/PID/stat truncates to clock ticks (10 ms), which is all of a short-lived or mostly
    idle process's CPU (an ssh ControlPersist master serving five commands uses ~5 ms and
    reads 0 there). Children already reaped still come from cutime+cstime (ticks).
    """
    seconds = 0.0
    for process in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError, ValueError):
            stat = (PROC / str(process) / "stat").read_text(encoding="ascii")
            cutime, cstime = stat.rsplit(")", 1)[1].split()[13:15]
            reaped = (int(cutime) + int(cstime)) / os.sysconf("SC_CLK_TCK")
            seconds += own_cpu_s(process) + reaped
    return seconds


def peak_rss_kb(pid: int) -> int:
    """VmHWM (peak resident set) of one process in KiB; 0 once it is gone."""
    with contextlib.suppress(OSError):
        for line in (PROC / str(pid) / "status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def pss_kb(pid: int) -> int:
    """Proportional set size in KiB (shared pages split among their users); 0 once gone.

    /proc/PID/smaps_rollup walks the page tables, so it costs more than VmHWM: sample it less.
    """
    with contextlib.suppress(OSError):
        for line in (PROC / str(pid) / "smaps_rollup").read_text(encoding="ascii").splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0
