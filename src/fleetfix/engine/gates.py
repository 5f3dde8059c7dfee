"""The gates the engine enforces for every mutating action, whatever the playbook says.

1. Fail closed: every probe a gate reads must answer; a probe that failed, timed out or could
   not be parsed refuses the action, naming the probe and why.
2. Ownership: a node drained or marked down by anyone else (a Slurm reason without the
   `fleetfix:` prefix), or on the hands-off list, is never acted on. Only an explicit
   `--override-ownership HOST` lifts that, and the override is journaled with who used it.
   It holds for active tests too: they load GPUs someone else may be working on.
3. Out of scheduling: an active test (`Action.active_test`: nccl-tests, dcgmi diag -r 2+)
   runs only on a node no job can land on mid-test: DRAINED (drain set, no job, no epilog
   still COMPLETING) or in a fleetfix reservation without jobs, or one outside Slurm
   (`fleetfix_slurm: false`). Otherwise the host is left `refused`, saying what it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetfix.actions.base import Action
from fleetfix.engine.hoststep import HostStep
from fleetfix.events import OwnershipOverridden
from fleetfix.probes.slurm_node import SlurmNodeFacts
from fleetfix.verdicts import LeftKind

SLURM_PROBE = "slurm_node"
NO_SLURM_VAR = "fleetfix_slurm"
"""Host var: false on nodes that are not in Slurm (nothing to own them there)."""
HANDS_OFF_VAR = "fleetfix_hands_off"
"""Host var: true (or a reason) puts a node on the hands-off list from the inventory."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the engine will not let an action touch this node now."""

    kind: LeftKind  # OWNED or REFUSED
    reason: str


def in_slurm(hs: HostStep) -> bool:
    value = hs.variables.get(NO_SLURM_VAR, True)
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "0", "off")
    return bool(value)


def gate_probes(hs: HostStep, action: Action) -> tuple[str, ...]:
    """The probes an action's gates read: its own, plus Slurm for the ownership gate."""
    names = [*action.requires, *action.optional]
    gated = action.changes_state or action.active_test
    if gated and in_slurm(hs) and SLURM_PROBE not in names:
        names.append(SLURM_PROBE)
    if not in_slurm(hs):
        names = [n for n in names if n != SLURM_PROBE]
    return tuple(dict.fromkeys(names))


async def gate_facts(hs: HostStep, action: Action) -> dict[str, Any] | Refusal:
    """Fresh facts for every gate, and the active-test gate on them. A mutating action refuses
    when any of them cannot be read, an active test when Slurm cannot be; a read-only one
    sees None for an optional probe the node lacks."""
    facts: dict[str, Any] = {}
    for name in gate_probes(hs, action):
        probed = await hs.probe(name, {})
        if not (probed.failed or probed.skipped):  # skipped: the node lacks the tool
            facts[name] = hs.state.probe_facts[name]
            continue
        needed = action.active_test and name == SLURM_PROBE
        if action.changes_state or name in action.requires or needed:
            return Refusal(
                LeftKind.REFUSED,
                f"{action.name} refused: cannot evaluate its safety gates: {probed.message}",
            )
        facts[name] = None
    return out_of_scheduling(hs, action, facts) or facts


def ownership(hs: HostStep, action: Action, facts: dict[str, Any]) -> Refusal | None:
    """Someone else's node is left alone, unless the operator named it in --override-ownership
    (then the override is journaled with who used it)."""
    if not (action.changes_state or action.active_test):
        return None
    owner = _owner(hs, facts)
    if owner is None:
        return None
    who, reason = owner
    ctx, host = hs.ctx, hs.state.name
    if host in ctx.options.override_ownership:
        by = ctx.options.operator or "unknown"
        ctx.bus.emit(OwnershipOverridden(host=host, owner=who, reason=reason, by=by))
        return None
    return Refusal(LeftKind.OWNED, f"left alone: owned by {who}: {reason}")


def _owner(hs: HostStep, facts: dict[str, Any]) -> tuple[str, str] | None:
    host = hs.state.name
    listed = hs.ctx.options.hands_off.get(host)
    if listed is not None:
        return "the hands-off list", listed or "listed"
    marked = hs.variables.get(HANDS_OFF_VAR)
    if marked and str(marked).strip().lower() not in ("false", "no", "0", "off"):
        reason = str(marked) if not isinstance(marked, bool) and str(marked) != "True" else ""
        return f"the inventory ({HANDS_OFF_VAR})", reason or "set"
    slurm = facts.get(SLURM_PROBE)
    if slurm is None:
        return None
    out = slurm.drained or slurm.draining or slurm.down
    reason = (slurm.reason or "").strip()
    if not out or not reason or slurm.reason_is_fleetfix:
        return None
    return (slurm.reason_user or "someone else"), reason


TAKES_OUT = frozenset({"slurm_reserve", "slurm_drain"})
PUTS_BACK = frozenset({"slurm_release", "slurm_resume"})


def out_of_scheduling(hs: HostStep, action: Action, facts: dict[str, Any]) -> Refusal | None:
    """An active test on a node a job could land on mid-test is refused: the test would
    disturb the job and the job spoil the test (NVIDIA and Slurm run such diagnostics only on
    nodes taken out of scheduling)."""
    if not action.active_test or not in_slurm(hs):
        return None
    slurm: SlurmNodeFacts | None = facts.get(SLURM_PROBE)
    if slurm is not None and (
        slurm.drained or (slurm.reservation_is_fleetfix and not slurm.has_jobs)
    ):
        return None
    if hs.dry and _planned_out(hs):
        return None
    where = "its Slurm state is unknown" if slurm is None else _in_scheduling(slurm)
    return Refusal(
        LeftKind.REFUSED,
        f"{action.name} refused: an active test runs only on a node taken out of scheduling"
        f" (drained, or in a fleetfix reservation: slurm_reserve); {where}",
    )


def _in_scheduling(slurm: SlurmNodeFacts) -> str:
    """Why a job could still be (or start) on the node, in an operator's words."""
    if slurm.completing:
        return f"a job is still completing on it (state {slurm.state})"
    if slurm.has_jobs:
        return f"Slurm has jobs on it (state {slurm.state})"
    if slurm.reserved and not slurm.reservation_is_fleetfix:
        held = slurm.reservation or "a reservation Slurm does not name"
        return f"it is in {held}, not a fleetfix reservation (state {slurm.state})"
    return f"it is {slurm.state} in Slurm: a job could start on it mid-test"


def _planned_out(hs: HostStep) -> bool:
    """--check changes nothing, so a reservation or drain an earlier step of this run only
    planned is not in Slurm: in the plan it counts as made, as in the real run. The latest
    such step on the host decides (a planned release puts the node back)."""
    for result in reversed(hs.ctx.result.results):
        ladder = result.data.get("ladder") if result.host == hs.state.name else None
        last = ladder[-1] if isinstance(ladder, list) and ladder else None
        if not isinstance(last, dict) or last.get("failed"):
            continue
        if last.get("action") in TAKES_OUT:
            return True
        if last.get("action") in PUTS_BACK:
            return False
    return False
