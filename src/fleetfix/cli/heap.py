"""The cyclic garbage collector around a command's start-up, which builds what the run keeps.

Modules, the inventory (10,000 hosts: hundreds of thousands of objects), the playbook and
the topology are built once and live as long as the run. CPython's collector walks every
object it tracks at each full collection, and a growing heap triggers them: at 10,000 hosts
six full collections before the first command took 0.25 s and found nothing to free. So the
start-up builds with the collector paused, and what it built is then frozen (gc.freeze):
kept out of every later collection until the run ends, when it is handed back. A run's
start (each host's state and task, up to its first result) has a pause of its own
(CollectorPause, ended by the run).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


class CollectorPause:
    """No automatic collection from now until `end()` (called once or more, by whichever of
    its ends comes first); the collector as it was after."""

    def __init__(self) -> None:
        self._enable_after = gc.isenabled()
        self._paused = True
        gc.disable()

    def end(self) -> None:
        if self._paused:
            self._paused = False
            if self._enable_after:
                gc.enable()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection in the body (bounded work that makes data to keep, not
    garbage); the collector as it was after."""
    pause = CollectorPause()
    try:
        yield
    finally:
        pause.end()


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Everything alive now is left out of collections in the body (the command, the run),
    and handed back to the oldest generation after, so a later command in this process (a
    test's) can free what this one left. Frozen heaps nest; the first one to end hands back
    all: a command's ends with its run."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


__all__ = ["CollectorPause", "collector_paused", "frozen_heap"]
