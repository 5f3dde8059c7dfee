"""Running one play: batches, linear/free strategies, blocks, handlers and failure gates."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Coroutine, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from fleetfix.engine.batches import behind_parked, failure_exceeds, order_hosts, serial_batches
from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.handlers import Handlers, runs_once
from fleetfix.engine.hoststep import StepEnv, with_lines
from fleetfix.engine.includes import Inclusion, inclusions
from fleetfix.engine.kinds import UNLOADED_KEY
from fleetfix.engine.lockstep import Key, Lockstep, Turn
from fleetfix.engine.remediate import HOLD_KEY
from fleetfix.engine.revisit import REVISIT_POLL, defer_all, look_again
from fleetfix.engine.steps import execute
from fleetfix.engine.tags import PlayTags, selected
from fleetfix.engine.variables import PlayScope, compose
from fleetfix.errors import FleetfixError
from fleetfix.events import BatchStarted, PlayFinished, PlayStarted, SafetyStop, TaskStarted
from fleetfix.facts.step import SMART_KEY, gathered_already, gathering_step
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.imports import inherit, set_keywords
from fleetfix.playbook.includes import INCLUDE_KINDS
from fleetfix.playbook.model import Play, Step, StepKind
from fleetfix.playbook.vars_files import is_templated as is_templated_files
from fleetfix.playbook.vars_files import read_vars_files
from fleetfix.results import Status, StepResult


@dataclass(slots=True)
class BatchRun:
    """One batch of a play in progress."""

    ctx: RunContext
    env: StepEnv
    hosts: list[str]
    tags: PlayTags
    announced: set[Hashable] = field(default_factory=set)
    """Steps whose TASK banner this batch printed, by place in the playbook: a block's
    children are copied per host (_inherit), so a banner is once per step, not per copy."""
    stop_play: bool = False
    ended_by: str = ""
    """'batch' or 'play' when meta: end_batch/end_play stopped it: after end_batch the play
    goes on with its next batch, after end_play the run with its next play (as Ansible)."""
    fatal: bool = False
    """any_errors_fatal: a host failed (unrescued); every other host stops before its next
    step, inside blocks too."""
    judged: list[str] | None = None
    """The hosts max_fail_percentage counts (None: the batch's): a batch of revisited parked
    hosts is judged with the batches they were parked in."""

    lockstep: Lockstep | None = None
    """The linear strategy's turns (None under the free strategy)."""
    rescuable: dict[str, int] = field(default_factory=dict)
    """Per host, how many blocks with a rescue it is inside the steps of: a failure there is
    not yet a failed host (max_fail_percentage waits for the rescue, as Ansible's)."""
    cleared: set[str] = field(default_factory=set)
    """Hosts whose errors a meta: clear_host_errors cleared (a block's always in progress
    does not restore the failure it held back)."""
    marked: set[str] = field(default_factory=set)
    """Hosts any_errors_fatal marked failed: their rescue runs but is not counted as one."""
    unloaded: dict[str, int] = field(default_factory=dict)
    """Per host, the inclusions its last step could not read (a missing file or role): a
    rescue that catches them leaves them counted as failed, none as rescued (ansible-core)."""
    included: dict[str, int] = field(default_factory=dict)
    """Each included file (or role) in the order this batch first included it: its steps'
    place after the include, so two files included at one step run one after the other."""
    handlers: Handlers = field(init=False)
    """The handlers notified and not yet run (engine/handlers.py)."""

    def __post_init__(self) -> None:
        self.handlers = Handlers(self.ctx, self.env.play, self.env.scope)

    def states(self) -> list[HostState]:
        return [self.ctx.host_state(h) for h in self.hosts]

    async def turn(self, state: HostState, key: Key, step: Step | None) -> Turn | None:
        """The host's turn at `step` (at once outside the linear strategy)."""
        if self.lockstep is None:
            return Turn(key, step, [state.name])
        return await self.lockstep.turn(state.name, key, step)

    def included_order(self, steps: Sequence[Step]) -> int:
        name = steps[0].position.file if steps else ""
        return self.included.setdefault(name, len(self.included))

    def announce_handler(self, handler: Step) -> None:
        """A handler's banner, each time it runs (a later flush runs it again)."""
        self._banner(handler, handler=True)

    async def run_handler(self, state: HostState, handler: Step) -> None:
        await _top_step(self, state, handler)

    def stop_flush(self) -> bool:
        """any_errors_fatal stopped the batch during a flush: the gates, and no more handlers."""
        if self.fatal:
            _check_gates(self)
        return self.fatal

    async def flush(self, states: list[HostState] | None = None) -> None:
        """The notified handlers of `states` (all the batch's hosts by default)."""
        await self.handlers.flush(self, states if states is not None else self.states())

    def judged_states(self) -> list[HostState]:
        return [self.ctx.host_state(h) for h in self.judged or self.hosts]

    def active(self) -> list[HostState]:
        return [s for s in self.states() if s.active]

    def announce(self, step: Step) -> None:
        """A step's TASK banner, once per step of the playbook in this batch."""
        key: Hashable = (step.key, step.name) if step.position else id(step)
        if key not in self.announced:
            self.announced.add(key)
            self._banner(step, handler=_IN_HANDLER.get())

    def _banner(self, step: Step, *, handler: bool) -> None:
        self.ctx.bus.emit(
            TaskStarted(
                name=self.shown_name(step),
                position=step.position,
                handler=handler,
                key=step.key,
                block=step.kind is StepKind.BLOCK,
            )
        )

    def shown_name(self, step: Step) -> str:
        """The step's name for its banner: rendered with the first active host's variables,
        as ansible-core's linear strategy does; as written when that cannot be done. An
        unnamed meta step's banner is Ansible's `meta`."""
        if step.kind is StepKind.META and step.name == f"meta: {step.args.get('name')}":
            return "meta"
        active = self.active()
        if not is_template(step.name) or not active:
            return step.name
        try:
            variables = compose(self.ctx, active[0], self.env.scope)
            return str(self.ctx.templar.render(step.name, variables))
        except Exception:  # a name is for display: an undefined variable must not fail the step
            return step.name


async def run_play(
    ctx: RunContext,
    play: Play,
    hosts: Sequence[str],
    playbook_dir: str,
    groups: Mapping[str, list[str]],
) -> bool:
    """Run `play` on `hosts`; False when a gate says the whole run must stop."""
    for host in hosts:
        ctx.host_state(host).ended = False  # meta: end_host ends one play, not the run
    hosts = [h for h in order_hosts(hosts, play.order) if ctx.host_state(h).active]
    ctx.bus.emit(PlayStarted(name=play.name, hosts=tuple(hosts), position=play.position))
    scope = PlayScope({}, tuple(hosts), (), groups, playbook_dir)
    file_vars = _vars_files(ctx, play, playbook_dir)
    play_vars = {h: _play_vars(ctx, play, ctx.host_state(h), scope, file_vars) for h in hosts}
    tags = PlayTags.of_play(ctx.templar, play, ctx.options.extra_vars, playbook_dir, file_vars)
    ctx.safety.start_play(play.max_unavailable_per)
    ctx.parking.start_play()
    batches = serial_batches(hosts, play.serial)
    capped = ctx.safety.batches(hosts, max(len(b) for b in batches) if batches else 1)
    batches = capped if capped is not None else batches
    size = max((len(b) for b in batches), default=1)
    plays = _PlayBatches(ctx, play, tuple(hosts), play_vars, groups, playbook_dir, tags, size)
    ended: bool | None = None
    for index, planned in enumerate(batches, start=1):
        postponed = plays.behind_parked(planned)
        plays.postponed += postponed
        batch = [host for host in planned if host not in postponed]
        ctx.bus.emit(BatchStarted(index=index, count=len(batches), hosts=tuple(batch)))
        ended = await plays.run(batch) if batch else None
        if ended is None and index < len(batches):
            ended = await _revisit(plays, until_done=False)
        if ended is not None:
            break
    if ended is None:
        ended = await _revisit(plays, until_done=True)
    if ctx.parking.waiting:
        defer_all(ctx, "the play stopped before their wait ended")
    ctx.bus.emit(PlayFinished(name=play.name))
    return ended is not False and ctx.result.aborted_by_safety is None


@dataclass(slots=True)
class _PlayBatches:
    """What every batch of one play shares: the play, its hosts and their vars, its tags."""

    ctx: RunContext
    play: Play
    hosts: tuple[str, ...]
    play_vars: dict[str, dict[str, Any]]
    groups: Mapping[str, list[str]]
    playbook_dir: str
    tags: PlayTags
    size: int
    """The most hosts a batch of the play has."""
    postponed: list[str] = field(default_factory=list)
    """Hosts whose batch came while parked hosts filled a capped domain of theirs: they run
    once a parked host's place is free (its wait over, or deferred), not held by the cap."""

    async def run(self, batch: list[str], judged: list[str] | None = None) -> bool | None:
        """Run one batch: None when the play goes on, else whether the run goes on after the
        play. A host parked in it stays out of service under the caps, not in its batch."""
        ctx = self.ctx
        scope = PlayScope(self.play_vars, self.hosts, tuple(batch), self.groups, self.playbook_dir)
        run = BatchRun(ctx, StepEnv(self.play, scope), list(batch), self.tags, judged=judged)
        await _run_batch(run)
        failed = {s.name for s in run.states() if s.failed or s.unreachable}
        ctx.safety.end_batch(batch, failed | ctx.parking.parked_in(batch))
        ctx.safety.correlate(ctx.result)
        stopped = run.stop_play and run.ended_by != "batch"
        judged_failed = {s.name for s in run.judged_states() if _counts_failed(s)}
        if stopped:
            return run.ended_by == "play"
        if batch and judged_failed.issuperset(run.judged or batch):
            # Ansible's rule: a batch in which every host failed (or was marked failed by
            # any_errors_fatal) ends the playbook: no later batch, no later play.
            return False
        return None

    async def again(self, hosts: list[str]) -> bool | None:
        """The play again for parked hosts whose wait is over, as a batch of their own, judged
        by max_fail_percentage with the batches they were parked in."""
        ctx = self.ctx
        for host in hosts:
            ctx.host_state(host).ended = False
        _forget_journaled(ctx, hosts)
        ctx.bus.emit(BatchStarted(index=0, count=0, hosts=tuple(hosts), revisit=True))
        return await self.run(hosts, ctx.parking.judged_with(hosts))

    def behind_parked(self, hosts: list[str]) -> list[str]:
        topology, caps = self.ctx.safety.topology, self.play.max_unavailable_per
        parked = self.ctx.parking.waiting
        if topology is None or not caps or not parked:
            return []
        return behind_parked(hosts, parked.keys(), caps, topology.domains_of)

    async def unblocked(self) -> bool | None:
        """Postponed hosts with room now, in cap-respecting batches (as `run`)."""
        blocked = self.behind_parked(self.postponed)
        ready = [host for host in self.postponed if host not in blocked]
        self.postponed = blocked
        for batch in self.ctx.safety.batches(ready, self.size) or ([ready] if ready else []):
            self.ctx.bus.emit(BatchStarted(index=0, count=0, hosts=tuple(batch), revisit=True))
            ended = await self.run(batch)
            if ended is not None:
                return ended
        return None


async def _revisit(plays: _PlayBatches, *, until_done: bool) -> bool | None:
    """Look again at the parked hosts (engine/revisit.py) and run the play again for those
    whose wait is over, then for postponed hosts with room now; with until_done, keep looking
    every REVISIT_POLL seconds until none is parked (each is deferred at its deadline). None
    when the play goes on, else whether the run goes on (as `_PlayBatches.run`)."""
    ctx = plays.ctx
    while True:
        ready = await look_again(ctx) if ctx.parking.waiting else []
        ended = await plays.again(ready) if ready else None
        if ended is None:
            ended = await plays.unblocked()
        if ended is not None or not until_done or not ctx.parking.waiting:
            return ended
        await asyncio.sleep(ctx.parking.pause(time.time(), REVISIT_POLL))


def _forget_journaled(ctx: RunContext, hosts: Sequence[str]) -> None:
    """A revisit runs the play afresh for its hosts: what a resumed run replays for them is
    the pass that parked them (a later pass the interrupted run finished is replayed in
    their first batch, and never parks them)."""
    resume = ctx.options.resume
    names = set(hosts)
    if not any(key[0] in names for key in (*resume.steps, *resume.intents)):
        return
    steps = {k: v for k, v in resume.steps.items() if k[0] not in names}
    intents = {k: v for k, v in resume.intents.items() if k[0] not in names}
    ctx.options = replace(ctx.options, resume=replace(resume, steps=steps, intents=intents))


def _play_vars(
    ctx: RunContext, play: Play, state: HostState, scope: PlayScope, file_vars: dict[str, Any]
) -> dict[str, Any]:
    """Play vars rendered for one host (in any order of reference), then vars_files on top.
    A var that cannot be rendered stays raw; a step that uses it reports the error there."""
    per_host = is_templated_files(play.vars_files)
    if not play.vars and not per_host:
        return dict(file_vars)  # nothing to render: no host's variables to compose
    base = compose(ctx, state, scope)
    try:
        rendered = ctx.templar.resolve(play.vars, base)
    except FleetfixError:
        rendered = dict(play.vars)
    if per_host:  # a file named by a template: rendered with this host's variables, as Ansible
        seen = {**base, **rendered, **ctx.options.extra_vars}
        file_vars = read_vars_files(ctx.templar, play.vars_files, seen, _files_dir(play, scope))
    return {**rendered, **file_vars}


def _files_dir(play: Play, scope: PlayScope) -> Path:
    return (
        Path(play.position.file).resolve().parent
        if play.position.line
        else Path(scope.playbook_dir)
    )


def _vars_files(ctx: RunContext, play: Play, playbook_dir: str) -> dict[str, Any]:
    """vars_files are relative to the play's own file (an imported playbook's, as Ansible)."""
    base = Path(play.position.file).resolve().parent if play.position.line else Path(playbook_dir)
    files = play.vars_files
    return read_vars_files(ctx.templar, files, ctx.options.extra_vars, base) if files else {}


async def _run_batch(run: BatchRun) -> None:
    play = run.env.play
    if play.strategy in ("free", "host_pinned"):
        await asyncio.gather(*(_free_host(run, s) for s in run.states()))
        _check_gates(run)
        return
    states = run.states()
    run.lockstep = Lockstep([s.name for s in states], lambda turn: _between(run, turn))
    await _all_hosts(run, [_linear_host(run, s) for s in states])


async def _all_hosts(run: BatchRun, walks: list[Coroutine[Any, Any, None]]) -> None:
    """Every host's walk; when one raises, the others are cancelled (none is left waiting
    for a turn that cannot come) and the error goes on."""
    tasks = [asyncio.ensure_future(walk) for walk in walks]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


T = TypeVar("T")

_SECTION_END = 1 << 62
"""The key of a section's implicit flush_handlers: after every step of the section."""


async def _linear_host(run: BatchRun, state: HostState) -> None:
    """One host's walk through the play under the linear strategy (engine/lockstep.py):
    each section, then its implicit flush_handlers, as ansible-core compiles a play."""
    try:
        play = run.env.play
        await _gather_facts(run, state)
        for index, section in enumerate((play.pre_tasks, play.tasks, play.post_tasks)):
            await _host_steps(run, state, section, run.env, (index,))
            if run.stop_play:
                return
            # An empty section notified nothing since the last flush: no flush turn (at
            # 10,000 hosts, pre_tasks' was half of the work before the first command),
            # unless a handler notified itself (or an earlier one) in that flush
            due = section or state.notified or run.handlers.pending.get(state.name)
            if due and (state.active or run.handlers.forced(state)):
                turn = await run.turn(state, (index, _SECTION_END), None)
                if turn is not None and not run.stop_play:
                    # the hosts' states listed by the one host that runs it: every host
                    # listing them made the batch quadratic (26 s to a first command at 10k)
                    await turn.once("flush", functools.partial(_flush, run, turn))
            if run.stop_play:
                return
    finally:
        if run.lockstep is not None:
            run.lockstep.done(state.name)


async def _gather_facts(run: BatchRun, state: HostState) -> None:
    """The play's implicit Gathering Facts step, ahead of pre_tasks (facts/step.py), when the
    play gathers under the run's `gathering`; 'smart' leaves out hosts with facts already."""
    step = gathering_step(run.env.play, run.ctx.options.gathering)
    if step is None or (SMART_KEY in step.args and gathered_already(state.gathered)):
        return
    if _wanted(run, step):
        await _host_step(run, state, step, run.env, (-1,))


async def _flush(run: BatchRun, turn: Turn) -> None:
    await run.flush(_states(run, turn))


def _states(run: BatchRun, turn: Turn) -> list[HostState]:
    return [run.ctx.host_state(h) for h in turn.hosts]


def _between(run: BatchRun, turn: Turn) -> None:
    """When every host of a turn is done with its step: Ansible's any_errors_fatal (a
    run_once step's failure too) marks every other host failed (not counted in the recap),
    so each goes on from the step it ran as if that had failed, to its rescue or always and
    no further; hosts waiting at another step stop there. max_fail_percentage stops the play
    (exit 6, a safety stop)."""
    play, lockstep, step = run.env.play, run.lockstep, turn.step
    fatal = step is not None and _fatal(play, step, turn.run_once)
    if step is not None and turn.failed and not step.ignore_errors and fatal:
        for state in run.states():
            if state.name not in turn.failed and state.active:
                state.failed = True
                run.marked.add(state.name)
                if lockstep is not None:
                    lockstep.release(state.name)
        return  # any_errors_fatal said it: not a max_fail_percentage safety stop as well
    if _check_max_fail(run) and lockstep is not None:
        for host in lockstep.waiting():
            lockstep.release(host)


_FROM_INCLUDE = (
    *("become", "become_user", "environment", "check_mode", "delegate_to", "timeout"),
    *("any_errors_fatal", "no_log"),
)


def _from_include(include: Step, steps: Sequence[Step]) -> list[Step]:
    """Included steps take what the include took from the blocks around it (check_mode,
    become, environment, ...), as Ansible's parent chain gives it; not its `when` (evaluated
    once, for the include) nor its tags (they select the include). The same inheritance as
    an import's (playbook/imports.py `inherit`)."""
    keywords = set_keywords(include, _FROM_INCLUDE)
    return [inherit(child, keywords) for child in steps] if keywords else list(steps)


def _first(own: T | None, inherited: T | None) -> T | None:
    """The step's own keyword, else the block's (Ansible's inheritance)."""
    return own if own is not None else inherited


def _joined(own: tuple[str, ...], inherited: tuple[str, ...]) -> tuple[str, ...]:
    """A step's notify topics and those of the block (or include) around it, once each."""
    return tuple(dict.fromkeys((*own, *inherited))) if inherited else own


def _fatal(play: Play, step: Step, run_once: bool) -> bool:
    """any_errors_fatal for this step: its own (or its block's), else the play's; a run_once
    step's failure is fatal too, as in ansible-core's linear strategy."""
    own = step.any_errors_fatal
    return (own if own is not None else play.any_errors_fatal) or run_once


def _runs_once(run: BatchRun, step: Step, turn: Turn) -> bool:
    """The step's run_once, rendered for the turn's first host (engine/handlers.py)."""
    return runs_once(run.ctx, run.env.scope, step, run.ctx.host_state(turn.hosts[0]))


async def _host_steps(
    run: BatchRun, state: HostState, steps: Sequence[Step], env: StepEnv, place: Key = ()
) -> None:
    for index, step in enumerate(steps):
        if not state.active or run.fatal or run.stop_play:
            return
        if not _wanted(run, step):
            continue
        await _host_step(run, state, step, env, (*place, index))


async def _host_step(
    run: BatchRun,
    state: HostState,
    step: Step,
    env: StepEnv | None = None,
    place: Key = (),
    *,
    banner: bool = True,
) -> None:
    """One step (or a whole block) on one host, in its turn, holding a fork while it runs;
    `banner`: its TASK banner is printed (a handler's RUNNING HANDLER banner came first).
    What an include brought in is walked once every host of the turn is done with it."""
    env = env or run.env
    if not _IN_HANDLER.get() and env.scope.roles.passes(state.name, step):
        return  # its role's use was ended (meta: end_role) or ran already (no duplicates)
    if step.kind is StepKind.BLOCK:
        run.announce(step)
        await _block(run, state, step, env, place)
        return
    turn = await run.turn(state, place, step)
    if turn is None:
        return
    try:
        found = await _in_turn(run, state, step, env, turn, banner=banner)
    except BaseException:
        await turn.arrive(state.name)
        raise
    if state.notified and not _IN_HANDLER.get():
        # ansible-core resolves a notify when the step reports it: one naming no handler
        # stops the run here (PlaybookError) while the other hosts wait at this step's end,
        # so none runs a later step (_all_hosts cancels them); a flush takes the rest
        run.handlers.take(state)
    await turn.arrive(state.name)
    for number, inclusion in enumerate(found):
        if not state.active or run.stop_play:
            return
        where = (*turn.key, number, run.included_order(inclusion.steps))
        scoped = env.with_vars(inclusion.variables)
        if step.kind is StepKind.INCLUDE_ROLE:  # each inclusion is a use: one an end_role
            env.scope.roles.again(state.name)  # ended runs again (a loop's next item)
        await _host_steps(run, state, _from_include(step, inclusion.steps), scoped, where)


async def _in_turn(
    run: BatchRun, state: HostState, step: Step, env: StepEnv, turn: Turn, *, banner: bool
) -> list[Inclusion]:
    if not state.active:
        return []
    if step.kind is StepKind.META and step.args.get("name") in _BATCH_METAS:
        await turn.once("meta", lambda: _batch_meta(run, step, env, turn))
        return []
    if banner:
        run.announce(step)
    gate = run.ctx.options.step_gate
    if gate is not None and not await turn.once("gate", lambda: gate(step.name)):
        return []
    if step.kind is StepKind.ADD_HOST or _runs_once(run, step, turn):  # add_host: as Ansible
        turn.run_once = True
        found = await turn.once("run_once", lambda: _run_once(run, step, turn, env))
        return found if state.name == turn.hosts[0] else []  # a run_once include: the first's
    return await _run_step(run, state, step, env, turn)


async def _run_step(
    run: BatchRun, state: HostState, step: Step, env: StepEnv, turn: Turn
) -> list[Inclusion]:
    return (await _step_result(run, state, step, env, turn))[1]


async def _step_result(
    run: BatchRun, state: HostState, step: Step, env: StepEnv, turn: Turn
) -> tuple[StepResult, list[Inclusion]]:
    async with run.ctx.forks:
        result = await execute(run.ctx, env, state, step)
    env.scope.roles.ran(state.name, step, result)
    if _fails(result):
        turn.failed.add(state.name)
    run.unloaded.pop(state.name, None)
    if step.kind not in INCLUDE_KINDS:
        return result, []
    unloaded = _unloaded(result)
    if unloaded:  # each inclusion it could not read is a failure of its own, as Ansible's
        run.unloaded[state.name] = unloaded
        run.ctx.stats(state.name).failed += unloaded - 1
    found = inclusions(run.ctx, step, result)  # walked like a block's steps, after the turn
    if step.kind is StepKind.INCLUDE_ROLE:  # its role's handlers are notifiable from now on
        run.handlers.reveal([s for inclusion in found for s in inclusion.steps])
    if step.loop is not None and found:  # Ansible counts each item's inclusion as ok
        run.ctx.stats(state.name).ok += len(found) - 1
    return result, found


def _unloaded(result: StepResult) -> int:
    """How many of a failed include's inclusions (one, or one per loop item) could not be
    read."""
    if result.status is not Status.FAILED:
        return 0
    items = result.data.get("results")
    if not isinstance(items, list):
        return 1 if UNLOADED_KEY in result.data else 0
    return sum(1 for item in items if isinstance(item, dict) and UNLOADED_KEY in item)


def _fails(result: StepResult) -> bool:
    """A failed (not ignored) or unreachable result, for any_errors_fatal; a cap or budget
    hold is not a failed fix (`_held`)."""
    if result.status is Status.UNREACHABLE:
        return True
    return result.status is Status.FAILED and HOLD_KEY not in result.data


_BATCH_METAS = frozenset(
    {"flush_handlers", "end_play", "end_batch", "clear_host_errors", "refresh_inventory"}
)


async def _batch_meta(run: BatchRun, step: Step, env: StepEnv, turn: Turn) -> None:
    """A meta step that acts on the hosts of its turn (flush_handlers) or on the whole batch
    (end_play, end_batch, clear_host_errors). The batch-wide ones run once, on the turn's
    first host, as Ansible runs them: their `when` is that host's, and its result is printed
    (`skipping` when the when does not hold) but never counted."""
    states = [s for s in _states(run, turn) if s.active]
    if not states:
        return
    run.announce(step)  # Ansible shows a banner for a meta step too
    action = step.args.get("name")
    if action == "flush_handlers":
        if _meta_holds(run, step, states):
            await run.flush(states)
        return
    async with run.ctx.forks:
        result = await execute(run.ctx, env, states[0], step)
    if result.status is Status.SKIPPED or action == "refresh_inventory":  # the step did it
        return
    if action == "clear_host_errors":
        for state in run.states():
            if not state.unreachable:
                state.failed = False
                state.cleared_failures = run.ctx.stats(state.name).failed
                run.cleared.add(state.name)  # also a failure an always holds back (_block)
        return
    for state in run.active():
        state.ended = True
    run.stop_play = True
    run.ended_by = "batch" if action == "end_batch" else "play"
    if run.lockstep is not None:
        for host in run.lockstep.waiting():
            run.lockstep.release(host)


def _meta_holds(run: BatchRun, step: Step, states: list[HostState]) -> bool:
    """Whether a flush_handlers step's `when` holds for any of its hosts. A condition that
    cannot be evaluated counts as holding."""
    if not step.when:
        return True
    for state in states:
        variables = compose(run.ctx, state, run.env.scope, step.vars)
        try:
            if all(run.ctx.templar.evaluate(c, variables) for c in step.when):
                return True
        except FleetfixError:
            return True
    return False


async def _free_host(run: BatchRun, state: HostState) -> None:
    play = run.env.play
    await _gather_facts(run, state)
    for index, section in enumerate((play.pre_tasks, play.tasks, play.post_tasks)):
        for number, step in enumerate(section):
            if not state.active or run.fatal or run.stop_play:
                return
            if _wanted(run, step):
                await _host_step(run, state, step, run.env, (index, number))
                # any_errors_fatal (ansible-playbook ignores it under free: decisions.md): a
                # failure no rescue caught stops every other host before its next step.
                if state.failed and _fatal(play, step, run_once=False):
                    run.fatal = True
    await run.flush([state])


_IN_HANDLER: contextvars.ContextVar[bool] = contextvars.ContextVar("in_handler", default=False)
"""Set while a handler runs: the steps a handler include brings in are handlers too (their
banners are RUNNING HANDLER, as ansible-core's)."""


async def _top_step(run: BatchRun, state: HostState, step: Step) -> None:
    """A step (or whole block) on one host outside the lockstep (a handler); an unrescued
    failure there is what any_errors_fatal stops every other host for."""
    token = _IN_HANDLER.set(True)
    try:
        await _host_step(run, state, step, banner=False)
    finally:
        _IN_HANDLER.reset(token)
    if state.failed and run.env.play.any_errors_fatal:
        run.fatal = True


async def _block(
    run: BatchRun, state: HostState, block: Step, env: StepEnv, place: Key = ()
) -> None:
    """block/rescue/always with Ansible's semantics; a failure a rescue caught counts as rescued.
    The block's `when` is each of its steps' (evaluated before theirs, step by step)."""
    env = env.with_vars(block.vars)
    inherited = _inherit(block)
    counted = run.ctx.result.stats.get(state.name)  # not ctx.stats: a host no step counts
    failures_before = counted.failed if counted is not None else 0  # has no recap line
    if block.rescue:
        run.rescuable[state.name] = run.rescuable.get(state.name, 0) + 1
    try:
        await _host_steps(run, state, inherited(block.block), env, (*place, 0))
    finally:
        if block.rescue:
            run.rescuable[state.name] -= 1
    if state.failed and block.rescue and not _held(state) and not run.stop_play:
        stats = run.ctx.stats(state.name)
        stats.failed = failures_before
        unloaded = run.unloaded.pop(state.name, 0)
        if unloaded:  # ansible-core counts an include it could not read, and no rescue
            stats.failed += unloaded
            state.cleared_failures += unloaded  # in the recap only: the host was rescued
        elif state.name in run.marked:
            run.marked.discard(state.name)  # Ansible counts no rescue of a marked host
        else:
            stats.rescued += 1  # a failure a rescue caught, whatever the rescue does
        state.failed = False
        _expose_failure(state)
        await _host_steps(run, state, inherited(block.rescue), env, (*place, 1))
    if block.always and not run.stop_play:
        was_failed = state.failed
        state.failed = False
        run.cleared.discard(state.name)
        await _host_steps(run, state, inherited(block.always), env, (*place, 2))
        cleared = state.name in run.cleared
        state.failed = state.failed or (was_failed and not cleared)


def _held(state: HostState) -> bool:
    """The block failed because a topology cap or the repair budget held a disruptive action
    (HOLD_KEY in its result). That is not a failed fix: a rescue written for one ("leave
    drained, needs RMA", "jobs still running, deferred") would say what did not happen and act
    on a node nothing was tried on. The host stays held, as it would outside a block (exit 6).
    A max_attempts or cooldown hold is the fix having failed before, and is rescued."""
    return state.last_failure is not None and HOLD_KEY in state.last_failure[1].data


def _counts_failed(state: HostState) -> bool:
    """Failed or unreachable, for any_errors_fatal, max_fail_percentage and "every host of the
    batch failed". A host a cap or the budget held (`_held`) did not fail a fix: a node a human
    drained fills its rack's place, and holding its rack-mates must not stop the other racks'
    work. The hold itself still makes the run exit 6."""
    return state.unreachable or (state.failed and not _held(state))


def _expose_failure(state: HostState) -> None:
    """What a rescue sees, as in Ansible: `ansible_failed_task` (the failed step's keywords) and
    `ansible_failed_result` (its registered value). Host facts, so they stay defined for the
    rest of the run, as ansible-core's non-persistent facts do; values, never templates."""
    if state.last_failure is None:
        return
    step, result = state.last_failure
    state.facts["ansible_failed_task"] = failed_task(step)
    state.facts["ansible_failed_result"] = with_lines(result.data)


def failed_task(step: Step) -> dict[str, Any]:
    """A step as `ansible_failed_task` shows it: Ansible's keyword names, the values fleetfix
    read (`action` is the module as written for an Ansible module, else the step kind)."""
    action = str(step.args.get("as", step.kind.value))
    role = f"{step.role.name} : " if step.role is not None else ""
    return {
        "name": step.name.removeprefix(role),  # Ansible's task name; `ROLE : ` is the banner's
        "action": action,
        "args": dict(step.args.get("params", step.args)) if "as" in step.args else dict(step.args),
        "tags": sorted(step.tags),
        "when": list(step.when),
        "register": step.register,
        "ignore_errors": step.ignore_errors,
        "ignore_unreachable": step.ignore_unreachable,
        "loop": step.loop,
        "until": list(step.until),
        "retries": step.retries,
        "delay": step.delay,
        "changed_when": list(step.changed_when or ()),
        "failed_when": list(step.failed_when or ()),
        "become": step.become,
        "become_user": step.become_user,
        "environment": [dict(step.environment)],
        "no_log": step.no_log,
        "notify": list(step.notify) or None,
        "run_once": step.run_once,
        "delegate_to": step.delegate_to,
        "check_mode": step.check_mode,
        "timeout": step.timeout or 0,
        "vars": dict(step.vars),
    }


def _inherit(block: Step) -> Any:
    """Children of a block inherit its tags, when, become, environment, ignore_errors, notify,
    any_errors_fatal, check_mode, become_user, delegate_to, timeout, no_log and run_once, as
    Ansible's."""

    def apply(steps: Sequence[Step]) -> list[Step]:
        out = []
        for child in steps:
            out.append(
                replace(
                    child,
                    tags=child.tags | block.tags,
                    when=block.when + child.when,
                    become=child.become if child.become is not None else block.become,
                    environment={**block.environment, **child.environment},
                    ignore_errors=child.ignore_errors or block.ignore_errors,
                    notify=_joined(child.notify, block.notify),
                    any_errors_fatal=_first(child.any_errors_fatal, block.any_errors_fatal),
                    check_mode=_first(child.check_mode, block.check_mode),
                    become_user=_first(child.become_user, block.become_user),
                    delegate_to=_first(child.delegate_to, block.delegate_to),
                    timeout=_first(child.timeout, block.timeout),
                    no_log=child.no_log or block.no_log,
                    run_once=child.run_once or block.run_once,
                )
            )
        return out

    return apply


async def _run_once(run: BatchRun, step: Step, turn: Turn, env: StepEnv) -> list[Inclusion]:
    """Run on the first host of the turn; every host in it sees the registered result, and
    a set_fact's facts go to every reachable host of the batch (ansible-core's
    get_task_hosts: a run_once step in a file only the first host included sets them for
    all). What a run_once include brings in is walked by the first host only."""
    first = run.ctx.host_state(turn.hosts[0])
    result, found = await _step_result(run, first, step, env, turn)
    if step.register is not None and step.register in first.facts:
        for host in turn.hosts[1:]:
            run.ctx.host_state(host).facts[step.register] = first.facts[step.register]
    facts = result.data.get("ansible_facts") if step.kind is StepKind.SET_FACT else None
    if isinstance(facts, dict) and result.status in (Status.OK, Status.CHANGED):
        for other in run.states():
            if other is not first and not other.unreachable:
                other.facts.update(facts)
    return found


def _wanted(run: BatchRun, step: Step, inherited: frozenset[str] = frozenset()) -> bool:
    """Whether --tags/--skip-tags select the step; a block is wanted when any step in it is
    (its tags are its children's too, at any depth), as ansible-core filters blocks."""
    options = run.ctx.options
    tags = step.tags | inherited | run.env.play.tags
    if step.kind is StepKind.BLOCK:
        children = (*step.block, *step.rescue, *step.always)
        return any(_wanted(run, child, tags) for child in children)
    return selected(run.tags.of(tags, step.position), options.tags, options.skip_tags)


def _check_gates(run: BatchRun) -> bool:
    """any_errors_fatal and max_fail_percentage after the free strategy's hosts; True = stop."""
    failed = sum(1 for s in run.judged_states() if _counts_failed(s))
    if failed and run.env.play.any_errors_fatal:
        for state in run.judged_states():
            state.ended = True
        run.stop_play = True
        return True
    return _check_max_fail(run)


def _check_max_fail(run: BatchRun) -> bool:
    """max_fail_percentage exceeded: the play stops, a safety stop (exit 6); True = stopped."""
    play = run.env.play
    states = run.judged_states()
    failed = sum(1 for s in states if _counts_failed(s) and not run.rescuable.get(s.name))
    if not failure_exceeds(failed, len(states), play.max_fail_percentage) or run.stop_play:
        return False
    reason = (
        f"max_fail_percentage {play.max_fail_percentage:g}% exceeded in play "
        f"{play.name!r}: {failed} of {len(states)} hosts in the batch failed"
    )
    run.ctx.result.aborted_by_safety = reason
    run.ctx.bus.emit(SafetyStop(reason=reason))
    run.stop_play = True
    return True


def host_results(ctx: RunContext, host: str) -> list[StepResult]:
    """Every step result recorded for `host`, in order (for reports and tests)."""
    return [r for r in ctx.result.results if r.host == host]
