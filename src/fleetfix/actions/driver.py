"""reload_driver: unload and reload the NVIDIA kernel modules on a drained, idle node."""

from __future__ import annotations

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import busy_reason, quote_all
from fleetfix.actions.gpu import stop_start
from fleetfix.probes.gpu_facts import NvidiaSmiFacts
from fleetfix.probes.kernel_modules import KernelModulesFacts

DRIVER_HOLDERS = (
    "nvidia-persistenced",
    "nvidia-dcgm",
    "dcgm",
    "nvidia-fabricmanager",
    "nvidia-imex",
)
"""Services holding /dev/nvidia* that make `rmmod nvidia` fail with "Module nvidia is in use"."""

BASE_MODULES = ("nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm")


def _drained_gate(ctx: ActionContext) -> str | None:
    slurm = ctx.facts.get("slurm_node")
    if slurm is None or slurm.drained or slurm.down:
        return None
    return f"node is {slurm.state} in Slurm; drain it first (slurm_drain with wait: true)"


def _load_order(modules: KernelModulesFacts) -> list[str]:
    """Modules to load back: what was loaded (dependencies first), at least the base set."""
    unloaded = list(reversed(modules.unload_order)) if modules.nvidia_loaded else []
    wanted = unloaded or list(BASE_MODULES)
    return [m for m in wanted if not m.startswith("nvidia_") or m in wanted]


def _plan(ctx: ActionContext) -> ActionPlan:
    modules: KernelModulesFacts = ctx.facts["kernel_modules"]
    refusal = busy_reason(ctx) or _drained_gate(ctx)
    if refusal is not None:
        return ActionPlan(refused=refusal)
    stops, starts = stop_start(ctx.facts.get("services"), DRIVER_HOLDERS)
    unloads = [
        PlannedCommand(f"rmmod {quote_all([m])}", f"unload {m}")
        for m in (modules.unload_order if modules.nvidia_loaded else ())
    ]
    loads = [
        PlannedCommand(f"modprobe {quote_all([m])}", f"load {m}", always=True)
        for m in _load_order(modules)
    ]
    note = "modules were not loaded" if not modules.nvidia_loaded else ""
    commands = (*stops, *unloads, *loads, *starts)
    return ActionPlan(commands=commands, notes=(note,) if note else ())


def _check(ctx: ActionContext) -> str | None:
    modules: KernelModulesFacts | None = ctx.facts.get("kernel_modules")
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if modules is None or not modules.nvidia_loaded:
        return "nvidia module not loaded after reload"
    if smi is None:
        return "nvidia-smi gave no facts after reload"
    expected = ctx.vars.get("gpus")
    if expected is not None and smi.gpu_count != int(expected):
        return f"{smi.gpu_count} GPUs visible after reload, inventory expects {expected}"
    if smi.errors:
        return f"nvidia-smi reports: {smi.errors[0]}"
    return None


ACTIONS = (
    Action(
        name="reload_driver",
        summary="stop driver holders, unload NVIDIA modules in dependency order, reload, restore",
        plan=_plan,
        params={"allow_busy": "reload even with GPU processes or Slurm jobs (kills them)"},
        requires=("gpu_processes", "kernel_modules", "services"),
        optional=("slurm_node",),
        verify=("kernel_modules", "nvidia_smi"),
        check=_check,
        disruptive=True,
    ),
)
