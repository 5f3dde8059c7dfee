"""Running one play: batches, linear/free strategies, blocks, handlers and failure gates."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetfix.engine.batches import behind_parked, failure_exceeds, order_hosts, serial_batches
from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.hoststep import StepEnv, with_lines
from fleetfix.engine.includes import inclusions
from fleetfix.engine.remediate import HOLD_KEY
from fleetfix.engine.revisit import REVISIT_POLL, defer_all, look_again
from fleetfix.engine.steps import execute
from fleetfix.engine.tags import PlayTags, selected
from fleetfix.engine.variables import PlayScope, compose
from fleetfix.errors import FleetfixError
from fleetfix.events import BatchStarted, PlayFinished, PlayStarted, SafetyStop, TaskStarted
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.extravars import load_vars_files
from fleetfix.playbook.includes import INCLUDE_KINDS
from fleetfix.playbook.model import Play, Step, StepKind
from fleetfix.results import StepResult


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

    def states(self) -> list[HostState]:
        return [self.ctx.host_state(h) for h in self.hosts]

    def judged_states(self) -> list[HostState]:
        return [self.ctx.host_state(h) for h in self.judged or self.hosts]

    def active(self) -> list[HostState]:
        return [s for s in self.states() if s.active]

    def announce(self, step: Step, *, handler: bool = False) -> None:
        key: Hashable = (step.key, step.name, handler) if step.position else id(step)
        if key not in self.announced:
            self.announced.add(key)
            started = TaskStarted(
                name=self.shown_name(step),
                position=step.position,
                handler=handler,
                key=step.key,
                block=step.kind is StepKind.BLOCK,
            )
            self.ctx.bus.emit(started)

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
        if stopped or (batch and judged_failed.issuperset(run.judged or batch)):
            # Ansible's rule: a batch in which every host failed ends the play.
            return not stopped or run.ended_by == "play"
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
    if not play.vars:
        return dict(file_vars)  # nothing to render: no host's variables to compose
    base = compose(ctx, state, scope)
    try:
        rendered = ctx.templar.resolve(play.vars, base)
    except FleetfixError:
        rendered = dict(play.vars)
    return {**rendered, **file_vars}


def _vars_files(ctx: RunContext, play: Play, playbook_dir: str) -> dict[str, Any]:
    """vars_files are relative to the play's own file (an imported playbook's, as Ansible)."""
    paths = [str(ctx.templar.render(p, ctx.options.extra_vars)) for p in play.vars_files]
    base = Path(play.position.file).resolve().parent if play.position.line else Path(playbook_dir)
    return load_vars_files(paths, base) if paths else {}


async def _run_batch(run: BatchRun) -> None:
    play = run.env.play
    if play.strategy == "free":
        await asyncio.gather(*(_free_host(run, s) for s in run.states()))
        _check_gates(run)
        return
    for section in (play.pre_tasks, play.tasks, play.post_tasks):
        await _linear_section(run, section)
        if run.stop_play:
            return
        await _flush_handlers(run)


async def _linear_section(run: BatchRun, steps: Sequence[Step]) -> None:
    for step in steps:
        if not _wanted(run, step):
            continue
        if await _meta(run, step):
            if run.stop_play:
                return
            continue
        active = run.active()
        if not active:
            return
        gate = run.ctx.options.step_gate
        if gate is not None and not await gate(step.name):
            continue
        run.announce(step)
        if step.run_once or step.kind is StepKind.ADD_HOST:  # add_host: once, as Ansible
            await _run_once(run, step, active)
        else:
            await asyncio.gather(*(_top_step(run, s, step) for s in active))
        if _check_gates(run):
            return


async def _meta(run: BatchRun, step: Step) -> bool:
    """Handle meta steps that act on the whole batch; True when the step was consumed."""
    if step.kind is not StepKind.META:
        return False
    action = step.args.get("name")
    if action not in ("flush_handlers", "end_play", "end_batch"):
        return False
    if run.active():
        run.announce(step)  # Ansible shows a banner for a meta step too
    if not _meta_holds(run, step):
        return True
    if action == "flush_handlers":
        await _flush_handlers(run)
        return True
    for state in run.active():
        state.ended = True
    run.stop_play = True
    run.ended_by = "batch" if action == "end_batch" else "play"
    return True


def _meta_holds(run: BatchRun, step: Step) -> bool:
    """Whether a batch-wide meta step's `when` holds for any active host (Ansible ends the
    play or batch for every host when it holds for one). A condition that cannot be
    evaluated counts as holding: stopping is the safe side."""
    if not step.when:
        return True
    for state in run.active():
        variables = compose(run.ctx, state, run.env.scope, step.vars)
        try:
            if all(run.ctx.templar.evaluate(c, variables) for c in step.when):
                return True
        except FleetfixError:
            return True
    return False


async def _free_host(run: BatchRun, state: HostState) -> None:
    play = run.env.play
    for section in (play.pre_tasks, play.tasks, play.post_tasks):
        for step in section:
            if not state.active or run.fatal:
                return
            if _wanted(run, step):
                run.announce(step)
                await _top_step(run, state, step)
    await _flush_handlers(run, [state])


async def _top_step(run: BatchRun, state: HostState, step: Step) -> None:
    """A play-level step (or whole block) on one host; an unrescued failure there is what
    any_errors_fatal stops every other host for."""
    await _host_step(run, state, step)
    if state.failed and run.env.play.any_errors_fatal:
        run.fatal = True


async def _host_step(
    run: BatchRun, state: HostState, step: Step, env: StepEnv | None = None
) -> None:
    """One step (or a whole block) on one host, holding a fork while it runs."""
    env = env or run.env
    if step.kind is StepKind.BLOCK:
        await _block(run, state, step, env)
        return
    async with run.ctx.forks:
        result = await execute(run.ctx, env, state, step)
    if step.kind in INCLUDE_KINDS:  # then what it brought in, like a block's steps
        found = inclusions(run.ctx, step, result)
        if step.loop is not None and found:  # Ansible counts each item's inclusion as ok
            run.ctx.stats(state.name).ok += len(found) - 1
        for inclusion in found:
            await _host_steps(run, state, inclusion.steps, env.with_vars(inclusion.variables))


async def _block(run: BatchRun, state: HostState, block: Step, env: StepEnv) -> None:
    """block/rescue/always with Ansible's semantics; a failure a rescue caught counts as rescued.
    The block's `when` is each of its steps' (evaluated before theirs, step by step)."""
    env = env.with_vars(block.vars)
    inherited = _inherit(block)
    failures_before = run.ctx.stats(state.name).failed
    await _host_steps(run, state, inherited(block.block), env)
    if state.failed and block.rescue and not _held(state):
        stats = run.ctx.stats(state.name)
        stats.failed = failures_before
        stats.rescued += 1  # Ansible counts a failure a rescue caught, whatever the rescue does
        state.failed = False
        _expose_failure(state)
        await _host_steps(run, state, inherited(block.rescue), env)
    if block.always:
        was_failed = state.failed
        state.failed = False
        await _host_steps(run, state, inherited(block.always), env)
        state.failed = state.failed or was_failed


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
    return {
        "name": step.name,
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
    """Children of a block inherit its tags, when, become and environment, like Ansible."""

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
                )
            )
        return out

    return apply


async def _host_steps(run: BatchRun, state: HostState, steps: Sequence[Step], env: StepEnv) -> None:
    for step in steps:
        if not state.active or run.fatal:
            return
        if not _wanted(run, step):
            continue
        run.announce(step)
        await _host_step(run, state, step, env)


async def _run_once(run: BatchRun, step: Step, active: list[HostState]) -> None:
    """Run on the first active host; every host in the batch sees the registered result."""
    first = active[0]
    await _host_step(run, first, step)
    if step.register is not None and step.register in first.facts:
        for state in active[1:]:
            state.facts[step.register] = first.facts[step.register]


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
    """any_errors_fatal and max_fail_percentage, evaluated after each task; True = stop."""
    play = run.env.play
    states = run.judged_states()
    failed = sum(1 for s in states if _counts_failed(s))
    if failed and play.any_errors_fatal:
        for state in states:
            state.ended = True
        run.stop_play = True
        return True
    if failure_exceeds(failed, len(states), play.max_fail_percentage):
        reason = (
            f"max_fail_percentage {play.max_fail_percentage:g}% exceeded in play "
            f"{play.name!r}: {failed} of {len(states)} hosts in the batch failed"
        )
        run.ctx.result.aborted_by_safety = reason
        run.ctx.bus.emit(SafetyStop(reason=reason))
        run.stop_play = True
        return True
    return False


async def _flush_handlers(run: BatchRun, only: list[HostState] | None = None) -> None:
    """Run notified handlers in definition order on the hosts that notified them."""
    scope = only if only is not None else run.states()
    for handler in run.env.play.handlers:
        topics = {handler.name, *handler.listen}
        states = [s for s in scope if s.active and s.notified & topics]
        if not states:
            continue
        run.announce(handler, handler=True)
        await asyncio.gather(*(_top_step(run, s, handler) for s in states))
        if run.fatal:
            _check_gates(run)
            break
    for state in scope:
        state.notified.clear()


def host_results(ctx: RunContext, host: str) -> list[StepResult]:
    """Every step result recorded for `host`, in order (for reports and tests)."""
    return [r for r in ctx.result.results if r.host == host]
