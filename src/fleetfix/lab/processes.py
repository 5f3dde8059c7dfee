"""The lab's own processes: a command's session found from its process tree, never from all of
/proc.

A node's command runs as a session leader spawned by a lab server process. Its processes are
the leader's descendants (`/proc/PID/task/TID/children`), plus any that outlived their parent:
the server process is a child subreaper, so an orphan is re-parented to it, not to the
machine's init, and is found among the server's own children. Only processes whose session id
is the leader's count, as before (a `setsid` daemon left the session). The cost is the size of
the lab's own process tree, whatever else runs on the machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os

LOG = logging.getLogger("fleetfix.lab")
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux >= 3.4)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def children(pid: int) -> list[int]:
    """The direct children of `pid` (every thread's), or [] once it is gone."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
            found.extend(int(word) for word in f.read().split())
    return found


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state is [0], session id [3])."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def session_of(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[3]) if fields and len(fields) > 3 else None


def session_pids(leader: int) -> list[int]:
    """Every live process of the session `leader` leads that this server process spawned:
    the leader's tree and any orphan of it now re-parented to this process."""
    roots = [leader] + [pid for pid in children(os.getpid()) if pid != leader]
    found: list[int] = []
    seen: set[int] = set()
    stack = [pid for pid in roots if session_of(pid) == leader]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        found.append(pid)
        stack.extend(child for child in children(pid) if session_of(child) == leader)
    return found


def reap_orphans() -> int:
    """Collect orphans re-parented to this process that have exited (zombies).

    Only processes that are not session leaders: every child the lab starts itself leads its
    own session and is waited for by asyncio, which must not lose its exit status."""
    reaped = 0
    for pid in children(os.getpid()):
        fields = stat_fields(pid)
        if not fields or fields[0] != b"Z" or int(fields[3]) == pid:
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
            reaped += 1
    return reaped
