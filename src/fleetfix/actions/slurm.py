"""Slurm actions: drain with a fleetfix reason, resume only what fleetfix drained, and
reserve a node for active tests (a `fleetfix-` MAINT reservation) and release it after."""

from __future__ import annotations

import math
import shlex

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import duration, flag, node_name, params_checker, seconds
from fleetfix.actions.validation import return_to_service_problems
from fleetfix.probes.slurm_node import (
    FLEETFIX_RESERVATION_PREFIX,
    FLEETFIX_RUN_TAG,
    SlurmNodeFacts,
)

REASON_PREFIX = "fleetfix:"
RUN_ID_VAR = "fleetfix_run_id"
"""In an action's vars: the id of the run acting (engine/verification.py action_context)."""
REASON_LIMIT = 250
"""Longest drain reason fleetfix sets (Slurm keeps longer ones; `sinfo -R` shows far less)."""


def drain_reason(ctx: ActionContext) -> str:
    """Every fleetfix drain reason starts with 'fleetfix:' so resume can tell it from a human's,
    and ends naming the run that set it, `(run ID)`, so a node shows whose it is."""
    reason = str(ctx.params.get("reason") or "remediation in progress").strip()
    reason = reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}"
    run = str(ctx.vars.get(RUN_ID_VAR) or "")
    if not run:
        return reason[:REASON_LIMIT]
    tag = f" (run {run})"
    base = FLEETFIX_RUN_TAG.sub("", reason).rstrip()  # an earlier run's, carried in the text
    return base[: REASON_LIMIT - len(tag)] + tag


def _plan_drain(ctx: ActionContext) -> ActionPlan:
    facts = ctx.facts["slurm_node"]
    node = node_name(ctx)
    if facts.drained or facts.draining:
        return _already_drained(ctx, facts, node)
    update = (
        f"scontrol update NodeName={shlex.quote(node)} State=DRAIN "
        f"Reason={shlex.quote(drain_reason(ctx))}"
    )
    commands = [PlannedCommand(update, f"drain {node} in Slurm")]
    if flag(ctx.params, "wait"):
        commands.append(_wait_drained(ctx, node))
    return ActionPlan(commands=tuple(commands))


def _already_drained(ctx: ActionContext, facts: SlurmNodeFacts, node: str) -> ActionPlan:
    """A human's drain reason is never touched; fleetfix's own may be updated (e.g. to say
    the fix failed and the node needs RMA)."""
    commands: list[PlannedCommand] = []
    wanted = drain_reason(ctx)
    if facts.reason_is_fleetfix and ctx.params.get("reason") and facts.reason != wanted:
        update = f"scontrol update NodeName={shlex.quote(node)} Reason={shlex.quote(wanted)}"
        commands.append(PlannedCommand(update, f"update {node}'s fleetfix drain reason"))
        note = f"{node} already drained by fleetfix; reason now {wanted!r}"
    else:
        who = "fleetfix" if facts.reason_is_fleetfix else "someone else"
        note = f"{node} already drained by {who} (reason: {facts.reason}); reason kept"
    if flag(ctx.params, "wait") and facts.draining:
        commands.append(_wait_drained(ctx, node))
    return ActionPlan(commands=tuple(commands), notes=(note,))


DEFER_RC = 75
"""EX_TEMPFAIL: the jobs have not left yet; the engine parks the host, or defers it."""
DEFAULT_DRAIN_WAIT = 300.0
FIRST_LOOK = 5.0
"""How long the drain step itself polls for the jobs to leave (an epilog finishing) before
the engine parks the node for the rest of the wait and lets its batch go on."""


