"""GPU actions: persistence mode, ECC counter resets, GPU resets, IMEX domain recovery."""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from fleetfix.actions.base import (
    Action,
    ActionContext,
    ActionPlan,
    PlannedCommand,
    remembered,
    union,
)
from fleetfix.actions.fabric import (
    AMPERE_AND_LATER,
    DEFAULT_FABRIC_WAIT,
    FABRIC_MANAGER,
    IMEX,
    board_of,
    fabric_problems,
    fabric_wait,
    gpu_list,
    reset_rule,
    start_unit,
    unit_state,
)
from fleetfix.actions.gates import (
    busy_reason,
    choice,
    duration,
    params_checker,
    quote_all,
    seconds,
)
from fleetfix.actions.holders import Holders, device_holders
from fleetfix.knowledge import remedy
from fleetfix.probes.base import to_data
from fleetfix.probes.gpu_facts import GpuKey, NvidiaSmiFacts
from fleetfix.probes.services import MPS_CONTROL, ServicesFacts

PERSISTENCED = "nvidia-persistenced"
GPU_CLIENTS = ("dcgm-exporter", "nvsm", "nvidia-dcgm", "dcgm", MPS_CONTROL)
"""The known clients that keep the GPUs open without being a job: monitoring (dcgm-exporter
and nvsm before the DCGM they talk to) and the CUDA MPS control daemon. A reset is "In use by
another client" and `rmmod nvidia` "in use" while they run, so both stop them and start them
again afterwards, with every other unit found holding /dev/nvidia* (holders.device_holders;
found units stop first: a site's exporter is a client of what it watches).
nvidia-persistenced and nvidia-fabricmanager are not here: a reset leaves them running
(Fabric Manager guide), a driver reload stops them separately."""
RESET_KEEPS = (FABRIC_MANAGER, IMEX, PERSISTENCED)
"""Holders a reset leaves running (Fabric Manager guide: FM is never stopped for a reset,
"You can leave the nvidia-persistenced service running"); the persistence daemon is stopped
where the board's rule says so (before Ampere)."""
RESET_NEEDS = "a GPU reset needs no other client on the GPUs (nvidia-smi manual, -r)"


def _indexes(keys: Iterable[GpuKey]) -> list[int]:
    """GPU indexes, each once (a GPU can be flagged for a reset and a pending remap at once)."""
    return sorted({k for k in keys if isinstance(k, int)})


def _gpu_flag(indexes: list[int]) -> str:
    return f"-i {gpu_list(indexes)}"


def stop_command(unit: str) -> str:
    """How to stop one holder: MPS's control daemon by its own `quit`, units with systemctl."""
    if unit == MPS_CONTROL:
        return f"echo quit | {MPS_CONTROL}"
    return f"systemctl stop {quote_all([unit])}"


def start_command(unit: str) -> str:
    if unit == MPS_CONTROL:
        return f"{MPS_CONTROL} -d"
    return f"systemctl start {quote_all([unit])}"


def stop_start(
    services: ServicesFacts | None,
    units: Iterable[str],
    stopped_before: Iterable[str] = (),
    holding: Iterable[str] = (),
) -> tuple[list[PlannedCommand], list[PlannedCommand], list[str]]:
    """Commands to stop the running `units` and (always) start them again afterwards, in the
    reverse order, with the units to restore: those, plus `stopped_before` (stopped by an
    interrupted attempt). Running: `services` shows it active, or it is in `holding` (units
    whose processes hold the devices, which the services probe may not know)."""
    running = set(holding)
    active = [u for u in units if u in running or (services is not None and u in services.active)]
    restore = union(active, stopped_before)
    stops = [PlannedCommand(stop_command(u), f"stop {u}") for u in active]
    starts = [
        PlannedCommand(start_command(u), f"restart {u}", always=True) for u in reversed(restore)
    ]
    return stops, starts, restore


def not_running(ctx: ActionContext, units: Iterable[str]) -> list[str]:
    """Of `units`, those the fresh `services` facts do not show active. A unit the services
    probe does not list (one found holding the devices) is judged by its start command's exit
    status, which fails the step if systemd could not start it."""
    services: ServicesFacts | None = ctx.facts.get("services")
    if services is None:
        return list(units)
    return [u for u in units if u in services.units and u not in services.active]


def holder_units(found: Holders, known: Iterable[str], services: ServicesFacts | None) -> list[str]:
    """The units to stop, in stop order: those found holding the devices that the known list
    does not name (clients of what it names), then the known ones that run (active, or found
    holding), less those a found unit stands in for."""
    listed = [u for u in known if u not in found.replaced]
    running = [
        u for u in listed if u in found.units or (services is not None and u in services.active)
    ]
    return [*(u for u in found.units if u not in listed), *running]


