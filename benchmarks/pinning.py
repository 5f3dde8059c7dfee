"""Keep the lab and the contender on different cores, so neither one's CPU skews the other's wall.

With at least two usable CPUs (`os.sched_getaffinity`), the lab server gets one set of cores
(the larger half: it does ~35 ms of CPU per command, more than any controller) and every
contender's whole process tree the rest. The lab is pinned after it starts: every thread of the
server and of each process it has already started (its children inherit the mask from then on).
A contender is pinned before it starts, by running it under `taskset --cpu-list`, so GNU time,
the contender and everything they fork (Ansible's ssh masters too) inherit the mask.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass

from proctree import descendants, threads

TASKSET = "/usr/bin/taskset"


@dataclass(frozen=True, slots=True)
class CpuPlan:
    """Which cores the lab uses and which the contenders (and this runner) use."""

    lab: frozenset[int]
    contenders: frozenset[int]

    def describe(self) -> str:
        return (
            f"pinned: lab on CPU {cpu_list(self.lab)}, "
            f"contenders (whole process tree) on CPU {cpu_list(self.contenders)}"
        )


def plan_pinning(usable: Iterable[int]) -> CpuPlan | None:
    """Split the usable CPUs: the lab the larger half, contenders the rest; None below 2 CPUs."""
    cpus = sorted(set(usable))
    if len(cpus) < 2:
        return None
    contenders = len(cpus) // 2
    return CpuPlan(lab=frozenset(cpus[contenders:]), contenders=frozenset(cpus[:contenders]))


def cpu_list(cpus: Iterable[int]) -> str:
    """`0-3,6` style, as taskset and /proc print CPU lists."""
    spans: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in spans)


def taskset_prefix(cpus: frozenset[int] | None) -> list[str]:
    """The argv prefix that starts a command on `cpus` (nothing when not pinning)."""
    if cpus is None:
        return []
    return [TASKSET, "--cpu-list", cpu_list(cpus)]


def pin_tree(pid: int, cpus: frozenset[int]) -> int:
    """Pin every thread of `pid` and of its descendants to `cpus`; returns the threads pinned."""
    pinned = 0
    for process in [pid, *descendants(pid)]:
        for tid in threads(process):
            # A thread or a command may end between the listing and the call.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.sched_setaffinity(tid, cpus)
                pinned += 1
    return pinned