def _wait_drained(ctx: ActionContext, node: str) -> PlannedCommand:
    """Poll briefly (FIRST_LOOK) until running jobs have left (DRAINED: no ALLOCATED/MIXED, no
    COMPLETING epilog). Still busy then: the node stays drained with a pending reason naming
    its jobs, and the command exits DEFER_RC. The engine parks the host for the rest of
    `wait_timeout` (`park_for`: its batch and the later ones go on, and it looks again with
    `_check_drained`), then defers it; the next run finishes the work. A Slurm state it
    cannot read fails the wait: unknown is never read as drained."""
    wait = seconds(ctx.params.get("wait_timeout"), DEFAULT_DRAIN_WAIT)
    first_look = min(wait, FIRST_LOOK)
    park_for = wait - first_look
    quoted = shlex.quote(node)
    base = drain_reason(ctx).removeprefix(REASON_PREFIX).strip()
    pending = shlex.quote(f"{REASON_PREFIX} pending {base}; waiting for job(s) ")
    # Parked, the engine says how long it waited in the end; deferred now, this line does.
    tail = (
        "" if park_for > 0 else f" after {int(wait)}s: left drained, the next run finishes the work"
    )
    script = (
        f"deadline=$(($(date +%s) + {math.ceil(first_look)})); "
        "while :; do "
        f"out=$(scontrol show node {quoted}) || "
        f"{{ echo 'cannot read the Slurm state of {node}' >&2; exit 1; }}; "
        """printf '%s\\n' "$out" | grep -Eq 'State=[A-Z+]*(ALLOC|MIX|COMPLETING)' || exit 0; """
        'if [ "$(date +%s)" -ge "$deadline" ]; then '
        f"jobs=$(squeue -h -w {quoted} -o %i 2>/dev/null | paste -sd, -); "
        "jobs=${jobs:-unknown}; "
        f'scontrol update NodeName={quoted} Reason={pending}"$jobs"; '
        f'echo "job(s) $jobs still running on {node}{tail}"; '
        f"exit {DEFER_RC}; fi; "
        "sleep 1; done"
    )
    return PlannedCommand(
        script,
        f"wait until {node} is DRAINED",
        timeout=first_look + 60,
        defer_rc=DEFER_RC,
        park_for=park_for or None,
        wait=wait,
    )


def _check_drained(ctx: ActionContext) -> str | None:
    """Drained (or draining, when the step does not wait for the jobs): a waiting drain is
    done only once the jobs have left, so a resumed run re-runs (and defers) one that was
    interrupted while they still ran."""
    facts = ctx.facts.get("slurm_node")
    if facts is None or facts.drained:
        return None
    if facts.draining and not flag(ctx.params, "wait"):
        return None
    if facts.draining:
        return f"node is {facts.state}: its jobs have not left"
    return f"node is {facts.state}, not draining"


def _plan_resume(ctx: ActionContext) -> ActionPlan:
    """Resume only a node fleetfix drained, and only after it validates: every GPU it should
    have is back and the fault is gone. Otherwise it stays drained, its reason saying why."""
    facts = ctx.facts["slurm_node"]
    node = node_name(ctx)
    if not (facts.drained or facts.draining or facts.down):
        return ActionPlan(notes=(f"{node} is {facts.state}: nothing to resume",))
    if not facts.reason_is_fleetfix:
        return ActionPlan(
            notes=(f"{node} was drained by someone else (reason: {facts.reason}); left drained",)
        )
    problems = return_to_service_problems(ctx)
    if problems:
        why = "; ".join(problems)
        reason = shlex.quote(f"{REASON_PREFIX} not returned to service: {why}"[:250])
        update = f"scontrol update NodeName={shlex.quote(node)} Reason={reason}"
        return ActionPlan(
            commands=(PlannedCommand(update, f"keep {node} drained, saying why"),),
            failure=f"not returned to service: {why}",
        )
    command = f"scontrol update NodeName={shlex.quote(node)} State=RESUME"
    return ActionPlan(commands=(PlannedCommand(command, f"resume {node} in Slurm"),))


def _check_resumed(ctx: ActionContext) -> str | None:
    facts = ctx.facts.get("slurm_node")
    if facts is None or not (facts.drained or facts.draining) or not facts.reason_is_fleetfix:
        return None
    return f"node still {facts.state} after resume"


DEFAULT_RESERVATION = 7200.0
"""A test reservation ends by itself after 2 hours, even if fleetfix dies before releasing it."""


def reservation_name(ctx: ActionContext) -> str:
    """The `name` param, else `fleetfix-<node>`; always with the `fleetfix-` prefix, which is
    how slurm_node (and so the engine's active-test gate) recognises fleetfix's own."""
    name = str(ctx.params.get("name") or node_name(ctx)).strip()
    return (
        name
        if name.startswith(FLEETFIX_RESERVATION_PREFIX)
        else (f"{FLEETFIX_RESERVATION_PREFIX}{name}")
    )


