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
from typing import Any, Protocol

from fleetfix.booleans import boolean
from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.lockstep import outside
from fleetfix.engine.variables import PlayScope, compose
from fleetfix.errors import FleetfixError, PlaybookError
from fleetfix.playbook.catalog import default_step_name
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.model import Play, Step, StepKind, handler_search_order


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
    handlers: list[Step] = field(init=False)
    """The play's handlers, then those of roles included as it runs (`add`)."""
    pending: dict[str, set[int]] = field(default_factory=dict)
    """Per host, the handlers notified and not yet run (by their place in `handlers`)."""
    warnings: list[str] = field(default_factory=list)
    """Topics that named no handler, with error_on_missing_handler false."""
    hidden: set[str] = field(init=False)
    """Directories of roles only an include_role brings in, whose handlers no notify finds
    until the include has run (ansible-core adds them to the play's then: `reveal`)."""
    order: list[int] = field(init=False)
    """handler_search_order(handlers), kept as `handlers` changes (`add`): every notified
    topic of every host walks it."""

    def __post_init__(self) -> None:
        self.handlers = list(self.play.handlers)
        self.order = handler_search_order(self.handlers)
        included: set[str] = set()
        listed: set[str] = set()
        for section in (self.play.pre_tasks, self.play.tasks, self.play.post_tasks):
            _role_paths(section, included, listed, within=False)
        self.hidden = included - listed

    def reveal(self, steps: Sequence[Step]) -> None:
        """An include_role ran: the handlers of the roles its steps come from are notifiable
        from now on, for every host (ansible-core's play-wide handler list)."""
        self.hidden -= {s.role.path for s in steps if s.role is not None}

    def take(self, state: HostState) -> None:
        """The host's notified topics (rendered with its variables; a list names several) as
        the handlers they name or that listen to them, as ansible-core 2.19's
        search_handlers_by_notification: the handler of a name it finds first (`ROLE : NAME` too),
        then every handler listening to the topic (`ROLE : TOPIC` for a role's), once per
        name. A topic naming nothing is an error, or with error_on_missing_handler false a
        warning (kept in `warnings`) and nothing runs for it.

        Raises:
            PlaybookError: a topic that names no handler (Ansible's run-time error).
        """
        if not state.notified:
            return
        written, state.notified = sorted(state.notified), set()
        pending = self.pending.setdefault(state.name, set())
        for topic in self._topics(state, written):
            found = self._named(state, topic) + self._listening(topic)
            if found:
                pending.update(found)
                continue
            message = (
                f"The requested handler {topic!r} was not found in either the main handlers"
                " list nor in the listening handlers list"
            )
            if self.ctx.options.error_on_missing_handler:
                raise PlaybookError(message, self.play.position)
            self.warnings.append(message)

    def add(self, handlers: Sequence[Step]) -> None:
        """Handlers an include_role brought in while the play runs: after the play's, as
        ansible-core appends an included role's handlers (notifiable from then on)."""
        known = {(h.position, h.name) for h in self.handlers}
        self.handlers.extend(h for h in handlers if (h.position, h.name) not in known)
        self.order = handler_search_order(self.handlers)

    def _topics(self, state: HostState, written: Sequence[str]) -> list[str]:
        """The topics as the host renders them (a list names several), once each."""
        topics: list[str] = []
        for topic in written:
            value: Any = topic
            if is_template(topic):
                try:
                    value = self.ctx.templar.render(topic, compose(self.ctx, state, self.scope))
                except FleetfixError:
                    value = topic
            values = value if isinstance(value, list | tuple) else [value]
            topics.extend(str(v) for v in values)
        return list(dict.fromkeys(topics))

    def _named(self, state: HostState, topic: str) -> list[int]:
        """The handler named `topic` (with or without its role's prefix) that Ansible finds
        first (handler_search_order: the last source's, the first of a name in it), as a list."""
        for index in self.order:
            handler = self.handlers[index]
            if self._hidden(handler):
                continue
            name = self._name(state, handler)
            if name is not None and topic in _names(handler, name):
                return [index]
        return []

    def _listening(self, topic: str) -> list[int]:
        """Every handler listening to `topic` (`ROLE : TOPIC` for a role's), once per name."""
        seen: set[str] = set()
        found: list[int] = []
        for index in self.order:
            handler = self.handlers[index]
            plain = _plain_name(handler)  # a role's and the play's of one name: the first
            if topic not in _listens(handler) or plain in seen or self._hidden(handler):
                continue
            if not _unnamed(handler, plain):  # unnamed ones all run (ansible-core: name "")
                seen.add(plain)
            found.append(index)
        return found

    def _hidden(self, handler: Step) -> bool:
        return handler.role is not None and handler.role.path in self.hidden

    def _name(self, state: HostState, handler: Step) -> str | None:
        """The handler's name rendered; None: it cannot be, and the handler is unusable by
        name, as Ansible's (which warns when it has no listen: topics either)."""
        if not is_template(handler.name):
            return handler.name
        try:
            variables = compose(self.ctx, state, self.scope, handler.vars)
            return str(self.ctx.templar.render(handler.name, variables))
        except FleetfixError:
            return None

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
            index = -1
            while (index := index + 1) < len(self.handlers):  # `add` may grow it meanwhile
                handler = self.handlers[index]
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


def _role_paths(
    steps: Sequence[Step], included: set[str], listed: set[str], *, within: bool
) -> None:
    """The directories of the roles whose steps `steps` hold: those under a literal
    include_role (`within`) into `included`, the others (roles:, import_role) into `listed`."""
    for step in steps:
        if step.role is not None:
            (included if within else listed).add(step.role.path)
        inner = step.args.get("steps") if isinstance(step.args, dict) else None
        nested = within or step.kind is StepKind.INCLUDE_ROLE
        if isinstance(inner, tuple):
            _role_paths(inner, included, listed, within=nested)
        for part in (step.block, step.rescue, step.always):
            _role_paths(part, included, listed, within=within)


def _plain_name(handler: Step) -> str:
    """The handler's name without its role's `ROLE : ` (ansible-core's Handler.name)."""
    if handler.role is None:
        return handler.name
    return handler.name.removeprefix(f"{handler.role.name} : ")


def _unnamed(handler: Step, plain: str) -> bool:
    """Whether the handler was written without a name: (it carries the one fleetfix gives)."""
    try:
        return plain == default_step_name(handler.kind, handler.args)
    except (KeyError, TypeError):
        return False


def _names(handler: Step, name: str) -> set[str]:
    """What notifies a handler by name: its (rendered) name, and a role's without `ROLE : `."""
    if handler.role is None:
        return {name}
    return {name, name.removeprefix(f"{handler.role.name} : ")}


def _listens(handler: Step) -> set[str]:
    """A handler's listen: topics, a role's also as `ROLE : TOPIC` (its plain name, which
    playbook/roles.py lists among them, is a name: found by `_names`)."""
    if handler.role is None:
        return set(handler.listen)
    role = handler.role.name
    plain = handler.name.removeprefix(f"{role} : ")
    own = [t for t in handler.listen if t != plain]
    return {*own, *(f"{role} : {t}" for t in own)}
