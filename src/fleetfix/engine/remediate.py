"""Running an action step: probe, plan, run (or print in --check), verify, escalate."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.engine.commands import announce_planned
from fleetfix.engine.hoststep import HostStep, Outcome, registered, with_lines
from fleetfix.errors import UnreachableError
from fleetfix.events import ActionTaken
from fleetfix.playbook.model import Step, StepKind
from fleetfix.results import CommandResult

BOOT_ID_COMMAND = "cat /proc/sys/kernel/random/boot_id"
ATTEMPTS_WINDOW = 7 * 86400.0
"""max_attempts without a cooldown counts attempts over the last week."""
DEFAULT_REBOOT_WAIT = 900.0
Handlers = Mapping[StepKind, Callable[[HostStep], Awaitable[Outcome]]]


async def run_action(hs: HostStep, handlers: Handlers) -> Outcome:
    """The action, then its escalation ladder rung by rung until verification passes."""
    ladder: list[dict[str, Any]] = []
    outcome = Outcome()
    for rung in (hs.step, *hs.step.escalate):
        action = hs.ctx.actions.get(str(rung.args["name"]))
        params = hs.render(dict(rung.args.get("params") or {}))
        outcome = await _one_rung(hs, rung, action, params, handlers)
        ladder.append({"action": action.name, "failed": outcome.failed, "msg": outcome.message})
        if not outcome.failed or hs.dry:
            break
    outcome.data["ladder"] = ladder
    return outcome


async def _one_rung(
    hs: HostStep, rung: Step, action: Action, params: Mapping[str, Any], handlers: Handlers
) -> Outcome:
    held = _history_gate(hs, rung, action)
    if held is not None:
        return Outcome(failed=True, message=held, data={"held": True})
    facts = await _required_facts(hs, action)
    if isinstance(facts, Outcome):
        return facts
    plan = action.plan(ActionContext(hs.state.name, params, facts, hs.variables))
    if action.disruptive and not plan.noop and plan.refused is None:
        held = hs.ctx.safety.admit(hs.state.name, dry=hs.dry)
        if held is not None:
            hs.ctx.result.holds.append(f"{hs.state.name}: {action.name} {held}")
            return Outcome(failed=True, message=f"{action.name} {held}", data={"held": True})
    outcome = await _carry_out(hs, action, plan)
    if outcome.failed or hs.dry:
        return outcome
    problem = await _verify(hs, action, params, handlers, plan)
    if problem is not None:
        outcome.failed = True
        outcome.message = f"{action.name}: verification failed: {problem}"
    return outcome


def _history_gate(hs: HostStep, rung: Step, action: Action) -> str | None:
    """cooldown / max_attempts across runs, read from the journal. A node rebooted for the
    same fault too often is left for a human ("needs RMA"), not rebooted again."""
    history = hs.ctx.options.action_history
    if history is None or (rung.cooldown is None and rung.max_attempts is None):
        return None
    window = rung.cooldown.seconds if rung.cooldown is not None else ATTEMPTS_WINDOW
    now = time.time()
    times = history(hs.state.name, action.name, now - window)
    if rung.max_attempts is not None and len(times) >= rung.max_attempts:
        return (
            f"{action.name} already ran {len(times)} times on this host in the last "
            f"{_span(window)} (max_attempts {rung.max_attempts}): needs a human (RMA?)"
        )
    if rung.cooldown is not None and times:
        ago = now - times[-1]
        return f"{action.name} ran {_span(ago)} ago; cooldown is {_span(window)}"
    return None


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


async def _required_facts(hs: HostStep, action: Action) -> dict[str, Any] | Outcome:
    """Fresh facts from every probe the action needs to plan (its gates read them).
    An optional probe that fails (the tool is not on this node) gives None."""
    facts: dict[str, Any] = {}
    for name in (*action.requires, *action.optional):
        probed = await hs.probe(name, {})
        if probed.failed and name in action.requires:
            probed.message = f"{action.name}: cannot plan, {probed.message}"
            return probed
        facts[name] = None if probed.failed else hs.state.probe_facts[name]
    return facts


async def _carry_out(hs: HostStep, action: Action, plan: ActionPlan) -> Outcome:
    notes = "; ".join(plan.notes)
    if plan.refused is not None:
        return Outcome(failed=True, message=f"{action.name} refused: {plan.refused}")
    if plan.noop:
        suffix = f" ({notes})" if notes else ""
        return Outcome(message=f"{action.name}: nothing to do{suffix}")
    if hs.dry:
        for planned in plan.commands:
            announce_planned(hs.ctx, hs.state, hs.step, planned.command)
        planned_text = f"check mode: {action.name} would run {len(plan.commands)} command(s)"
        return Outcome(changed=action.changes_state, message=planned_text)
    outcome = Outcome(changed=action.changes_state, message=notes)
    for planned in plan.commands:
        if outcome.failed and not planned.always:
            continue
        result = await _run_planned(hs, planned)
        outcome.commands.append(result)
        if not (result.ok or planned.ignore_rc or outcome.failed):
            detail = (result.stderr.strip() or result.stdout.strip())[:300]
            outcome.failed = True
            outcome.message = f"{action.name}: {planned.why} failed (rc={result.rc}): {detail}"
    if action.result_probe is not None and outcome.commands and not outcome.failed:
        parsed = hs.parse_output(action.result_probe, outcome.commands[-1])
        outcome.data["facts"] = parsed.data.get("facts")
        if parsed.failed:
            outcome.failed, outcome.message = True, parsed.message
    hs.ctx.bus.emit(
        ActionTaken(
            host=hs.state.name, step=hs.step.name, action=action.name, failed=outcome.failed
        )
    )
    return outcome


async def _run_planned(hs: HostStep, planned: PlannedCommand) -> CommandResult:
    if planned.expect_unreachable:
        return await _reboot_like(hs, planned)
    return await hs.command(planned.command, timeout=planned.timeout)


async def _reboot_like(hs: HostStep, planned: PlannedCommand) -> CommandResult:
    """Run a command that takes the host away, then wait for it to return with a new boot id."""
    before = (await hs.command(BOOT_ID_COMMAND, timeout=30)).stdout.strip()
    started = time.monotonic()
    with contextlib.suppress(UnreachableError):  # expected: the host goes away under us
        await hs.command(planned.command, timeout=planned.timeout or 30)
    await hs.ctx.connections.drop(hs.state.name)
    expected = hs.step.expect_unreachable
    wait = expected.seconds if expected is not None else DEFAULT_REBOOT_WAIT
    boot_id = await _await_new_boot(hs, before, wait)
    elapsed = time.monotonic() - started
    if boot_id is None:
        message = f"host did not come back with a new boot id within {wait:g}s"
        return CommandResult(planned.command, None, "", message, elapsed, timed_out=True)
    return CommandResult(planned.command, 0, f"back with boot id {boot_id}", "", elapsed)


async def _await_new_boot(hs: HostStep, old_boot_id: str, wait: float) -> str | None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            result = await hs.command(BOOT_ID_COMMAND, timeout=30)
        except UnreachableError:
            await hs.ctx.connections.drop(hs.state.name)
        else:
            boot_id = result.stdout.strip()
            if result.ok and boot_id and boot_id != old_boot_id:
                return boot_id
        await asyncio.sleep(hs.ctx.options.reconnect_poll)
    return None


async def _verify(
    hs: HostStep,
    action: Action,
    params: Mapping[str, Any],
    handlers: Handlers,
    plan: ActionPlan,
) -> str | None:
    """The action's own verification, then the step's `verify:` list; first problem wins."""
    for name in action.verify:
        probed = await hs.probe(name, {})
        if probed.failed:
            return probed.message
    if action.check is not None:
        names = (*action.requires, *action.optional, *action.verify)
        if action.result_probe is not None:
            names = (*names, action.result_probe)
        facts = {name: hs.state.probe_facts.get(name) for name in names}
        problem = action.check(ActionContext(hs.state.name, params, facts, hs.variables, plan))
        if problem is not None:
            return problem
    return await _verify_steps(hs, handlers)


async def _verify_steps(hs: HostStep, handlers: Handlers) -> str | None:
    for check in hs.step.verify:
        sub = hs.with_step(check)
        outcome = await handlers[check.kind](sub)
        if check.register is not None:
            value = with_lines(registered(outcome, 1))
            hs.state.facts[check.register] = value
            hs.variables[check.register] = value
        if outcome.failed:
            return outcome.message or check.name
    return None