def fabric_timeout(ctx: ActionContext) -> float:
    return seconds(ctx.params.get("fabric_wait"), DEFAULT_FABRIC_WAIT)


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
    need = remedy.decide(to_data(smi))
    if need.remedy is not remedy.Remedy.NONE:
        found.append(f"what the GPUs still need ({need.remedy.word}: {'; '.join(need.why)})")
    if found:
        return ActionPlan(refused="resetting counters would hide " + "; ".join(found))
    kind, flag_value = _counter_kind(ctx)
    if kind == "aggregate":
        newer = [g.index for g in smi.gpus if not _pre_ampere(g.architecture)]
        if newer:
            return ActionPlan(
                refused=f"aggregate ECC counters cannot be reset on GPUs {newer}: only before"
                " Ampere (from Ampere on, nvidia-smi -p 1 is not supported; NVIDIA keeps the"
                " lifetime record for RMA decisions)"
            )
    targets = _with_errors(smi, kind)
    if not targets:
        return ActionPlan(notes=(f"no {kind} ECC errors to reset",))
    command = f"nvidia-smi {_gpu_flag(targets)} -p {flag_value}"
    return ActionPlan(commands=(PlannedCommand(command, f"reset {kind} ECC counters"),))


def _pre_ampere(architecture: str | None) -> bool:
    """Known to be older than Ampere; an unknown architecture is not (fail closed)."""
    arch = (architecture or "").strip().lower()
    return bool(arch) and arch not in AMPERE_AND_LATER


def _check_reset_ecc(ctx: ActionContext) -> str | None:
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if smi is None:
        return "nvidia_smi gave no facts"
    kind, _ = _counter_kind(ctx)
    left = _with_errors(smi, kind)
    return f"{kind} ECC counters still non-zero on GPUs {left}" if left else None


# --- gpu_reset ---------------------------------------------------------------------------


def _reset_targets(ctx: ActionContext, smi: NvidiaSmiFacts) -> list[int]:
    """The `gpus` param (indexes or 'all'), else the GPUs whose need is a reset by fleetfix's
    one rule set (knowledge/remedy.py: the driver's recovery action, Reset Required, pending
    remaps or retirements, volatile DBEs, a fabric not registered, Fabric Manager stopped on an
    NVSwitch board)."""
    wanted = ctx.params.get("gpus")
    if wanted == "all":
        return sorted(g.index for g in smi.gpus if g.index is not None)
    if wanted is not None:
        return sorted({int(i) for i in (wanted if isinstance(wanted, list) else [wanted])})
    return _needing_reset(smi, ctx.facts.get("services"))


def _needing_reset(smi: NvidiaSmiFacts, services: ServicesFacts | None) -> list[int]:
    units = None if services is None else to_data(services)
    verdict = remedy.decide(to_data(smi), services=units)
    return _indexes((*verdict.reset_gpus, *smi.reset_required_gpus, *smi.row_remap_pending_gpus))


def _plan_gpu_reset(ctx: ActionContext) -> ActionPlan:
    smi: NvidiaSmiFacts = ctx.facts["nvidia_smi"]
    found = device_holders(ctx, RESET_NEEDS, RESET_KEEPS)
    if found.refused is not None:
        return ActionPlan(refused=found.refused)
    busy = busy_reason(ctx, found.service_pids)
    if busy is not None:
        return ActionPlan(refused=f"{busy}; a GPU reset would kill them")
    targets = _reset_targets(ctx, smi)
    if not targets:
        return ActionPlan(notes=("no GPU reports a reset as needed",))
    services: ServicesFacts | None = ctx.facts.get("services")
    board = board_of(smi, services)
    rule = reset_rule(board, targets)
    if rule.refused is not None:
        return ActionPlan(refused=rule.refused)
    known = [*GPU_CLIENTS, *([PERSISTENCED] if rule.stop_persistenced else [])]
    holders = holder_units(found, known, services)
    stops, starts, restore = stop_start(
        services, holders, remembered(ctx, "services"), holding=found.units
    )
    reset = PlannedCommand(f"nvidia-smi -r {_gpu_flag(list(rule.gpus))}", f"reset GPUs {rule.gpus}")
    commands = [*stops]
    if rule.start_fabric_manager_first:
        commands.append(start_unit(FABRIC_MANAGER, "Ampere NVSwitch: a reset needs FM running"))
    commands.append(reset)
    if rule.start_fabric_manager_after:
        commands.append(start_unit(FABRIC_MANAGER, "start FM: the GPUs register with it"))
    commands.extend(starts)
    if rule.wait_for_fabric:
        commands.append(fabric_wait(fabric_timeout(ctx)))
    notes = [f"GPUs {targets}", f"{board.words}: {rule.why}"]
    if list(rule.gpus) != targets:
        notes.append(f"resetting GPUs {list(rule.gpus)} together (NVLink peers of {targets})")
    return ActionPlan(
        commands=tuple(commands), notes=tuple(notes), before={"services": ",".join(restore)}
    )


