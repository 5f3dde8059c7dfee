"""The cyclic garbage collector around a command's start-up, which builds what the run keeps.

Modules, the inventory (10,000 hosts: hundreds of thousands of objects), the playbook and
the topology are built once and live as long as the run. CPython's collector walks every
object it tracks at each full collection, and a growing heap triggers them: at 10,000 hosts
six full collections before the first command took 0.25 s and found nothing to free. So the
start-up builds with the collector paused, and what it built is then frozen (gc.freeze):
kept out of every later collection until the run ends, when it is handed back.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection in the body (bounded work that makes data to keep, not
    garbage); the collector as it was after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


__all__ = ["collector_paused", "frozen_heap"]
