"""Executing one step on one host: when, the kind's work, until/retries, changed/failed_when."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fleetfix.engine.commands import redact
from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.hoststep import (
    HostStep,
    Outcome,
    StepEnv,
    registered,
    remember_probe,
    with_lines,
)
from fleetfix.engine.kinds import KIND_HANDLERS, LEFT_KEY, leave
from fleetfix.engine.loops import run_loop
from fleetfix.engine.remediate import HOLD_KEY
from fleetfix.engine.variables import PlayScope, compose, under_defaults
from fleetfix.engine.verification import VERIFIED_KEY
from fleetfix.errors import FleetfixError, UnreachableError
from fleetfix.events import HostStepFinished, HostStepStarted, StepRetry
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.model import Step, StepKind
from fleetfix.playbook.roles import RoleRun
from fleetfix.results import QUIET_KEY, CommandResult, JournaledStep, Status, StepResult
from fleetfix.secrets import LEARNED_MIN, MASK, NO_LOG_TEXT, leaves

DEFAULT_RETRIES = 3


async def execute(ctx: RunContext, env: StepEnv, state: HostState, step: Step) -> StepResult:
    """Run `step` on one host and return its verdict; never raises for host-level trouble:
    any exception in one host's step is that host's failure, never the fleet's."""
    ctx.bus.emit(HostStepStarted(host=state.name, step=step.name))
    started = time.monotonic()
    result = await _host_step(ctx, env, state, step, {})
    return _record(ctx, state, step, result, started)


async def _host_step(
    ctx: RunContext, env: StepEnv, state: HostState, step: Step, item_vars: Mapping[str, Any]
) -> StepResult:
    """The verdict of `step` (or of one loop item: `item_vars`) on one host, not yet recorded."""
    try:
        variables = _variables(ctx, env, state, step, item_vars)
    except Exception as exc:
        hs = HostStep(ctx, env, state, step, compose(ctx, state, env.scope))
        return _verdict(hs, _crashed(step, exc), 1)
    hs = HostStep(ctx, env, state, step, variables)
    journaled = ctx.options.resume.steps.get((state.name, step.key))
    if journaled is not None and _replayable(step, journaled):
        return _replayed(hs, journaled)
    if step.loop is not None:
        return await run_loop(
            hs, lambda item_step, vars_: _host_step(ctx, env, state, item_step, vars_)
        )
    try:
        false_condition = _false_condition(hs)
        if false_condition is not None:
            outcome, attempts = _condition_skipped(false_condition), 0
        else:
            outcome, attempts = await _attempts(hs)
    except UnreachableError as exc:
        if _stopping():
            raise asyncio.CancelledError from exc
        await ctx.connections.drop(exc.host)
        return _unreachable_result(hs, exc)
    except Exception as exc:
        if _stopping():
            raise asyncio.CancelledError from exc
        outcome, attempts = _crashed(step, exc), 1
    return _verdict(hs, outcome, attempts)


def _false_condition(hs: HostStep) -> str | None:
    """The first of the step's `when` conditions that does not hold (None: all hold)."""
    return next((c for c in hs.step.when if not hs.evaluate((c,))), None)


def _condition_skipped(condition: str) -> Outcome:
    """A step whose `when` does not hold, registered as Ansible registers it."""
    # `when: false` (a YAML boolean, read as the expression "False") is registered as written
    shown: str | bool = False if condition == "False" else condition
    data = {"false_condition": shown, "skip_reason": "Conditional result was False"}
    return Outcome(
        skipped=True, message="conditional result was False", data=data, registers_msg=False
    )


def _stopping() -> bool:
    """The run is being stopped (Ctrl-C, SIGTERM) and this host's step with it. An error on
    the way out (a connection closed under a command being killed) is not the host's verdict:
    journaled as failed, a resumed run would replay that failure instead of running the step."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _crashed(step: Step, exc: Exception) -> Outcome:
    """A step that raised: a fleetfix error says what went wrong; anything else (a bad templated
    parameter an action could not read, a bug) is named with the step's source location."""
    if isinstance(exc, FleetfixError):
        return Outcome(failed=True, message=str(exc))
    detail = str(exc) or type(exc).__name__
    kind = "bad parameter" if isinstance(exc, ValueError | TypeError) else "internal error"
    return Outcome(failed=True, message=f"{step.position}: {kind} in step {step.name!r}: {detail}")


