"""reload_driver: unload and reload the NVIDIA kernel modules on a drained, idle node.

Everything that holds the driver stops first (monitoring, MPS, IMEX, Fabric Manager, the
persistence daemon), then every module that uses `nvidia` goes, third-party ones included
(GDRCopy's gdrdrv, GPUDirect Storage's nvidia_fs: whatever lsmod's "Used by" names), users
before what they use. The modules and services come back in the reverse order, Fabric Manager
wherever it is installed, and on boards whose GPUs register with an NVLink fabric the action
waits for them before it verifies. What the node had is journaled in the plan's `before`, so
a resumed run restores it even after a crash in the middle (docs/gpu-procedures.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetfix.actions.base import (
    Action,
    ActionContext,
    ActionPlan,
    PlannedCommand,
    planned_before,
    remembered,
    union,
)
from fleetfix.actions.fabric import FABRIC_MANAGER, IMEX, fabric_problems, fabric_wait, unit_state
from fleetfix.actions.gates import busy_reason, duration, params_checker, quote_all
from fleetfix.actions.gpu import (
    GPU_CLIENTS,
    PERSISTENCED,
    fabric_timeout,
    holder_units,
    not_running,
    start_command,
    stop_command,
)
from fleetfix.actions.holders import device_holders
from fleetfix.probes.gpu_facts import NvidiaSmiFacts
from fleetfix.probes.kernel_modules import NVIDIA_MODULES, KernelModulesFacts
from fleetfix.probes.services import ServicesFacts

DRIVER_HOLDERS = (*GPU_CLIENTS, IMEX, FABRIC_MANAGER, PERSISTENCED)
"""The known services holding /dev/nvidia* that make `rmmod nvidia` fail with "Module nvidia
is in use", in the order they stop (clients before what they use); they start in the reverse
order. Units found holding the devices (holders.device_holders) stop before them and start
after them."""
RELOAD_NEEDS = (
    'a driver reload needs no process holding /dev/nvidia* (rmmod: "Module nvidia is in use")'
)

NEEDED_AFTER_LOAD = (PERSISTENCED, FABRIC_MANAGER)
"""Installed units a working driver needs running: without the fabric manager an NVSwitch
system's GPUs stay unusable, without persistence the next job pays the init."""

BASE_MODULES = ("nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm")
"""Loaded back when nothing was loaded before; `modules:` (e.g. adding nvidia_peermem for
GPUDirect RDMA) says what a node should have."""
PEER_MEMORY = ("nvidia_peermem", "nv_peer_mem")
"""GPUDirect RDMA's peer-memory client: the driver's own nvidia_peermem, or the legacy
nv_peer_mem it replaces. "Only one module can be loaded at any time" (NVIDIA driver README,
"GPUDirect RDMA Peer Memory Client"): the one the node had comes back, never both."""


def _drained_gate(ctx: ActionContext) -> str | None:
    slurm = ctx.facts.get("slurm_node")
    if slurm is None or slurm.drained or slurm.down:
        return None
    return f"node is {slurm.state} in Slurm; drain it first (slurm_drain with wait: true)"


def wanted_modules(ctx: ActionContext, modules: KernelModulesFacts) -> list[str]:
    """Modules the node should have after the reload, dependencies first: the `modules` param
    (or, without it, at least the base set) and every module loaded before, so a third-party
    user of `nvidia` (gdrdrv, nvidia_fs) the reload unloads is loaded back even when a playbook
    names only the NVIDIA modules. Of the peer-memory modules, the one the node had replaces
    any other the param names; none comes back that neither the node nor the param had."""
    explicit = ctx.params.get("modules")
    names = [explicit] if isinstance(explicit, str) else [str(m) for m in explicit or ()]
    before = list(reversed(modules.unload_order)) if modules.nvidia_loaded else []
    had = union(before, remembered(ctx, "modules"))
    peers = [m for m in PEER_MEMORY if m in had]
    names = [m for m in union(names, had) if m not in PEER_MEMORY or not peers or m in peers]
    ordered = [m for m in BASE_MODULES if m in names or not names or m == "nvidia"]
    return [*ordered, *(m for m in names if m not in ordered)]


def _peer_memory_notes(ctx: ActionContext, wanted: Iterable[str]) -> list[str]:
    """Says so when the node's peer-memory module is not the one the `modules` param named."""
    explicit = ctx.params.get("modules")
    asked = [explicit] if isinstance(explicit, str) else [str(m) for m in explicit or ()]
    dropped = [m for m in PEER_MEMORY if m in asked and m not in wanted]
    kept = [m for m in PEER_MEMORY if m in wanted]
    if not dropped or not kept:
        return []
    return [f"{kept[0]} comes back, not {dropped[0]}: the node uses {kept[0]} (one at a time)"]


def _services_after(services: ServicesFacts | None, stopped: Iterable[str]) -> list[str]:
    """What must run after the reload, in start order: what was stopped, plus installed units
    the driver needs; persistence first, monitoring last (DRIVER_HOLDERS reversed), units
    found holding the devices after every known one (they are its clients)."""
    needed = [u for u in NEEDED_AFTER_LOAD if unit_state(services, u) != "absent"]
    order = DRIVER_HOLDERS[::-1]
    wanted = union(stopped, needed)
    return sorted(wanted, key=lambda u: order.index(u) if u in order else len(order))


