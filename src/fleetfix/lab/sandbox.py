"""How a node's command runs: a real bash in a per-node mount + UTS namespace, or a fallback.

Namespace mode (needs CAP_SYS_ADMIN, e.g. root): the forked child, before it executes
`bash -c`, enters new mount and UTS namespaces (mounts private), bind-mounts the node's own
directory over /dev/shm, its boot-id file over /proc/sys/kernel/random/boot_id, its
/proc/driver, its /proc/modules and its /var/lib/fleetfix (where a controller's lease on the
node lives), and sets the hostname -- the same system calls `unshare`
+ `mount` + `hostname` made, without starting those programs (4.9 ms of CPU per command
instead of 10). A failed mount aborts the command, so a command can never see the machine's
real /dev/shm or kernel modules. The lab's own processes' /proc/PID/fd are covered with an
empty directory: they hold a socket per node, which a node's `find /proc/*/fd` would
otherwise read on every call.

A command naming /sys/class/infiniband reads the node's own counters tree (lab/ib_counters.py):
mounted over the machine's where it has one, else the path rewritten in the command text.

Fallback mode (no namespaces): the command runs in plain bash with those five paths rewritten
to the node's files in the command text, FLEETFIX_SHM_DIR exported, and any command that still
mentions `shm` some other way refused -- so it cannot touch the real /dev/shm either.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from fleetfix.lab import ib_counters
from fleetfix.lab.state import NodePaths

SANDBOX_ENV = "FLEETFIX_LAB_SANDBOX"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
DEV_SHM = "/dev/shm"
PROC_DRIVER = "/proc/driver"
PROC_MODULES = "/proc/modules"
VAR_LIB_FLEETFIX = "/var/lib/fleetfix"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

SETUP_FAILED = "fleetfix lab: cannot set up the node sandbox\n"
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MENTIONS_SHM = re.compile(r"\bshm\b")
_REFUSAL = (
    "fleetfix lab: this lab runs without mount namespaces (fallback mode), so commands may only "
    "reach /dev/shm by that exact path; refusing a command that names shm another way\n"
)


class SandboxMode(StrEnum):
    NAMESPACE = "namespace"
    FALLBACK = "fallback"


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one command: argv and extra env, or a refusal message; in namespace mode
    also the bind mounts (source, target) and hostname its child sets up before `exec`."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    refusal: str | None = None
    mounts: tuple[tuple[str, str], ...] = ()
    hostname: str | None = None
    hidden: tuple[str, ...] = field(default=())
    """Directories covered with `empty` when they exist (the lab processes' /proc/PID/fd)."""
    empty: str = ""


class _Libc:
    """The four system calls of the sandbox, bound once (they run in a forked child)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.unshare = libc.unshare
        self.mount = libc.mount
        self.sethostname = libc.sethostname


_LIBC: list[_Libc] = []


def _libc() -> _Libc:
    if not _LIBC:
        _LIBC.append(_Libc())
    return _LIBC[0]


def sandbox_setup(started: Launch) -> Callable[[], None] | None:
    """The function the forked child runs before `exec` (subprocess's preexec_fn), or None
    outside namespace mode. Everything it needs is encoded here, before the fork."""
    if started.hostname is None:
        return None
    libc = _libc()
    name = started.hostname.encode()
    binds = [(src.encode(), dst.encode()) for src, dst in started.mounts]
    hidden = [path.encode() for path in started.hidden]
    empty = started.empty.encode()

    def enter() -> None:
        _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWUTS))
        _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None))
        for source, target in binds:
            _check(libc.mount(source, target, None, _MS_BIND, None))
        _check(libc.sethostname(name, len(name)))
        for target in hidden:
            libc.mount(empty, target, None, _MS_BIND, None)  # best effort: it may be gone

    return enter


def launch_data(started: Launch) -> dict[str, Any]:
    """A Launch as JSON-able data (it travels to an SSH front process)."""
    return {
        "argv": list(started.argv),
        "env": dict(started.env),
        "refusal": started.refusal,
        "mounts": [list(m) for m in started.mounts],
        "hostname": started.hostname,
        "hidden": list(started.hidden),
        "empty": started.empty,
    }


def launch_from_data(data: Mapping[str, Any]) -> Launch:
    return Launch(
        argv=tuple(str(a) for a in data.get("argv", ())),
        env={str(k): str(v) for k, v in dict(data.get("env", {})).items()},
        refusal=data.get("refusal"),
        mounts=tuple((str(src), str(dst)) for src, dst in data.get("mounts", ())),
        hostname=data.get("hostname"),
        hidden=tuple(str(h) for h in data.get("hidden", ())),
        empty=str(data.get("empty", "")),
    )


def _check(result: int) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def detect_sandbox() -> SandboxMode:
    """Namespace mode if unshare + bind mounts work here (FLEETFIX_LAB_SANDBOX overrides)."""
    forced = os.environ.get(SANDBOX_ENV, "")
    if forced in (SandboxMode.NAMESPACE, SandboxMode.FALLBACK):
        return SandboxMode(forced)
    with tempfile.TemporaryDirectory(prefix="fleetfix-lab-probe-") as scratch:
        base = Path(scratch)
        paths = NodePaths(base)
        for directory in (paths.shm, paths.proc_driver, paths.var_lib_fleetfix):
            directory.mkdir()
        paths.boot_id.write_text("probe\n", encoding="ascii")
        paths.proc_modules.write_text("", encoding="ascii")  # the probe reads it back empty
        (paths.shm / ".probe").write_text("", encoding="ascii")
        probe = namespace_launch(
            paths, "fleetfix-lab-probe", "test -f /dev/shm/.probe && test ! -s /proc/modules", ()
        )
        try:
            done = subprocess.run(
                probe.argv,
                capture_output=True,
                timeout=10,
                check=False,
                preexec_fn=sandbox_setup(probe),
            )
        except (OSError, subprocess.SubprocessError):
            return SandboxMode.FALLBACK
    return SandboxMode.NAMESPACE if done.returncode == 0 else SandboxMode.FALLBACK


@cache
def _machine_has_modules() -> bool:
    return os.path.exists(PROC_MODULES)


@cache
def _machine_has_var_lib_fleetfix() -> bool:
    return os.path.isdir(VAR_LIB_FLEETFIX)


@cache
def _machine_has_infiniband() -> bool:
    return os.path.isdir(ib_counters.SYSFS)


def namespace_launch(
    paths: NodePaths, hostname: str, command: str, hidden: Sequence[str], empty: str = ""
) -> Launch:
    """`bash -c COMMAND` in the node's namespaces ($0 is `bash`, as `exec bash -c CMD bash`).

    /proc/modules is the node's by a bind mount, or, on a kernel built without loadable
    modules (no /proc/modules to mount over), by rewriting the path in the command text as
    fallback mode does; either way a node never reads the machine's. /var/lib/fleetfix is
    the node's the same way: mounted over the machine's where the machine has one, else
    rewritten (the lab creates nothing on the machine to mount over)."""
    mounts: tuple[tuple[str, str], ...] = (
        (str(paths.shm), DEV_SHM),
        (str(paths.boot_id), BOOT_ID),
        (str(paths.proc_driver), PROC_DRIVER),
    )
    if _machine_has_modules():
        mounts += ((str(paths.proc_modules), PROC_MODULES),)
    else:
        command = command.replace(PROC_MODULES, str(paths.proc_modules))
    if _machine_has_var_lib_fleetfix():
        mounts += ((str(paths.var_lib_fleetfix), VAR_LIB_FLEETFIX),)
    else:
        command = command.replace(VAR_LIB_FLEETFIX, str(paths.var_lib_fleetfix))
    if ib_counters.mentions(command):  # the node's InfiniBand counters (lab/ib_counters.py)
        ib_dir = str(ib_counters.directory(paths))
        if _machine_has_infiniband():
            mounts += ((ib_dir, ib_counters.SYSFS),)
        else:
            command = command.replace(ib_counters.SYSFS, ib_dir)
    return Launch(
        ("/bin/bash", "-c", command, "bash"),
        {},
        mounts=mounts,
        hostname=hostname,
        hidden=tuple(hidden) if empty else (),
        empty=empty,
    )


def launch(
    mode: SandboxMode,
    paths: NodePaths,
    hostname: str,
    command: str,
    *,
    hidden: Sequence[str] = (),
    empty: str = "",
) -> Launch:
    """How node `hostname` runs `command`; `hidden` directories are covered with `empty`."""
    if mode is SandboxMode.NAMESPACE:
        return namespace_launch(paths, hostname, command, hidden, empty)
    env = {"FLEETFIX_SHM_DIR": str(paths.shm), "HOSTNAME": hostname, SANDBOX_ENV: mode.value}
    known = re.sub(
        rf"{re.escape(DEV_SHM)}|{re.escape(BOOT_ID)}|{re.escape(PROC_DRIVER)}", "", command
    )
    if _MENTIONS_SHM.search(known):
        return Launch((), env, refusal=_REFUSAL)
    rewritten = (
        command.replace(BOOT_ID, str(paths.boot_id))
        .replace(PROC_DRIVER, str(paths.proc_driver))
        .replace(PROC_MODULES, str(paths.proc_modules))
        .replace(DEV_SHM, str(paths.shm))
        .replace(VAR_LIB_FLEETFIX, str(paths.var_lib_fleetfix))
        .replace(ib_counters.SYSFS, str(ib_counters.directory(paths)))
    )
    return Launch(("/bin/bash", "-c", rewritten, "bash"), env)  # $0 `bash`, as sshd's