def _check_gpu_reset(ctx: ActionContext) -> str | None:
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if smi is None:
        return "nvidia_smi gave no facts"
    problems = []
    if smi.count_ok is False:
        problems.append(f"{smi.gpu_count} GPUs visible, expected {smi.expected_gpus}")
    fabric = fabric_problems(smi)
    if fabric:
        problems.append(f"NVLink fabric not registered after the reset: {', '.join(fabric)}")
    still = _needing_reset(smi, ctx.facts.get("services"))
    if still:
        problems.append(f"GPUs {still} still need a reset")
    down = not_running(ctx, remembered(ctx, "services"))
    if down:
        problems.append(f"services stopped for the reset not running: {', '.join(down)}")
    if unit_state(ctx.facts.get("services"), FABRIC_MANAGER) == "stopped":
        problems.append(f"{FABRIC_MANAGER} is not running: the NVSwitch fabric is down")
    return "; ".join(problems) or None


# --- imex_restart --------------------------------------------------------------------------


def _plan_imex_restart(ctx: ActionContext) -> ActionPlan:
    """GB200's "Recover IMEX Domain": the driver asks for the node's IMEX daemon to be
    restarted, not for a GPU reset (NVML's GPU recovery actions)."""
    smi: NvidiaSmiFacts = ctx.facts["nvidia_smi"]
    services: ServicesFacts | None = ctx.facts.get("services")
    asking = _imex_asking(smi)
    if not asking and not ctx.params.get("force"):
        return ActionPlan(notes=("no GPU asks for its IMEX domain to be recovered",))
    if unit_state(services, IMEX) == "absent":
        return ActionPlan(refused=f"GPUs {asking} ask to recover the IMEX domain: no {IMEX} here")
    busy = busy_reason(ctx)
    if busy is not None:
        return ActionPlan(refused=f"{busy}; restarting IMEX would break their imports")
    restart = PlannedCommand(f"systemctl restart {shlex.quote(IMEX)}", "recover the IMEX domain")
    commands = [restart, fabric_wait(fabric_timeout(ctx))]
    return ActionPlan(commands=tuple(commands), notes=(f"GPUs {asking} ask for it",))


def _imex_asking(smi: NvidiaSmiFacts) -> list[GpuKey]:
    return [g.key for g in smi.gpus if g.recovery_action == "recover_imex_domain"]


def _check_imex_restart(ctx: ActionContext) -> str | None:
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if smi is None:
        return "nvidia_smi gave no facts"
    problems = []
    asking = _imex_asking(smi)
    if asking:
        problems.append(f"GPUs {asking} still ask to recover the IMEX domain")
    fabric = fabric_problems(smi)
    if fabric:
        problems.append(f"NVLink fabric not registered: {', '.join(fabric)}")
    if unit_state(ctx.facts.get("services"), IMEX) != "running":
        problems.append(f"{IMEX} is not running")
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
        validate=params_checker({"fabric_wait": duration}),
        summary="nvidia-smi -r on GPUs that need it, by the board's Fabric Manager rules; "
        "monitoring services stopped and restored, Fabric Manager never stopped",
        plan=_plan_gpu_reset,
        params={
            "gpus": "GPU indexes or 'all' (default: those whose need is a reset)",
            "allow_busy": "reset even with GPU processes or Slurm jobs (kills them)",
            "fabric_wait": "how long to wait for the GPUs to register with the NVLink fabric "
            "(default 2m; NVSwitch and NVLink-domain boards)",
        },
        requires=("nvidia_smi", "gpu_processes", "device_holders", "services"),
        optional=("slurm_node",),
        verify=("nvidia_smi", "services"),
        repeatable=True,
        check=_check_gpu_reset,
        disruptive=True,
    ),
    Action(
        name="imex_restart",
        validate=params_checker({"fabric_wait": duration}),
        summary="restart nvidia-imex where a GPU asks to recover its IMEX domain (GB200)",
        plan=_plan_imex_restart,
        params={
            "force": "restart even if no GPU asks for it",
            "allow_busy": "restart even with GPU processes or Slurm jobs",
            "fabric_wait": "how long to wait for the fabric afterwards (default 2m)",
        },
        requires=("nvidia_smi", "gpu_processes", "services"),
        optional=("slurm_node",),
        verify=("nvidia_smi", "services"),
        repeatable=True,
        check=_check_imex_restart,
        disruptive=True,
    ),
)