def _plan_reserve(ctx: ActionContext) -> ActionPlan:
    """A MAINT reservation of this node for fleetfix's active tests: Slurm starts no job on
    it until it is released (or ends). Refused while a job (or its epilog) holds the node, or
    when someone else's reservation does; a no-op when a fleetfix reservation already does."""
    facts: SlurmNodeFacts = ctx.facts["slurm_node"]
    node = node_name(ctx)
    if facts.reservation_is_fleetfix:
        return ActionPlan(notes=(f"{node} already in fleetfix reservation {facts.reservation}",))
    if facts.reserved:
        which = facts.reservation or "a reservation Slurm does not name here"
        return ActionPlan(refused=f"{node} is in someone else's reservation ({which})")
    if facts.has_jobs:
        return ActionPlan(refused=f"Slurm has jobs on {node} (state {facts.state})")
    name = reservation_name(ctx)
    minutes = max(1, math.ceil(seconds(ctx.params.get("duration"), DEFAULT_RESERVATION) / 60))
    create = (
        f"scontrol create reservation ReservationName={shlex.quote(name)} "
        f"Nodes={shlex.quote(node)} StartTime=now Duration={minutes} Users=root Flags=MAINT"
    )
    why = f"reserve {node} for fleetfix's tests ({name}, {minutes} min)"
    return ActionPlan(commands=(PlannedCommand(create, why),), notes=(name,))


def _check_reserved(ctx: ActionContext) -> str | None:
    facts = ctx.facts.get("slurm_node")
    if facts is None or facts.reservation_is_fleetfix:
        return None
    held = f", in {facts.reservation}" if facts.reservation else ""
    return f"node is {facts.state}{held}, not in a fleetfix reservation"


def _plan_release(ctx: ActionContext) -> ActionPlan:
    """Delete the fleetfix reservation holding the node; nothing to do when there is none
    (it ended, or was released). A reservation that vanishes meanwhile is not a failure."""
    facts: SlurmNodeFacts = ctx.facts["slurm_node"]
    node = node_name(ctx)
    if not facts.reservation_is_fleetfix or facts.reservation is None:
        return ActionPlan(notes=(f"no fleetfix reservation on {node}",))
    name = shlex.quote(facts.reservation)
    delete = (
        f"out=$(scontrol delete ReservationName={name} 2>&1) || case $out in "
        f"*'Requested reservation is invalid'*) echo {name} already gone;; "
        "*) printf '%s\\n' \"$out\" >&2; exit 1;; esac"
    )
    return ActionPlan(commands=(PlannedCommand(delete, f"release {node} ({name})"),))


def _check_released(ctx: ActionContext) -> str | None:
    facts = ctx.facts.get("slurm_node")
    if facts is None or not facts.reservation_is_fleetfix:
        return None
    return f"node still in fleetfix reservation {facts.reservation}"


ACTIONS = (
    Action(
        name="slurm_drain",
        repairs=False,
        validate=params_checker({"wait_timeout": duration}),
        summary="drain the node in Slurm with a 'fleetfix:' reason; optionally wait for DRAINED",
        plan=_plan_drain,
        params={
            "reason": "drain reason (prefixed with 'fleetfix:')",
            "wait": "wait until running jobs have left (DRAINED)",
            "wait_timeout": "how long to wait before deferring the node to the next run"
            " (default 5m)",
            "node": "Slurm node name (default: short inventory hostname)",
        },
        requires=("slurm_node",),
        verify=("slurm_node",),
        check=_check_drained,
        disruptive=True,
        repeatable=True,
    ),
    Action(
        name="slurm_resume",
        repairs=False,
        summary="resume the node in Slurm, only if fleetfix drained it and it validates",
        plan=_plan_resume,
        params={"node": "Slurm node name (default: short inventory hostname)"},
        requires=("slurm_node", "nvidia_smi", "xid"),
        optional=("services", "pci_gpus"),  # FM stopped on an NVSwitch board; GPUs on the bus
        verify=("slurm_node",),
        check=_check_resumed,
        returns_to_service=True,
        repeatable=True,
    ),
    Action(
        name="slurm_reserve",
        repairs=False,
        validate=params_checker({"duration": duration}),
        summary="reserve the node for fleetfix's active tests (a fleetfix- MAINT reservation)",
        plan=_plan_reserve,
        params={
            "name": "reservation name (default fleetfix-<node>; fleetfix- is always prefixed)",
            "duration": "how long it lasts at most, if never released (default 2h)",
            "node": "Slurm node name (default: short inventory hostname)",
        },
        requires=("slurm_node",),
        verify=("slurm_node",),
        check=_check_reserved,
        repeatable=True,
    ),
    Action(
        name="slurm_release",
        repairs=False,
        summary="delete the fleetfix reservation holding the node (none: nothing to do)",
        plan=_plan_release,
        params={"node": "Slurm node name (default: short inventory hostname)"},
        requires=("slurm_node",),
        verify=("slurm_node",),
        check=_check_released,
        repeatable=True,
    ),
)