def _replayable(step: Step, journaled: JournaledStep) -> bool:
    """May a resumed run replay this host-step? Not when it was unreachable, nor a set_fact
    whose values the journal does not hold (no_log, or masked as secret): a set_fact only reads
    variables, so it is run again and sets the real values."""
    if journaled.status is Status.UNREACHABLE:
        return False
    if step.kind is StepKind.MODULE and step.args.get("module") == "include_vars":
        return False  # reads the controller's files only: run again, it sets the values
    if step.kind is not StepKind.SET_FACT:
        return True
    return not step.no_log and MASK not in json.dumps(journaled.data, default=str)


def _replayed(hs: HostStep, journaled: JournaledStep) -> StepResult:
    """A host-step the interrupted run finished: its verdict and control effects replayed from
    the journal (registered value, facts set, host ended, handlers notified, failure), never
    re-run. Re-running it would read a node the interrupted run already changed (drained,
    rebooted) and send the host down a path a clean run never takes."""
    state, step = hs.state, hs.step
    data = dict(journaled.data)
    items = data.get("results") if step.loop is not None else None
    for item in items if isinstance(items, list) else [data]:
        if isinstance(item, dict):
            _replay_effects(hs, item, journaled)
    if step.kind is StepKind.ACTION and journaled.changed and items is None:
        hs.ctx.safety.replay_out(state.name, hs.ctx.actions.get(str(step.args["name"])))
    return StepResult(
        host=state.name,
        step=step.name,
        status=journaled.status,
        changed=journaled.changed,
        message=journaled.message or "replayed from the resumed run",
        data=data,
        key=step.key,
    )


def _replay_effects(hs: HostStep, data: Mapping[str, Any], journaled: JournaledStep) -> None:
    """The control effects of one journaled verdict (of a step, or of one of its loop items)."""
    state, step = hs.state, hs.step
    if step.kind is StepKind.SET_FACT and isinstance(data.get("ansible_facts"), dict):
        state.facts.update(data["ansible_facts"])
    elif step.kind is StepKind.META and step.args.get("name") == "end_host":
        state.ended = state.ended or journaled.status is not Status.SKIPPED
    elif step.kind is StepKind.META and step.args.get("name") == "end_role":
        if journaled.status is not Status.SKIPPED:  # the rest of the role stays skipped
            hs.env.scope.roles.end(state.name, step)
    elif step.kind is StepKind.PROBE and isinstance(data.get("facts"), dict):
        remember_probe(hs.ctx, state, str(step.args["name"]), data["facts"], "")
    if step.kind is StepKind.ACTION and isinstance(data.get(VERIFIED_KEY), dict):
        _replay_verified(hs, data[VERIFIED_KEY])
    if step.kind is StepKind.ACTION and step.loop is not None and data.get("changed") is True:
        hs.ctx.safety.replay_out(state.name, hs.ctx.actions.get(str(step.args["name"])))
    if isinstance(data.get(HOLD_KEY), str):  # a topology cap or the budget held it: still held
        hs.ctx.result.holds.append(data[HOLD_KEY])
    left = data.get(LEFT_KEY)
    if isinstance(left, dict):  # the engine left the host here: it stays left
        leave(hs, str(left.get("kind")), str(left.get("reason")))


def _replay_verified(hs: HostStep, verified: Mapping[str, Any]) -> None:
    """A replayed action's verification: the probe facts and registered values it left."""
    probes, registers = verified.get("probes"), verified.get("registered")
    for name, facts in probes.items() if isinstance(probes, dict) else ():
        if isinstance(facts, dict):
            remember_probe(hs.ctx, hs.state, str(name), facts, "")
    if isinstance(registers, dict):
        hs.state.facts.update(registers)


