"""Slurm actions: drain with a fleetfix reason, resume only what fleetfix drained."""

from __future__ import annotations

import shlex

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import duration, flag, node_name, params_checker, seconds
from fleetfix.probes.slurm_node import SlurmNodeFacts

REASON_PREFIX = "fleetfix:"


def drain_reason(ctx: ActionContext) -> str:
    """Every fleetfix drain reason starts with 'fleetfix:' so resume can tell it from a human's."""
    reason = str(ctx.params.get("reason") or "remediation in progress").strip()
    return reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}"


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


def _wait_drained(ctx: ActionContext, node: str) -> PlannedCommand:
    """Poll until running jobs have left (DRAINED, not DRAINING)."""
    timeout = seconds(ctx.params.get("wait_timeout"), 3600.0)
    quoted = shlex.quote(node)
    loop = (
        f"while scontrol show node {quoted} | grep -Eq 'State=[A-Z]*(ALLOC|MIX|COMPLETING)'; "
        "do sleep 5; done"
    )
    return PlannedCommand(loop, f"wait until {node} is DRAINED", timeout=timeout)


def _check_drained(ctx: ActionContext) -> str | None:
    facts = ctx.facts.get("slurm_node")
    if facts is None or facts.drained or facts.draining:
        return None
    return f"node is {facts.state}, not draining"


def _plan_resume(ctx: ActionContext) -> ActionPlan:
    facts = ctx.facts["slurm_node"]
    node = node_name(ctx)
    if not (facts.drained or facts.draining or facts.down):
        return ActionPlan(notes=(f"{node} is {facts.state}: nothing to resume",))
    if not facts.reason_is_fleetfix:
        return ActionPlan(
            notes=(f"{node} was drained by someone else (reason: {facts.reason}); left drained",)
        )
    command = f"scontrol update NodeName={shlex.quote(node)} State=RESUME"
    return ActionPlan(commands=(PlannedCommand(command, f"resume {node} in Slurm"),))


def _check_resumed(ctx: ActionContext) -> str | None:
    facts = ctx.facts.get("slurm_node")
    if facts is None or not (facts.drained or facts.draining) or not facts.reason_is_fleetfix:
        return None
    return f"node still {facts.state} after resume"


ACTIONS = (
    Action(
        name="slurm_drain",
        validate=params_checker({"wait_timeout": duration}),
        summary="drain the node in Slurm with a 'fleetfix:' reason; optionally wait for DRAINED",
        plan=_plan_drain,
        params={
            "reason": "drain reason (prefixed with 'fleetfix:')",
            "wait": "wait until running jobs have left (DRAINED)",
            "wait_timeout": "how long to wait (default 1h)",
            "node": "Slurm node name (default: short inventory hostname)",
        },
        requires=("slurm_node",),
        verify=("slurm_node",),
        check=_check_drained,
        disruptive=True,
    ),
    Action(
        name="slurm_resume",
        summary="resume the node in Slurm, only if fleetfix drained it",
        plan=_plan_resume,
        params={"node": "Slurm node name (default: short inventory hostname)"},
        requires=("slurm_node",),
        verify=("slurm_node",),
        check=_check_resumed,
    ),
)
