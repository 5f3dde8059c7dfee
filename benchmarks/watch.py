"""What the runner watches while a contender runs: its tree's memory and CPU, the first command.

Memory: every `SAMPLE_S` the runner lists the contender's process tree (/proc/PID/task/*/children)
and sums the peak RSS (VmHWM) of the processes alive at that moment; the figure is the largest
such sum. For a tree whose processes live through the run (fleetfix and its workers) that is
the exact sum of their peaks, whatever happened between samples; for a tree of short-lived forks
(Ansible's workers) it is the memory of the processes that ran at once. Shared pages (fork
copy-on-write, shared libraries) count once per process, so the sum is an upper bound: 50
Ansible workers forked from one 200 MB parent sum to 10 GB. So every `PSS_EVERY`th sample also
sums the tree's proportional set size (smaps_rollup: shared pages split among their users),
which is the memory the tree really holds, at the moments sampled.

CPU: each sample also notes every live process's own time on CPU (/proc/PID/schedstat). Their
sum is a lower bound of the tree's CPU that does not depend on who reaps whom: GNU time counts
only children that were waited for, so a worker that outlives its parent's wait would be missed.

First command: the lab starts every command in a bash with `BASH_ENV=<state dir>/bash_env`, so
bash opens that file at start-up. An inotify watch (IN_OPEN) on it reports the first open after
the contender starts: the first exec request the lab served, plus the few milliseconds the lab
takes to fork `unshare` and start bash. The runner reads the event in its wait loop, which wakes
on it at once (select), so the figure is precise to a few milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from proctree import descendants, own_cpu_s, peak_rss_kb, pss_kb

SAMPLE_S = 0.2
PSS_EVERY = 5
IN_OPEN = 0x20
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC


@dataclass(slots=True)
class TreeSampler:
    """Samples of a process tree: the largest sums of peak RSS and of PSS, each one's CPU."""

    root: int
    peak_kb: int = 0
    peak_pss_kb: int = 0
    samples: int = 0
    cpu_seen: dict[int, float] = field(default_factory=dict)

    @property
    def processes_seen(self) -> set[int]:
        return set(self.cpu_seen)

    @property
    def cpu_seen_s(self) -> float:
        """The sum of every sampled process's own CPU as last seen (a lower bound)."""
        return sum(self.cpu_seen.values())

    def sample(self) -> int:
        """Add one sample; returns this sample's sum of peak RSS in KiB."""
        alive = list(descendants(self.root))
        for pid in alive:
            self.cpu_seen[pid] = max(self.cpu_seen.get(pid, 0.0), own_cpu_s(pid))
        total = sum(peak_rss_kb(pid) for pid in alive)
        self.peak_kb = max(self.peak_kb, total)
        if self.samples % PSS_EVERY == 0:
            self.peak_pss_kb = max(self.peak_pss_kb, sum(pss_kb(pid) for pid in alive))
        self.samples += 1
        return total


class FirstOpen:
    """An inotify watch for the first open of one file; `fileno()` turns readable when it comes."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._fd: int = int(libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if libc.inotify_add_watch(self._fd, os.fsencode(path), IN_OPEN) < 0:
            errno = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(errno, f"inotify_add_watch {path}")
        self.opened_at: float | None = None

    def fileno(self) -> int:
        return self._fd

    def check(self) -> bool:
        """Note the time if an open is waiting; True once the first open is known."""
        if self.opened_at is None:
            with contextlib.suppress(BlockingIOError):
                if os.read(self._fd, 4096):
                    self.opened_at = time.monotonic()
        return self.opened_at is not None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