def _variables(
    ctx: RunContext, env: StepEnv, state: HostState, step: Step, item_vars: Mapping[str, Any]
) -> dict[str, Any]:
    """The host's variables with block and step `vars` rendered (they may refer to each other
    and to the loop item), the loop item's own variables on top of everything, as in Ansible."""
    base = {**compose(ctx, state, env.scope), **item_vars}
    public_defaults, public_vars = env.scope.public_roles(env.play, state.name)
    defaults = _role_defaults(ctx, step, base, public_defaults)
    base = under_defaults(base, defaults)
    base.update(_late_templates(ctx, state, env.scope, base))
    own_role = step.role.role_vars if isinstance(step.role, RoleRun) else {}
    local = {**public_vars, **own_role, **env.inherited_vars, **step.vars}
    if not local:
        return base
    resolved = ctx.templar.resolve(local, base)
    final = {**under_defaults(compose(ctx, state, env.scope, resolved), defaults), **item_vars}
    final.update(_late_templates(ctx, state, env.scope, final))
    return final


def _late_templates(
    ctx: RunContext, state: HostState, scope: PlayScope, variables: Mapping[str, Any]
) -> dict[str, Any]:
    """Variables that are still templates, rendered now against the rest, as Ansible renders
    every variable when it is used: inventory variables (`gpu_dir: "{{ base }}/gpu"`, from the
    inventory, group_vars or host_vars) and play vars the play's start could not render yet
    (they read facts gathered since: `"{{ ansible_facts... }}"`); only where nothing above
    them set the name. One that cannot render fails the step that uses it, saying why, not
    every step of the host. Which names are templates is found once per host (and batch)."""
    if state.templated_vars is None:
        state.templated_vars = frozenset(
            name for name, value in state.base_vars.items() if is_template(value)
        )
    pending: dict[str, Any] = {}
    for source, names in (
        (state.base_vars, state.templated_vars),
        (scope.play_vars.get(state.name, {}), scope.templated_play_vars(state.name)),
        (ctx.options.extra_vars, _templated(ctx.options.extra_vars)),  # -e x='{{ y }}'
    ):
        for name in names:
            if variables.get(name) is source[name]:
                pending[name] = source[name]
    if not pending:
        return {}
    others = {name: value for name, value in variables.items() if name not in pending}
    try:
        return ctx.templar.resolve(pending, others)
    except FleetfixError:
        rendered: dict[str, Any] = {}
        for name, value in pending.items():
            try:
                rendered[name] = ctx.templar.render(value, {**others, **rendered})
            except FleetfixError as exc:
                rendered[name] = ctx.templar.broken(f"{exc} (the variable {name})")
        return rendered


def _templated(values: Mapping[str, Any]) -> list[str]:
    """The names whose values are templates (extra vars: a handful, looked at per step)."""
    return [name for name, value in values.items() if is_template(value)]


def _role_defaults(
    ctx: RunContext, step: Step, base: Mapping[str, Any], public: Mapping[str, Any]
) -> dict[str, Any]:
    """A role's defaults/main.yml: below every other variable (Ansible's lowest precedence), so
    only those nothing else sets, rendered against the rest (they may refer to each other);
    the step's own role's above the public roles' (`public`)."""
    own = step.role.defaults if step.role is not None else {}
    if not own and not public:
        return {}
    merged = {**public, **own} if public else own
    unset = {name: value for name, value in merged.items() if name not in base}
    return ctx.templar.resolve(unset, base)


async def _attempts(hs: HostStep) -> tuple[Outcome, int]:
    """Run the kind once, or retry it as Ansible does: `retries: N` allows N+1 attempts (3
    retries when only `until` is given); without `until` a retried step stops once it has not
    failed. An exhausted step fails, unless its `failed_when` said the last attempt did not."""
    step = hs.step
    handler = KIND_HANDLERS[step.kind]
    total = 1 + attempts_allowed(step)
    attempt = 0
    while True:
        attempt += 1
        outcome = await handler(hs)
        if total > 1 and not outcome.skipped:  # Ansible's `attempts`, seen by the conditions
            outcome.data["attempts"] = attempt
        _apply_overrides(hs, outcome)
        if total == 1 or outcome.skipped:
            return outcome, attempt
        if _until_holds(hs, outcome):
            return outcome, attempt
        if attempt >= total:
            if step.failed_when is None or outcome.failed:
                outcome.failed = True
                outcome.message = outcome.message or f"retries exhausted ({total} attempts)"
            # Ansible registers one less once the attempts ran out (task_executor's for-else).
            outcome.data["attempts"] = total - 1
            return outcome, attempt
        hs.ctx.bus.emit(
            StepRetry(host=hs.state.name, step=step.name, attempt=attempt, retries=total)
        )
        await asyncio.sleep(step.delay)


