"""Validation before return to service: the node has every GPU it should, and the fault is gone
(nvidia-smi, the kernel log of this boot, and Fabric Manager running where the GPUs need it).

The expected GPU count never depends on the inventory alone: it is the most of the inventory's
`gpus`, Slurm's configured Gres, and the most GPUs fleetfix ever saw on the node (this run or
any run in the journal, passed in as `fleetfix_gpus_seen`). A node whose expected count nobody
knows is not resumed: fail closed.
"""

from __future__ import annotations

from typing import Any

from fleetfix.actions.base import ActionContext
from fleetfix.knowledge.health import Level, gpu_health
from fleetfix.knowledge.remedy import Remedy, from_log
from fleetfix.probes.base import to_data


def expected_gpus(ctx: ActionContext) -> tuple[int, str] | None:
    """(count, where it comes from) — the largest claim wins — or None when nothing knows."""
    claims: list[tuple[int, str]] = []
    inventory = _int(ctx.vars.get("gpus"))
    if inventory:
        claims.append((inventory, "the inventory's gpus"))
    slurm = ctx.facts.get("slurm_node")
    if slurm is not None and slurm.gpus_total:
        claims.append((int(slurm.gpus_total), "Slurm's Gres"))
    seen = _int(ctx.vars.get("fleetfix_gpus_seen"))
    if seen:
        claims.append((seen, "the most GPUs fleetfix saw on this node"))
    return max(claims, key=lambda claim: claim[0]) if claims else None


def return_to_service_problems(ctx: ActionContext) -> list[str]:
    """Why this node must stay out of service; empty when it may go back."""
    problems: list[str] = []
    smi = ctx.facts.get("nvidia_smi")
    expected = expected_gpus(ctx)
    if smi is None:
        problems.append("nvidia-smi gave no facts")
    else:
        services = ctx.facts.get("services")
        verdict = gpu_health(to_data(smi), None if services is None else to_data(services))
        if verdict.level is Level.BAD:
            problems.append(f"nvidia-smi: {verdict.text}")
        if expected is None:
            problems.append(
                "cannot tell how many GPUs the node should have (no inventory gpus, no Slurm"
                " Gres, never seen healthy by fleetfix)"
            )
        elif smi.gpu_count < expected[0]:
            problems.append(f"{smi.gpu_count} of {expected[0]} GPUs visible ({expected[1]})")
    xid = ctx.facts.get("xid")
    if xid is not None:
        logged = from_log(to_data(xid), None if smi is None else to_data(smi))
        if logged.remedy is not Remedy.NONE:
            problems.append(f"{'; '.join(logged.why)}: needs {logged.remedy.word}")
    return problems


def _int(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "", False) else None
    except (TypeError, ValueError):
        return None
