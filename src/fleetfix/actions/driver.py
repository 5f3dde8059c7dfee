"""reload_driver: unload and reload the NVIDIA kernel modules on a drained, idle node."""

from __future__ import annotations

from collections.abc import Iterable

from fleetfix.actions.base import (
    Action,
    ActionContext,
    ActionPlan,
    PlannedCommand,
    remembered,
    union,
)
from fleetfix.actions.gates import busy_reason, quote_all
from fleetfix.probes.gpu_facts import NvidiaSmiFacts
from fleetfix.probes.kernel_modules import KernelModulesFacts
from fleetfix.probes.services import ServicesFacts

DRIVER_HOLDERS = (
    "nvidia-persistenced",
    "nvidia-dcgm",
    "dcgm",
    "nvidia-fabricmanager",
    "nvidia-imex",
)
"""Services holding /dev/nvidia* that make `rmmod nvidia` fail with "Module nvidia is in use"."""

NEEDED_AFTER_LOAD = ("nvidia-fabricmanager", "nvidia-persistenced")
"""Installed units a working driver needs running: without the fabric manager an NVSwitch
system's GPUs stay unusable, without persistence the next job pays the init."""

BASE_MODULES = ("nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm")
"""Loaded back when nothing was loaded before; `modules:` (e.g. adding nvidia_peermem for
GPUDirect RDMA) says what a node should have."""


def _drained_gate(ctx: ActionContext) -> str | None:
    slurm = ctx.facts.get("slurm_node")
    if slurm is None or slurm.drained or slurm.down:
        return None
    return f"node is {slurm.state} in Slurm; drain it first (slurm_drain with wait: true)"


def wanted_modules(ctx: ActionContext, modules: KernelModulesFacts) -> list[str]:
    """Modules the node should have after the reload, dependencies first: the `modules` param,
    else what was loaded before (at least the base set)."""
    explicit = ctx.params.get("modules")
    if explicit:
        names = [explicit] if isinstance(explicit, str) else [str(m) for m in explicit]
    else:
        names = list(reversed(modules.unload_order)) if modules.nvidia_loaded else []
    names = union(names, remembered(ctx, "modules"))
    ordered = [m for m in BASE_MODULES if m in names or not names or m == "nvidia"]
    return [*ordered, *(m for m in names if m not in ordered)]


def _services_after(services: ServicesFacts | None, stopped: Iterable[str]) -> list[str]:
    """What must run after the reload: what we stopped, plus installed units the driver needs."""
    wanted = list(stopped)
    if services is not None:
        for unit in NEEDED_AFTER_LOAD:
            installed = unit in services.units and unit not in services.not_found
            if installed and unit not in wanted:
                wanted.append(unit)
    return wanted


def _plan(ctx: ActionContext) -> ActionPlan:
    modules: KernelModulesFacts = ctx.facts["kernel_modules"]
    services: ServicesFacts | None = ctx.facts.get("services")
    refusal = busy_reason(ctx) or _drained_gate(ctx)
    if refusal is not None:
        return ActionPlan(refused=refusal)
    stopped = [u for u in DRIVER_HOLDERS if services is not None and u in services.active]
    restore = union(stopped, remembered(ctx, "services"))
    stops = [PlannedCommand(f"systemctl stop {quote_all([u])}", f"stop {u}") for u in stopped]
    unloads = [
        PlannedCommand(f"rmmod {quote_all([m])}", f"unload {m}")
        for m in (modules.unload_order if modules.nvidia_loaded else ())
    ]
    loads = [
        PlannedCommand(f"modprobe {quote_all([m])}", f"load {m}", always=True)
        for m in wanted_modules(ctx, modules)
    ]
    starts = [
        PlannedCommand(f"systemctl start {quote_all([u])}", f"start {u}", always=True)
        for u in _services_after(services, restore)
    ]
    note = () if modules.nvidia_loaded else ("modules were not loaded",)
    loaded = modules.unload_order if modules.nvidia_loaded else ()
    before = {
        "services": ",".join(restore),
        "modules": ",".join(union(loaded, remembered(ctx, "modules"))),
    }
    return ActionPlan(commands=(*stops, *unloads, *loads, *starts), notes=note, before=before)


def _check(ctx: ActionContext) -> str | None:
    modules: KernelModulesFacts | None = ctx.facts.get("kernel_modules")
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    services: ServicesFacts | None = ctx.facts.get("services")
    if modules is None or not modules.nvidia_loaded:
        return "nvidia module not loaded after reload"
    promised = [c for c in (ctx.plan.commands if ctx.plan else ()) if c.always]
    wanted = [
        c.command.split()[-1].strip("'") for c in promised if c.command.startswith("modprobe ")
    ]
    missing = [m for m in union(wanted, remembered(ctx, "modules")) if m not in modules.loaded]
    if missing:
        return f"modules not loaded after reload: {', '.join(missing)}"
    started = [c.command.split()[-1].strip("'") for c in promised if "systemctl start" in c.command]
    down = union(started, remembered(ctx, "services"))
    down = [u for u in down if services is None or u not in services.active]
    if down:
        return f"services not running after reload: {', '.join(down)}"
    return _gpus_back(ctx, smi)


def _gpus_back(ctx: ActionContext, smi: NvidiaSmiFacts | None) -> str | None:
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
        params={
            "allow_busy": "reload even with GPU processes or Slurm jobs (kills them)",
            "modules": "modules the node should have (default: what was loaded, at least the base)",
        },
        requires=("gpu_processes", "kernel_modules", "services"),
        optional=("slurm_node",),
        verify=("kernel_modules", "nvidia_smi", "services"),
        check=_check,
        disruptive=True,
        repeatable=True,
    ),
)
