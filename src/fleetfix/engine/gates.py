"""The gates the engine enforces for every mutating action, whatever the playbook says.

1. Fail closed: every probe a gate reads must answer; a probe that failed, timed out or could
   not be parsed refuses the action, naming the probe and why.
2. Ownership: a node drained or marked down by anyone else (a Slurm reason without the
   `fleetfix:` prefix), or on the hands-off list, is never acted on. Only an explicit
   `--override-ownership HOST` lifts that, and the override is journaled with who used it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetfix.actions.base import Action
from fleetfix.engine.hoststep import HostStep
from fleetfix.events import OwnershipOverridden

SLURM_PROBE = "slurm_node"
NO_SLURM_VAR = "fleetfix_slurm"
"""Host var: false on nodes that are not in Slurm (nothing to own them there)."""
HANDS_OFF_VAR = "fleetfix_hands_off"
"""Host var: true (or a reason) puts a node on the hands-off list from the inventory."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the engine will not let an action touch this node now."""

    kind: str  # "owned" | "refused"
    reason: str


def in_slurm(hs: HostStep) -> bool:
    value = hs.variables.get(NO_SLURM_VAR, True)
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "0", "off")
    return bool(value)


def gate_probes(hs: HostStep, action: Action) -> tuple[str, ...]:
    """The probes an action's gates read: its own, plus Slurm for the ownership gate."""
    names = [*action.requires, *action.optional]
    if action.changes_state and in_slurm(hs) and SLURM_PROBE not in names:
        names.append(SLURM_PROBE)
    if not in_slurm(hs):
        names = [n for n in names if n != SLURM_PROBE]
    return tuple(dict.fromkeys(names))


async def gate_facts(hs: HostStep, action: Action) -> dict[str, Any] | Refusal:
    """Fresh facts for every gate. A mutating action refuses when any of them cannot be read;
    a read-only one (nccl-tests) sees None for an optional probe the node lacks."""
    facts: dict[str, Any] = {}
    for name in gate_probes(hs, action):
        probed = await hs.probe(name, {})
        if not probed.failed:
            facts[name] = hs.state.probe_facts[name]
            continue
        if action.changes_state or name in action.requires:
            return Refusal(
                "refused",
                f"{action.name} refused: cannot evaluate its safety gates: {probed.message}",
            )
        facts[name] = None
    return facts


def ownership(hs: HostStep, action: Action, facts: dict[str, Any]) -> Refusal | None:
    """Someone else's node is left alone, unless the operator named it in --override-ownership
    (then the override is journaled with who used it)."""
    if not action.changes_state:
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
    return Refusal("owned", f"left alone: owned by {who}: {reason}")


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
