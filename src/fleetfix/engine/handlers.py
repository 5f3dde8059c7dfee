"""Handlers: what each host has notified, force_handlers, and flushing them as Ansible does.

A step that changed something adds its `notify:` topics to its host (HostState.notified,
engine/steps.py). A flush turns those topics into the handlers they name or that listen to
them (`Handlers.take`), then runs the pending handlers in definition order, each across the
hosts that notified it (engine/lockstep.py `outside`: a flush takes no turns). The play runner
(engine/play.py) says when to flush (a section's end, meta: flush_handlers) and how a handler
runs on a host (`HandlerRunner`), as it runs any step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fleetfix.booleans import boolean
from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.lockstep import outside
from fleetfix.engine.variables import PlayScope, compose
from fleetfix.errors import FleetfixError
from fleetfix.playbook.model import Play, Step


class HandlerRunner(Protocol):
    """What a flush needs from the play runner."""

    def announce_handler(self, handler: Step) -> None:
        """The handler's RUNNING HANDLER banner."""

    async def run_handler(self, state: HostState, handler: Step) -> None:
        """The handler (a step, or an include) on one host."""

    def stop_flush(self) -> bool:
        """After a handler: whether the flush must stop (any_errors_fatal)."""


@dataclass(slots=True)
class Handlers:
    """One batch's handler notifications, pending per host until a flush runs them."""

    ctx: RunContext
    play: Play
    scope: PlayScope
    pending: dict[str, set[int]] = field(default_factory=dict)
    """Per host, the handlers notified and not yet run (by their place in the play's list)."""

    def take(self, state: HostState) -> None:
        """The host's notified topics as the handlers they name or that listen to them."""
        if not state.notified:
            return
        pending = self.pending.setdefault(state.name, set())
        for index, handler in enumerate(self.play.handlers):
            if handler.name in state.notified or not state.notified.isdisjoint(handler.listen):
                pending.add(index)
        state.notified.clear()

    def forced(self, state: HostState) -> bool:
        """force_handlers: a host that failed still runs the handlers it notified (not one that
        was unreachable or ended)."""
        return self.force_handlers() and state.failed and not (state.unreachable or state.ended)

    def force_handlers(self) -> bool:
        """The play's force_handlers, else the command line's (--force-handlers, or
        ANSIBLE_FORCE_HANDLERS / ansible.cfg), as Ansible resolves it."""
        if self.play.force_handlers is not None:
            return self.play.force_handlers
        return self.ctx.options.force_handlers

    async def flush(self, runner: HandlerRunner, scope: Sequence[HostState]) -> None:
        """Run notified handlers in definition order on the hosts that notified them, once
        through the list, as Ansible's flush: a handler notifying a later one runs it in this
        flush; one notifying an earlier one (or itself) leaves it for the next flush. A topic
        notifies every handler named so or listening to it; a run_once handler runs on the
        first of its hosts, for all of them."""
        with outside():
            for state in scope:
                self.take(state)
            for index, handler in enumerate(self.play.handlers):
                states = self._due(index, scope)
                if not states:
                    continue
                runner.announce_handler(handler)
                if runs_once(self.ctx, self.scope, handler, states[0]):
                    states = states[:1]
                await asyncio.gather(*(self._run(runner, s, handler) for s in states))
                for state in scope:
                    self.take(state)
                if runner.stop_flush():
                    break

    def _due(self, index: int, scope: Sequence[HostState]) -> list[HostState]:
        """The hosts of `scope` the handler at `index` is pending for, now taken off."""
        states = [
            s
            for s in scope
            if index in self.pending.get(s.name, ()) and (s.active or self.forced(s))
        ]
        for state in states:
            self.pending[state.name].discard(index)
        return states

    async def _run(self, runner: HandlerRunner, state: HostState, handler: Step) -> None:
        if self.forced(state):  # force_handlers: the failed host runs it, and stays failed
            state.failed = False
            try:
                await runner.run_handler(state, handler)
            finally:
                state.failed = True
            return
        await runner.run_handler(state, handler)


def runs_once(ctx: RunContext, scope: PlayScope, step: Step, first: HostState) -> bool:
    """The step's run_once; a template is rendered with `first`'s variables (the first host
    the step runs on, as ansible-core's linear strategy does); `omit` or a value that is not a
    boolean: not once (the step then runs on every host, and fails there if its own args
    fail)."""
    if not isinstance(step.run_once, str):
        return step.run_once
    try:
        variables = compose(ctx, first, scope, step.vars)
        return boolean(ctx.templar.render(step.run_once, variables))
    except (FleetfixError, ValueError):
        return False
