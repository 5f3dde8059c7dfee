"""Running an action step: gates, plan, intent, run (or print in --check), verify, escalate."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.actions.base import Action, ActionPlan, PlannedCommand
from fleetfix.engine.commands import announce_planned
from fleetfix.engine.fleet_state import admit
from fleetfix.engine.gates import Refusal, gate_facts, ownership
from fleetfix.engine.hoststep import HostStep, Outcome
from fleetfix.engine.interrupted import lost_during, settle
from fleetfix.engine.parking import PARK_KEY, PARKED, parked_data
from fleetfix.engine.reboot import answering, boot_id, reboot_wait, send_reboot_like
from fleetfix.engine.runhosts import unlisted
from fleetfix.engine.verification import (
    VERIFIED_KEY,
    Handlers,
    action_context,
    verified,
    verify,
)
from fleetfix.events import ActionStarted, ActionTaken
from fleetfix.playbook.model import Step
from fleetfix.results import CommandResult, OpenIntent
from fleetfix.transport.pool import ConnectionLostError
from fleetfix.verdicts import LeftKind

HOLD_KEY = "fleetfix_hold"
"""In a held action's registered result: the hold as the run reports it (a resume replays it:
the run still exits 6 for it)."""
ATTEMPTS_WINDOW = 7 * 86400.0
"""max_attempts without a cooldown counts attempts over the last week."""


async def run_action(hs: HostStep, handlers: Handlers) -> Outcome:
    """The action, then its escalation ladder rung by rung until verification passes."""
    refused = _not_listed(hs)
    if refused is not None:
        return refused
    ladder: list[dict[str, Any]] = []
    outcome = Outcome()
    for rung in (hs.step, *hs.step.escalate):
        action = hs.ctx.actions.get(str(rung.args["name"]))
        params = hs.render(dict(rung.args.get("params") or {}))
        outcome = await _one_rung(hs, rung, action, params, handlers)
        ladder.append(
            {
                "action": action.name,
                "failed": outcome.failed,
                "msg": outcome.message,
                # Took effect: a command that failed (a BMC that refused, a reboot that did
                # not come back) did not happen as far as what comes next is concerned.
                "ran": any(c.ok for c in outcome.commands),
            }
        )
        if not outcome.failed or hs.dry or outcome.left is not None:
            break
    outcome.data["ladder"] = ladder
    if outcome.failed and len(ladder) > 1:
        # Every rung's failure, in order: the warm reboot that did not bring the GPU back is
        # the news; the cold cycle that was then refused is what to do about it.
        outcome.message = "; then ".join(str(r["msg"]) for r in ladder if r["msg"])
    return outcome


async def run_command_action(hs: HostStep, action: Action, handlers: Handlers) -> Outcome:
    """A shell, command or raw step whose command does what a disruptive action does
    (engine/disruptive.py): one rung with that action's gates and intent, nothing to verify
    but the step's own checks."""
    refused = _not_listed(hs)
    if refused is not None:
        return refused
    return await _one_rung(hs, hs.step, action, {}, handlers)


def _not_listed(hs: HostStep) -> Outcome | None:
    """No fleetfix action on a host the inventory does not list (implicit localhost, add_host)."""
    not_listed = unlisted(hs.ctx, hs.state.name)
    return _left(Refusal(LeftKind.REFUSED, not_listed)) if not_listed is not None else None