def _fabric_possible(services: ServicesFacts | None) -> bool:
    """Fabric Manager or IMEX installed: the GPUs may register with an NVLink fabric after the
    driver loads (the wait accepts N/A at once on boards whose GPUs do not register)."""
    return any(unit_state(services, unit) != "absent" for unit in (FABRIC_MANAGER, IMEX))


def _plan(ctx: ActionContext) -> ActionPlan:
    modules: KernelModulesFacts = ctx.facts["kernel_modules"]
    services: ServicesFacts | None = ctx.facts.get("services")
    found = device_holders(ctx, RELOAD_NEEDS, ())
    refusal = found.refused or busy_reason(ctx, found.service_pids) or _drained_gate(ctx)
    if refusal is None and modules.nvidia_loaded and modules.unload_supported is False:
        refusal = (
            "this kernel cannot unload modules (/proc/modules shows '-' for every module's"
            " users: built without CONFIG_MODULE_UNLOAD), so the driver cannot be reloaded in"
            " place; reboot the node instead"
        )
    if refusal is not None:
        return ActionPlan(refused=refusal)
    stopped = holder_units(found, DRIVER_HOLDERS, services)
    restore = union(stopped, remembered(ctx, "services"))
    loaded = modules.unload_order if modules.nvidia_loaded else ()
    wanted = wanted_modules(ctx, modules)
    peers = [m for m in PEER_MEMORY if m in wanted]
    if len(peers) > 1:
        return ActionPlan(
            refused=f"{' and '.join(peers)} would both be loaded: only one peer-memory module"
            " can be loaded at a time (NVIDIA driver README, GPUDirect RDMA Peer Memory Client);"
            " name the one this node uses in `modules`"
        )
    stops = [PlannedCommand(stop_command(u), f"stop {u}") for u in stopped]
    unloads = [PlannedCommand(f"rmmod {quote_all([m])}", f"unload {m}") for m in loaded]
    loads = [PlannedCommand(f"modprobe {quote_all([m])}", f"load {m}", always=True) for m in wanted]
    starts = [
        PlannedCommand(start_command(u), f"start {u}", always=True)
        for u in _services_after(services, restore)
    ]
    waits = [fabric_wait(fabric_timeout(ctx))] if _fabric_possible(services) else []
    before = {
        "services": ",".join(restore),
        "modules": ",".join(union(loaded, remembered(ctx, "modules"))),
    }
    return ActionPlan(
        commands=(*stops, *unloads, *loads, *starts, *waits),
        notes=(*_notes(modules, loaded), *_peer_memory_notes(ctx, wanted)),
        before=before,
    )


def _notes(modules: KernelModulesFacts, loaded: Iterable[str]) -> tuple[str, ...]:
    if not modules.nvidia_loaded:
        return ("modules were not loaded",)
    others = [m for m in loaded if m not in NVIDIA_MODULES]
    if others:
        return (f"other modules that use nvidia go and come back too: {', '.join(others)}",)
    return ()


def _promised(ctx: ActionContext) -> tuple[list[str], list[str]]:
    """The modules and services the plan promised to bring back (its `always` commands)."""
    promised = [c for c in (ctx.plan.commands if ctx.plan else ()) if c.always]
    modules = [
        c.command.split()[-1].strip("'") for c in promised if c.command.startswith("modprobe ")
    ]
    units = [c.why.removeprefix("start ") for c in promised if c.why.startswith("start ")]
    return modules, units


def _check(ctx: ActionContext) -> str | None:
    modules: KernelModulesFacts | None = ctx.facts.get("kernel_modules")
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if modules is None or not modules.nvidia_loaded:
        return "nvidia module not loaded after reload"
    wanted, started = _promised(ctx)
    had = planned_before(ctx, "modules")
    missing = [m for m in union(wanted, had, remembered(ctx, "modules")) if m not in modules.loaded]
    if missing:
        return f"modules not loaded after reload: {', '.join(missing)}"
    down = not_running(ctx, union(started, remembered(ctx, "services")))
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
    fabric = fabric_problems(smi)
    if fabric:
        return f"NVLink fabric not registered after reload: {', '.join(fabric)}"
    return None


ACTIONS = (
    Action(
        name="reload_driver",
        validate=params_checker({"fabric_wait": duration}),
        summary="stop driver holders, unload NVIDIA modules (and their third-party users) in "
        "dependency order, reload, restore, wait for the NVLink fabric",
        plan=_plan,
        params={
            "allow_busy": "reload even with GPU processes or Slurm jobs (kills them)",
            "modules": "modules the node should have (default: what was loaded, at least the base)",
            "fabric_wait": "how long to wait for the GPUs to register with the NVLink fabric "
            "(default 2m; where Fabric Manager or IMEX is installed)",
        },
        requires=("gpu_processes", "device_holders", "kernel_modules", "services"),
        optional=("slurm_node",),
        verify=("kernel_modules", "nvidia_smi", "services"),
        check=_check,
        disruptive=True,
        repeatable=True,
    ),
)
