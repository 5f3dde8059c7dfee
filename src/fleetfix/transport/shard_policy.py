"""How many host shard workers a run may use, and when the next one starts.

One process is the default (transport/shards.py says why). `worker_limit` is the most a run
may grow to: one worker per usable core beyond the first, at most MAX_AUTO_WORKERS, within a
quarter of the memory the machine has available; none for a small run. `Saturation` tells when
the main process is the bottleneck: its CPU time per wall second, or how late its event loop
wakes, over SATURATED_WINDOWS windows in a row while hosts are still arriving.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_AUTO_WORKERS = 8
AUTO_MIN_HOSTS = 64
"""Below this many hosts a run is too short for a worker's start-up to pay off."""
WORKER_MEMORY = 64 << 20
"""What one worker holds (a fresh interpreter with asyncssh: ~57 MB RSS before any host)."""
MEMORY_SHARE = 0.25
"""Of the memory the machine has available, what workers may take together."""
WINDOW = 1.0
"""Seconds over which the main process's load is measured."""
SATURATED_CPU = 0.85
"""The main process's CPU time per wall second at which it is the run's bottleneck."""
SATURATED_LAG = 0.1
"""Seconds the event loop wakes late (a 1 s sleep that takes 1.1 s) at which it is."""
SATURATED_WINDOWS = 2
"""Windows in a row the main process must be saturated before one more worker starts."""


def worker_limit(hosts: int, cpus: int | None = None, available: int | None = None) -> int:
    """The most workers a run may grow to by default: one per usable core beyond the first,
    within a memory budget; none when the controller has one core or the run is small."""
    if hosts < AUTO_MIN_HOSTS:
        return 0
    usable = cpus if cpus is not None else len(os.sched_getaffinity(0))
    memory = available if available is not None else available_memory()
    budget = int(memory * MEMORY_SHARE) // WORKER_MEMORY if memory is not None else usable
    return max(0, min(usable - 1, MAX_AUTO_WORKERS, budget))


def available_memory() -> int | None:
    """MemAvailable in bytes (Linux); None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(slots=True)
class Saturation:
    """Whether the main process is the run's bottleneck, judged over windows: its CPU time per
    wall second, and how late its event loop wakes from a sleep of one window."""

    cpu: Callable[[], float] = time.process_time
    clock: Callable[[], float] = time.monotonic
    _wall: float = 0.0
    _used: float = 0.0
    _streak: int = 0

    def start(self) -> None:
        self._wall, self._used, self._streak = self.clock(), self.cpu(), 0

    def sample(self, window: float, arriving: bool) -> bool:
        """Take the reading of the window just ended; True when it is the SATURATED_WINDOWS-th
        saturated one in a row while new hosts were still arriving (then the count restarts)."""
        wall, used = self.clock(), self.cpu()
        elapsed = max(wall - self._wall, 1e-9)
        share, lag = (used - self._used) / elapsed, elapsed - window
        self._wall, self._used = wall, used
        busy = arriving and (share >= SATURATED_CPU or lag >= SATURATED_LAG)
        self._streak = self._streak + 1 if busy else 0
        if self._streak < SATURATED_WINDOWS:
            return False
        self._streak = 0
        return True
