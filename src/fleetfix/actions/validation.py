"""Validation before return to service: the node has every GPU it should, and the fault is gone
(nvidia-smi, the kernel log of this boot, and Fabric Manager running where the GPUs need it).

The expected GPU count never depends on the inventory alone: it is the most of the inventory's
`gpus`, Slurm's configured Gres, the NVIDIA GPUs on the PCI bus (`pci_gpus`, when probed) and
the most GPUs fleetfix ever saw on the node (this run or any run in the journal, passed in as
`fleetfix_gpus_seen`): knowledge/gpu_count.py, the rule the end-of-run health check shares. A
node whose expected count nobody knows is not resumed: fail closed.
"""

from __future__ import annotations

from fleetfix.actions.base import ActionContext
from fleetfix.knowledge import gpu_count
from fleetfix.knowledge.gpu_count import Expected
from fleetfix.knowledge.health import Level, gpu_health
from fleetfix.knowledge.remedy import Remedy, from_log
from fleetfix.probes.base import to_data


def expected_gpus(ctx: ActionContext) -> Expected | None:
    """The largest claim (knowledge/gpu_count.py), or None when nothing knows."""
    slurm = ctx.facts.get("slurm_node")
    pci = ctx.facts.get("pci_gpus")
    return gpu_count.expected_gpus(
        inventory=ctx.vars.get("gpus"),
        gres=None if slurm is None else slurm.gpus_total,
        pci=None if pci is None else pci.count,
        seen=ctx.vars.get("fleetfix_gpus_seen"),
    )


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
        else:
            short = gpu_count.shortfall(smi.gpu_count, expected)
            if short is not None:
                problems.append(short)
    xid = ctx.facts.get("xid")
    if xid is not None:
        logged = from_log(to_data(xid), None if smi is None else to_data(smi))
        if logged.remedy is not Remedy.NONE:
            problems.append(f"{'; '.join(logged.why)}: needs {logged.remedy.word}")
    return problems