def attempts_allowed(step: Step) -> int:
    """How many times a failing step is retried after its first attempt (Ansible's rule)."""
    if step.retries is not None:
        return step.retries
    return DEFAULT_RETRIES if step.until else 0


def _until_holds(hs: HostStep, outcome: Outcome) -> bool:
    """Whether to stop retrying; as in Ansible, `until` holding does not clear a failure."""
    if not hs.step.until:
        return not outcome.failed
    return hs.evaluate(hs.step.until, _register_view(hs, outcome))


def _apply_overrides(hs: HostStep, outcome: Outcome) -> None:
    """changed_when and failed_when see the result under its register name, like Ansible;
    failed_when's verdict is registered as `failed_when_result`. One that cannot be evaluated
    (an undefined variable) fails the step, its text in `changed_when_result` (or
    `failed_when_result`), the command's output kept."""
    step = hs.step
    if outcome.skipped:
        return
    which = "changed"
    try:
        if step.changed_when is not None:
            outcome.changed = hs.evaluate(step.changed_when, _register_view(hs, outcome))
        which = "failed"
        if step.failed_when is not None:
            was_failed = outcome.failed
            view = _register_view(hs, outcome)
            outcome.failed = any(hs.evaluate((expr,), view) for expr in step.failed_when)
            outcome.data["failed_when_result"] = outcome.failed
            if was_failed and not outcome.failed:
                outcome.message = ""
            elif outcome.failed and not outcome.message:
                outcome.message = "failed_when condition was met"
    except FleetfixError as exc:
        outcome.failed = True
        outcome.data[f"{which}_when_result"] = str(exc)
        outcome.message = f"{which}_when: {exc}"


def _register_view(hs: HostStep, outcome: Outcome) -> dict[str, Any]:
    step = hs.step
    if step.register is None:
        return {}
    return {step.register: with_lines(_own_shape(step, registered(outcome, no_log=step.no_log)))}


def _verdict(hs: HostStep, outcome: Outcome, attempts: int) -> StepResult:
    step = hs.step
    if outcome.skipped:
        status = Status.SKIPPED
    elif outcome.failed:
        status = Status.IGNORED if step.ignore_errors else Status.FAILED
    else:
        status = Status.CHANGED if outcome.changed else Status.OK
    if step.no_log:
        _keep_secret(hs.ctx, step, outcome)
    if outcome.message and step.kind in QUIET_KINDS and not outcome.message.startswith("check"):
        outcome.data[QUIET_KEY] = True  # Ansible prints no msg of these without -v
    return StepResult(
        host=hs.state.name,
        step=step.name,
        status=status,
        changed=outcome.changed and not outcome.skipped,
        message=NO_LOG_TEXT if step.no_log and outcome.message else outcome.message,
        commands=tuple(redact(c) for c in outcome.commands)
        if step.no_log
        else tuple(outcome.commands),
        data=_own_shape(step, registered(outcome, no_log=step.no_log)),
        attempts=attempts,
        key=step.key,
    )


def _own_shape(step: Step, value: dict[str, Any]) -> dict[str, Any]:
    """fleetfix's own probe and action results keep `failed` and `skipped` whatever the
    outcome (runbooks read `result.skipped`); Ansible's modules have Ansible's key set."""
    if step.kind in (StepKind.PROBE, StepKind.ACTION):
        value.setdefault("failed", False)
        value.setdefault("skipped", False)
    return value


QUIET_KINDS = frozenset(
    {StepKind.SHELL, StepKind.COMMAND, StepKind.SET_FACT, StepKind.MODULE, StepKind.META}
    | {StepKind.DEBUG, StepKind.ASSERT, StepKind.FAIL}
)
"""Ansible's own modules: their result's msg is shown at -v, not before (fleetfix's probes
and actions say what they found or did, and check mode says what it would do)."""


