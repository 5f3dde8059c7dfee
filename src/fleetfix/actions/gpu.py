"""GPU actions: persistence mode, ECC counter resets, GPU resets."""

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
from fleetfix.actions.gates import busy_reason, choice, params_checker, quote_all
from fleetfix.probes.gpu_facts import GpuKey, NvidiaSmiFacts
from fleetfix.probes.services import ServicesFacts

PERSISTENCED = "nvidia-persistenced"
RESET_HOLDERS = ("nvidia-persistenced", "nvidia-dcgm", "dcgm", "nvidia-fabricmanager")
"""Services that keep a handle on the GPUs and make `nvidia-smi -r` fail while they run."""


def _indexes(keys: Iterable[GpuKey]) -> list[int]:
    """GPU indexes, each once (a GPU can be flagged for a reset and a pending remap at once)."""
    return sorted({k for k in keys if isinstance(k, int)})


def _gpu_flag(indexes: list[int]) -> str:
    return f"-i {','.join(str(i) for i in indexes)}"


def stop_start(
    services: ServicesFacts | None, units: Iterable[str], stopped_before: Iterable[str] = ()
) -> tuple[list[PlannedCommand], list[PlannedCommand], list[str]]:
    """Commands to stop the active `units` and (always) start them again afterwards, with
    the units to restore: those, plus `stopped_before` (stopped by an interrupted attempt)."""
    active = [u for u in units if services is not None and u in services.active]
    restore = union(active, stopped_before)
    stops = [PlannedCommand(f"systemctl stop {quote_all([u])}", f"stop {u}") for u in active]
    starts = [
        PlannedCommand(f"systemctl start {quote_all([u])}", f"restart {u}", always=True)
        for u in reversed(restore)
    ]
    return stops, starts, restore


def not_running(ctx: ActionContext, units: Iterable[str]) -> list[str]:
    """Of `units`, those the fresh `services` facts do not show active."""
    services: ServicesFacts | None = ctx.facts.get("services")
    return [u for u in units if services is None or u not in services.active]


# --- persistence_mode --------------------------------------------------------------------


def _plan_persistence(ctx: ActionContext) -> ActionPlan:
    smi: NvidiaSmiFacts = ctx.facts["nvidia_smi"]
    services: ServicesFacts = ctx.facts["services"]
    off = smi.persistence_off_gpus
    if not off:
        return ActionPlan(notes=("persistence mode already on for every GPU",))
    daemon_known = PERSISTENCED in services.units and PERSISTENCED not in services.not_found
    if daemon_known and PERSISTENCED not in services.active:
        command = f"systemctl enable --now {PERSISTENCED}"
        why = "start the persistence daemon (preferred over nvidia-smi -pm 1)"
    else:
        command = "nvidia-smi -pm 1"
        why = "enable legacy persistence mode (no persistence daemon to start)"
    return ActionPlan(commands=(PlannedCommand(command, why),), notes=(f"off on GPUs {off}",))


def _check_persistence(ctx: ActionContext) -> str | None:
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if smi is None:
        return "nvidia_smi gave no facts"
    return (
        f"persistence still off on GPUs {smi.persistence_off_gpus}"
        if smi.persistence_off_gpus
        else None
    )


# --- reset_ecc ---------------------------------------------------------------------------


def _counter_kind(ctx: ActionContext) -> tuple[str, int]:
    kind = str(ctx.params.get("counters", "volatile"))
    if kind not in ("volatile", "aggregate"):
        raise ValueError("counters must be 'volatile' or 'aggregate'")
    return kind, 0 if kind == "volatile" else 1


def _with_errors(smi: NvidiaSmiFacts, kind: str) -> list[int]:
    def counted(gpu_counters: object) -> bool:
        values = (getattr(gpu_counters, name, None) for name in ("sbe", "dbe"))
        return any(v for v in values if v)

    return sorted(
        g.index for g in smi.gpus if g.index is not None and counted(getattr(g.ecc, kind))
    )