async def _one_rung(
    hs: HostStep, rung: Step, action: Action, params: Mapping[str, Any], handlers: Handlers
) -> Outcome:
    interrupted = _open_intent(hs, action)
    if interrupted is not None:
        rebooting = bool(interrupted.evidence.get("boot_id")) and not hs.dry
        if rebooting:
            # The interrupted run may have rebooted the node, and it may still be down: the
            # lease needs an answer from the node, so wait for one as judging the reboot would.
            await answering(hs, reboot_wait(hs))
        leased = await _node_lease(hs, action)  # an interrupted run's lease is this run's
        if leased is not None and rebooting and leased.kind is LeftKind.REFUSED:
            # Its reboot may land just after the node answered (a node answers, then goes
            # down): wait for the node to come back and ask once more.
            await answering(hs, reboot_wait(hs))
            leased = await _node_lease(hs, action)
        if leased is not None:
            return _left(leased)
        settled = await settle(hs, action, params, handlers, interrupted)
        if settled is not None:
            return settled
    before = interrupted.evidence if interrupted is not None else None
    held = _history_gate(hs, rung, action)
    if held is not None:
        return Outcome(failed=True, message=held, data={"held": True})
    facts = await gate_facts(hs, action)
    if isinstance(facts, Refusal):
        return _left(facts)
    refusal = ownership(hs, action, facts)
    if refusal is not None:
        return _left(refusal)
    plan = action.plan(action_context(hs, params, facts, interrupted=before))
    stopped = await _lease_and_admit(hs, action, plan)
    if stopped is not None:
        return stopped
    outcome = await _carry_out(hs, action, plan, _Settling(params, handlers))
    if outcome.failed or hs.dry or outcome.left is not None or VERIFIED_KEY in outcome.data:
        return outcome  # VERIFIED_KEY: a dropped connection's outcome, settled by evidence
    context = action_context(hs, params, {}, plan, before)
    problem = await verify(hs, action, handlers, context)
    outcome.data[VERIFIED_KEY] = verified(hs, action)
    if problem is not None:
        outcome.failed = True
        outcome.message = f"{action.name}: verification failed: {problem}"
    return outcome


async def _lease_and_admit(hs: HostStep, action: Action, plan: ActionPlan) -> Outcome | None:
    """Before an action that takes the node out of service or puts it back: this run's lease
    on the node; before a disruptive one, also admission under the caps and the budget as the
    whole fleet stands (engine/fleet_state.py). None: go on."""
    if plan.noop or plan.refused is not None:
        return None
    if not (action.disruptive or action.returns_to_service):
        return None
    leased = await _node_lease(hs, action)  # never act on a node another run works on
    if leased is not None:
        return _left(leased)
    if not action.disruptive:
        return None
    held = await admit(hs)
    if held is None:
        return None
    hold = f"{hs.state.name}: {action.name} {held}"
    hs.ctx.result.holds.append(hold)
    return Outcome(
        failed=True, message=f"{action.name} {held}", data={"held": True, HOLD_KEY: hold}
    )


async def _node_lease(hs: HostStep, action: Action) -> Refusal | None:
    """This run's lease on the node (engine/node_lease.py): taken before it is disrupted."""
    leases = hs.ctx.node_leases
    if leases is None or hs.dry:
        return None
    return await leases.take(hs, action.name)


def _left(refusal: Refusal) -> Outcome:
    return Outcome(skipped=True, message=refusal.reason, left=(refusal.kind, refusal.reason))


def _open_intent(hs: HostStep, action: Action) -> OpenIntent | None:
    key = (hs.state.name, hs.step.key, action.name)
    return hs.ctx.options.resume.intents.get(key)


def _history_gate(hs: HostStep, rung: Step, action: Action) -> str | None:
    """cooldown / max_attempts across runs, read from the journal. A node rebooted for the
    same fault too often is left for a human ("needs RMA"), not rebooted again."""
    memory = hs.ctx.options.memory
    if memory is None or (rung.cooldown is None and rung.max_attempts is None):
        return None
    window = rung.cooldown.seconds if rung.cooldown is not None else ATTEMPTS_WINDOW
    now = time.time()
    times = memory.action_times(hs.state.name, action.name, now - window)
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


@dataclass(frozen=True, slots=True)
class _Settling:
    """What settling an action whose connection dropped needs: its params and handlers."""

    params: Mapping[str, Any]
    handlers: Handlers


async def _carry_out(
    hs: HostStep, action: Action, plan: ActionPlan, settling: _Settling
) -> Outcome:
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
        if plan.failure is not None:
            return Outcome(failed=True, message=f"check mode: {action.name}: {plan.failure}")
        outcome = Outcome(changed=action.changes_state, message=planned_text)
        waits = _would_wait(hs, action, plan)
        if waits is not None:  # what the real run would most likely do: defer the node
            outcome.left = (LeftKind.DEFERRED, waits)
            outcome.message = waits
        return outcome
    evidence = await _evidence(hs, plan)
    started = time.time()
    hs.action_event(ActionStarted, action.name, disruptive=action.disruptive, evidence=evidence)
    try:
        outcome = await _run_plan(hs, action, plan, evidence)
    except ConnectionLostError:
        # Sent, maybe run: settled by evidence, never sent again (engine/interrupted.py).
        params, handlers = settling.params, settling.handlers
        outcome = await lost_during(hs, action, params, handlers, evidence=evidence, at=started)
    hs.action_event(ActionTaken, action.name, failed=outcome.failed)
    return outcome


