"""How many GPUs a host in this run should show: knowledge/gpu_count.py's rule fed from the run.

The claims are the inventory's `gpus`, Slurm's Gres and the PCI bus as this run last read them
(`slurm_node`, `pci_gpus` probe data), and the most GPUs ever seen (this run, and the journal).
The nvidia_smi probe step is held to it when the playbook names no count (engine/hoststep.py),
and the end-of-run health check names every host short of it (engine/health.py).
"""

from __future__ import annotations

from fleetfix.engine.context import HostState, RunContext
from fleetfix.knowledge.gpu_count import Expected, expected_gpus, shortfall


def most_seen(ctx: RunContext, state: HostState) -> int | None:
    """The most GPUs the host ever showed: this run's probes, and the journal's history (read
    once per host and run, not at every probe: on PostgreSQL each read is a round trip)."""
    if not state.journal_gpus_read:
        memory = ctx.options.memory
        state.journal_gpus_seen = memory.gpus_seen(state.name) if memory is not None else None
        state.journal_gpus_read = True
    return max(state.gpus_seen or 0, state.journal_gpus_seen or 0) or None


def expected_gpus_of(ctx: RunContext, state: HostState) -> Expected | None:
    return expected_gpus(
        inventory=state.base_vars.get("gpus"),
        gres=state.probe_data.field("slurm_node", "gpus_total"),
        pci=state.probe_data.field("pci_gpus", "count"),
        seen=most_seen(ctx, state),
    )


def gpus_short(ctx: RunContext, state: HostState) -> str | None:
    """Why the host shows fewer GPUs than it has (`7 of 8 GPUs visible (Slurm's Gres)`), or
    None: nvidia-smi must show the largest count any claim makes."""
    if "nvidia_smi" not in state.probe_data:
        return None
    count = state.probe_data.field("nvidia_smi", "gpu_count")
    return shortfall(count, expected_gpus_of(ctx, state))