def _keep_secret(ctx: RunContext, step: Step, outcome: Outcome) -> None:
    """What a no_log step produced is masked wherever it shows up later in the run (a `debug`
    of a fact it set, a command line it is templated into): the values it set or printed, and
    the output of its commands. Its own record is hidden whole (`registered`)."""
    produced = [text.strip() for c in outcome.commands for text in (c.stdout, c.stderr)]
    if step.kind is StepKind.SET_FACT:
        produced += leaves(outcome.data.get("ansible_facts"))
    elif step.kind is StepKind.DEBUG:
        produced += leaves(outcome.data)
    ctx.bus.redactor.add(produced, min_length=LEARNED_MIN)


def _unreachable_result(hs: HostStep, exc: UnreachableError) -> StepResult:
    ignore = hs.step.ignore_unreachable
    if not ignore:
        hs.state.unreachable = True
    outcome = Outcome(failed=True, message=exc.message, data={"unreachable": True})
    return StepResult(
        host=hs.state.name,
        step=hs.step.name,
        status=Status.IGNORED if ignore else Status.UNREACHABLE,
        message=exc.message,
        data=registered(outcome),
        key=hs.step.key,
    )


def _record(
    ctx: RunContext, state: HostState, step: Step, result: StepResult, started: float
) -> StepResult:
    """Apply a verdict to the host, count it, register it, and tell every consumer."""
    result = replace(result, duration=time.monotonic() - started)
    if result.status is Status.FAILED:
        state.failed = True
        state.last_failure = (step, result)
    if result.status in (Status.FAILED, Status.UNREACHABLE):
        state.last_trouble = f"{result.step}: {result.message}"
    if step.register is not None:
        state.facts[step.register] = with_lines(result.data)
    if result.changed and step.notify:
        state.notified.update(step.notify)
    if result.changed and not _in_and_out_of_service(ctx, step):
        state.changed_node = True
    if step.kind is not StepKind.META or result.status in _COUNTED_META:
        ctx.stats(state.name).count(result)  # Ansible's recap counts no meta step that went
    ctx.bus.emit(HostStepFinished(result=result))
    ctx.result.results.append(_kept(result, keep_facts=ctx.options.keep_facts))
    return result


_COUNTED_META = frozenset({Status.FAILED, Status.IGNORED, Status.UNREACHABLE})
"""A meta step counts in the recap only when it failed (its `when` could not be evaluated):
the host stops there, and the recap and the verdict say so."""


def _in_and_out_of_service(ctx: RunContext, step: Step) -> bool:
    """The step is an action that only takes the node out of service or back (a drain, a
    reservation for a test): it changes Slurm's view of the node, not the node."""
    if step.kind is not StepKind.ACTION:
        return False
    name = str(step.args.get("name", ""))
    return name in ctx.actions and not ctx.actions.get(name).repairs


def _kept(result: StepResult, *, keep_facts: bool = False) -> StepResult:
    """What the run keeps of a step once every consumer has it: its verdict, not the output
    of its commands (the journal holds that), which would be most of a 10,000-host run's
    memory, nor a probe's facts as data (the host state keeps the typed facts, once) unless
    the command prints every probe's facts at the end (`fleetfix probe`: keep_facts)."""
    dropped = OUTPUT_KEYS if keep_facts else OUTPUT_AND_FACTS
    if not result.commands and not dropped & result.data.keys() and "results" not in result.data:
        return result
    brief = tuple(
        CommandResult(c.command, c.rc, "", "", c.duration, c.timed_out) for c in result.commands
    )
    data = {k: v for k, v in result.data.items() if k not in dropped}
    if isinstance(data.get("results"), list):  # a loop's items keep their verdicts only
        data["results"] = [
            {k: v for k, v in item.items() if k not in OUTPUT_KEYS}
            if isinstance(item, dict)
            else item
            for item in data["results"]
        ]
    return replace(result, commands=brief, data=data)


OUTPUT_KEYS = frozenset(("stdout", "stderr", "stdout_lines", "stderr_lines"))
OUTPUT_AND_FACTS = OUTPUT_KEYS | {"facts"}