def _would_wait(hs: HostStep, action: Action, plan: ActionPlan) -> str | None:
    """In --check: the plan waits for jobs to leave (a command that defers) and Slurm shows
    jobs on the node now. The real run would wait, then defer the node unless they end in
    time; the check says so, so its plan is the real run's, not the steps after a drain that
    the busy node would never reach."""
    waiting = [c for c in plan.commands if c.defer_rc is not None]
    slurm = hs.state.probe_facts.get("slurm_node")
    if not waiting or slurm is None or not getattr(slurm, "has_jobs", False):
        return None
    return (
        f"check mode: {action.name}: jobs are running on {hs.state.name}: the run would wait"
        " for them to leave (wait_timeout), then defer the node (left drained, the next run"
        " finishes the work) unless they end first"
    )


async def _evidence(hs: HostStep, plan: ActionPlan) -> dict[str, str]:
    """What a resumed run needs to tell whether this action happened and what to restore: the
    plan's `before`, and for a reboot the boot id before it (read before the intent is
    journaled, so the intent can carry it)."""
    evidence = dict(plan.before)
    if any(c.expect_unreachable for c in plan.commands):
        evidence["boot_id"] = await boot_id(hs) or ""
    return evidence


async def _run_plan(
    hs: HostStep, action: Action, plan: ActionPlan, evidence: Mapping[str, str]
) -> Outcome:
    outcome = Outcome(changed=action.changes_state, message="; ".join(plan.notes))
    for planned in plan.commands:
        if (outcome.failed or outcome.left is not None) and not planned.always:
            continue
        result = await _run_planned(hs, planned, evidence)
        outcome.commands.append(result)
        if planned.defer_rc is not None and result.rc == planned.defer_rc:
            _not_now(hs, action, planned, result, outcome)
        elif not (result.ok or planned.ignore_rc or outcome.failed):
            detail = (result.stderr.strip() or result.stdout.strip())[:300]
            outcome.failed = True
            outcome.message = f"{action.name}: {planned.why} failed (rc={result.rc}): {detail}"
    if plan.failure is not None and not outcome.failed:
        outcome.failed, outcome.message = True, f"{action.name}: {plan.failure}"
    if action.result_probe is not None and outcome.commands and not outcome.failed:
        parsed = hs.parse_output(action.result_probe, outcome.commands[-1])
        outcome.data["facts"] = parsed.data.get("facts")
        if parsed.failed or parsed.skipped:
            outcome.failed, outcome.message = True, parsed.message
    return outcome


def _not_now(
    hs: HostStep, action: Action, planned: PlannedCommand, result: CommandResult, outcome: Outcome
) -> None:
    """Not now (e.g. jobs still running): with time left to wait (`park_for`) the host is
    parked, its batch and the later ones going on (engine/parking.py); else it is deferred.
    Only the step's own action parks: its params are the ones its check is looked at with."""
    why = (result.stdout.strip().splitlines() or [planned.why])[-1]
    own = hs.step.args.get("name") == action.name
    if planned.park_for is None or planned.park_for <= 0 or not own:
        outcome.left = (LeftKind.DEFERRED, f"deferred: {why}")
    else:
        until = time.time() + planned.park_for
        wait = planned.wait if planned.wait is not None else result.duration + planned.park_for
        outcome.data[PARK_KEY] = parked_data(action.name, why, until, wait)
        clock = time.strftime("%H:%M:%S", time.localtime(until))
        outcome.left = (PARKED, f"parked: {why}; looked at again until {clock}")
    outcome.message = outcome.left[1]


async def _run_planned(
    hs: HostStep, planned: PlannedCommand, evidence: Mapping[str, str]
) -> CommandResult:
    if planned.expect_unreachable:
        return await send_reboot_like(hs, planned, evidence.get("boot_id", ""))
    return await hs.command(planned.command, timeout=planned.timeout)
