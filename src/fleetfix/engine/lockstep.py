"""Ansible's linear strategy: every host of a batch at the same step before any goes on.

Each host walks the play on its own (blocks, rescue, always, includes: engine/play.py), and
before each step it takes a turn here. A turn is given when no host is running a step: to the
hosts waiting at the earliest step in playbook order (the key the walker gives, its place in
the play), together, as ansible-core's PlayIterator hands one task to every host at it. Hosts
at a later step (others rescuing, a host that skipped an include) wait; so a rescue runs after
the other hosts finished the block's steps, as ansible-playbook shows it.

When every host of a turn is done with its step (`Turn.arrive`), and before any walks on, the
play runner looks at what the step did: any_errors_fatal marks the other hosts failed there,
so each goes on from the step it ran as if that had failed (to its rescue or always), as
ansible-core's iterator does.
Work that is done once for the hosts of a turn (a batch-wide meta step, the step gate,
run_once) goes through `Turn.once`: the first host to ask runs it, the others wait for it.
Handlers run by a flush are outside the lockstep (`outside`): the flush runs them per handler
across its hosts.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fleetfix.playbook.model import Step

Key = tuple[Any, ...]
"""A step's place in the play: section, then index (and 0/1/2 for block/rescue/always, the
inclusion, ...) at each depth; tuples compare in playbook order."""

_OUTSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("lockstep_outside", default=False)


@contextmanager
def outside() -> Iterator[None]:
    """Steps run in here (and in tasks made in here) take no turns: a handler flush."""
    token = _OUTSIDE.set(True)
    try:
        yield
    finally:
        _OUTSIDE.reset(token)


@dataclass(eq=False)
class Turn:
    """One step given to the hosts waiting at it."""

    key: Key
    step: Step | None
    """None: a section's implicit flush_handlers."""
    hosts: list[str]
    failed: set[str] = field(default_factory=set)
    """Hosts whose step failed (or was unreachable) in this turn, ignored failures not."""
    between: Callable[[Turn], None] | None = None
    run_once: bool = False
    """The step ran on the turn's first host for all (its failure is fatal for all)."""
    _once: dict[str, asyncio.Future[Any]] = field(default_factory=dict)
    _arrived: set[str] = field(default_factory=set)
    _all_arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def arrive(self, host: str) -> None:
        """The host is done with the step; wait for the turn's other hosts, then `between`."""
        self._arrived.add(host)
        if len(self._arrived) >= len(self.hosts) and not self._all_arrived.is_set():
            if self.between is not None:
                self.between(self)
            self._all_arrived.set()
        await self._all_arrived.wait()

    async def once(self, name: str, work: Callable[[], Awaitable[Any]]) -> Any:
        """`work`'s result, run by the first host of the turn that asks for `name`."""
        future = self._once.get(name)
        if future is None:
            future = asyncio.ensure_future(work())
            self._once[name] = future
        return await asyncio.shield(future)


@dataclass(eq=False)
class _Waiting:
    key: Key
    step: Step | None
    future: asyncio.Future[Turn | None]


class Lockstep:
    """The turns of one batch's hosts. `between` is called with a turn once every host of it
    is done with its step, before any walks on."""

    def __init__(self, hosts: list[str], between: Callable[[Turn], None]) -> None:
        self._moving = set(hosts)
        self._order = {host: index for index, host in enumerate(hosts)}
        self._waiting: dict[str, _Waiting] = {}
        self._between = between

    async def turn(self, host: str, key: Key, step: Step | None) -> Turn | None:
        """Wait for `step`'s turn; None when the host must not run it (marked failed, or
        the play ended while it waited): the walker looks at the host's state again."""
        if _OUTSIDE.get():
            return Turn(key, step, [host])
        future: asyncio.Future[Turn | None] = asyncio.get_running_loop().create_future()
        self._waiting[host] = _Waiting(key, step, future)
        self._moving.discard(host)
        self._advance()
        return await future

    def done(self, host: str) -> None:
        """The host walks no further in this batch."""
        self._waiting.pop(host, None)
        self._moving.discard(host)
        self._advance()

    def waiting(self) -> list[str]:
        return list(self._waiting)

    def release(self, host: str) -> None:
        """Let a waiting host go without its turn (its state changed: failed or ended)."""
        waiting = self._waiting.pop(host, None)
        if waiting is not None:
            self._moving.add(host)
            waiting.future.set_result(None)

    def _rank(self, host: str) -> int:
        """The host's place in the batch: a turn's hosts run in inventory order, as Ansible's."""
        return self._order[host]

    def _advance(self) -> None:
        if self._moving:
            return
        if not self._waiting:
            return
        key = min(w.key for w in self._waiting.values())
        hosts = sorted((h for h, w in self._waiting.items() if w.key == key), key=self._rank)
        turn = Turn(key, self._waiting[hosts[0]].step, hosts, between=self._between)
        for host in hosts:
            waiting = self._waiting.pop(host)
            self._moving.add(host)
            waiting.future.set_result(turn)
