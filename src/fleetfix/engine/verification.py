"""Verifying an action: its own probes and check, then the step's `verify:` list."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from fleetfix.actions.base import Action, ActionContext, ActionPlan
from fleetfix.actions.slurm import RUN_ID_VAR
from fleetfix.engine.gpus import most_seen
from fleetfix.engine.hoststep import HostStep, Outcome, registered, with_lines
from fleetfix.playbook.model import StepKind

Handlers = Mapping[StepKind, Callable[[HostStep], Awaitable[Outcome]]]

VERIFIED_KEY = "fleetfix_verified"
"""In an action's result: what its verification left on the host (the latest facts of the
probes it ran, the values its `verify:` steps registered). A resumed run replays a finished
action instead of running it again, and restores these with it, so the end-of-run health
check and the steps after it see the node as verified, not as it was before the fix."""


def action_context(
    hs: HostStep,
    params: Mapping[str, Any],
    facts: Mapping[str, Any],
    plan: ActionPlan | None = None,
    interrupted: Mapping[str, str] | None = None,
) -> ActionContext:
    """What an action sees; `fleetfix_gpus_seen` is the most GPUs the node ever showed
    (this run or any run in the journal): the count it must come back with; `fleetfix_run_id`
    the run acting (a drain reason names it)."""
    seen = most_seen(hs.ctx, hs.state)
    variables = {**hs.variables, "fleetfix_gpus_seen": seen, RUN_ID_VAR: hs.ctx.options.run_id}
    return ActionContext(hs.state.name, params, facts, variables, plan, interrupted or {})


async def verify(
    hs: HostStep, action: Action, handlers: Handlers, context: ActionContext
) -> str | None:
    """The action's own verification, then the step's `verify:` list; first problem wins."""
    for name in action.verify:
        probed = await hs.probe(name, {})
        if probed.failed or probed.skipped:  # skipped: the node lacks the tool
            return probed.message
    if action.check is not None:
        names = (*action.requires, *action.optional, *action.verify)
        if action.result_probe is not None:
            names = (*names, action.result_probe)
        facts = {name: hs.state.probe_facts.get(name) for name in names}
        problem = action.check(replace(context, facts=facts))
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


def verified(hs: HostStep, action: Action) -> dict[str, Any]:
    """What verification left on the host, for VERIFIED_KEY (probes it did not reach are
    not there; a failed probe's facts are not either)."""
    checks = hs.step.verify
    names = [*action.verify, *(str(c.args["name"]) for c in checks if c.kind is StepKind.PROBE)]
    data = hs.state.probe_data
    return {
        "probes": {name: data[name] for name in dict.fromkeys(names) if name in data},
        "registered": {
            c.register: hs.state.facts[c.register]
            for c in checks
            if c.register is not None and c.register in hs.state.facts
        },
    }