def _plan_reset_ecc(ctx: ActionContext) -> ActionPlan:
    smi: NvidiaSmiFacts = ctx.facts["nvidia_smi"]
    hiding = {
        "row remap failure (RMA)": smi.row_remap_failure_gpus,
        "pending row remap (needs gpu_reset)": smi.row_remap_pending_gpus,
        "pending page retirement (needs gpu_reset)": smi.retired_pages_pending_gpus,
    }
    found = [f"{what} on GPUs {gpus}" for what, gpus in hiding.items() if gpus]
    if found:
        return ActionPlan(refused="resetting counters would hide " + "; ".join(found))
    kind, flag_value = _counter_kind(ctx)
    targets = _with_errors(smi, kind)
    if not targets:
        return ActionPlan(notes=(f"no {kind} ECC errors to reset",))
    command = f"nvidia-smi {_gpu_flag(targets)} -p {flag_value}"
    return ActionPlan(commands=(PlannedCommand(command, f"reset {kind} ECC counters"),))


def _check_reset_ecc(ctx: ActionContext) -> str | None:
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if smi is None:
        return "nvidia_smi gave no facts"
    kind, _ = _counter_kind(ctx)
    left = _with_errors(smi, kind)
    return f"{kind} ECC counters still non-zero on GPUs {left}" if left else None


# --- gpu_reset ---------------------------------------------------------------------------


def _reset_targets(ctx: ActionContext, smi: NvidiaSmiFacts) -> list[int]:
    wanted = ctx.params.get("gpus")
    if wanted == "all":
        return sorted(g.index for g in smi.gpus if g.index is not None)
    if wanted is not None:
        return sorted({int(i) for i in (wanted if isinstance(wanted, list) else [wanted])})
    return _indexes((*smi.reset_required_gpus, *smi.row_remap_pending_gpus))


def _plan_gpu_reset(ctx: ActionContext) -> ActionPlan:
    smi: NvidiaSmiFacts = ctx.facts["nvidia_smi"]
    busy = busy_reason(ctx)
    if busy is not None:
        return ActionPlan(refused=f"{busy}; a GPU reset would kill them")
    targets = _reset_targets(ctx, smi)
    if not targets:
        return ActionPlan(notes=("no GPU reports a reset as needed",))
    services = ctx.facts.get("services")
    stops, starts, restore = stop_start(services, RESET_HOLDERS, remembered(ctx, "services"))
    reset = PlannedCommand(f"nvidia-smi -r {_gpu_flag(targets)}", f"reset GPUs {targets}")
    return ActionPlan(
        commands=(*stops, reset, *starts),
        notes=(f"GPUs {targets}",),
        before={"services": ",".join(restore)},
    )


def _check_gpu_reset(ctx: ActionContext) -> str | None:
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if smi is None:
        return "nvidia_smi gave no facts"
    problems = []
    if smi.count_ok is False:
        problems.append(f"{smi.gpu_count} GPUs visible, expected {smi.expected_gpus}")
    still = _indexes((*smi.reset_required_gpus, *smi.row_remap_pending_gpus))
    if still:
        problems.append(f"GPUs {still} still need a reset")
    down = not_running(ctx, remembered(ctx, "services"))
    if down:
        problems.append(f"services stopped for the reset not running: {', '.join(down)}")
    return "; ".join(problems) or None


ACTIONS = (
    Action(
        name="persistence_mode",
        repeatable=True,
        summary="turn persistence on: start nvidia-persistenced, else nvidia-smi -pm 1",
        plan=_plan_persistence,
        requires=("nvidia_smi", "services"),
        verify=("nvidia_smi",),
        check=_check_persistence,
    ),
    Action(
        name="reset_ecc",
        validate=params_checker({"counters": choice("volatile", "aggregate")}),
        summary="reset volatile or aggregate ECC counters; refuses to hide remap/retirement",
        plan=_plan_reset_ecc,
        params={"counters": "volatile (default, -p 0) or aggregate (-p 1)"},
        requires=("nvidia_smi",),
        verify=("nvidia_smi",),
        check=_check_reset_ecc,
        repeatable=True,
    ),
    Action(
        name="gpu_reset",
        summary="nvidia-smi -r on GPUs that need it; holder services stopped and restored",
        plan=_plan_gpu_reset,
        params={
            "gpus": "GPU indexes or 'all' (default: those reporting a reset as needed)",
            "allow_busy": "reset even with GPU processes or Slurm jobs (kills them)",
        },
        requires=("nvidia_smi", "gpu_processes", "services"),
        optional=("slurm_node",),
        verify=("nvidia_smi", "services"),
        repeatable=True,
        check=_check_gpu_reset,
        disruptive=True,
    ),
)
