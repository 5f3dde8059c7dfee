"""What holds a node's GPU device files, sorted for NVIDIA's GPU reset and driver reload.

`gpu_processes` lists every process holding /dev/nvidia* (fuser), `device_holders` says each
one's systemd unit or Slurm job (its control group). A job is the busy gate's (actions/gates.py);
a unit is stopped first and started again afterwards; anything else refuses the action, naming
it: NVIDIA's reset and reload need no other client on the devices (docs/gpu-procedures.md).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fleetfix.actions.base import ActionContext
from fleetfix.probes.device_holders import DeviceHolder, DeviceHoldersFacts
from fleetfix.probes.gpu_processes import GpuProcessesFacts
from fleetfix.probes.services import MPS_CONTROL, ServicesFacts

DAEMON_UNITS: Mapping[str, str] = MappingProxyType(
    {
        "nvidia-persistenced": "nvidia-persistenced",
        "nv-hostengine": "nvidia-dcgm",
        "nv-fabricmanager": "nvidia-fabricmanager",
        "nvidia-fabricmanager": "nvidia-fabricmanager",
        "nvidia-imex": "nvidia-imex",
        "dcgm-exporter": "dcgm-exporter",
        "nvsm": "nvsm",
        "nvidia-cuda-mps-control": MPS_CONTROL,
        "nvidia-cuda-mps-server": MPS_CONTROL,
    }
)
"""The known list: the unit of each NVIDIA daemon by process name, for a holder whose own
control group could not be read (fuser and /proc name at most 15 characters of it)."""
NEVER_STOPPED = (
    "slurmd",
    "slurmctld",
    "sshd",
    "ssh",
    "dbus",
    "dbus-broker",
    "containerd",
    "docker",
    "crio",
    "kubelet",
    "systemd-*",
    "user@*",
    "*getty@*",
)
"""Units fleetfix never stops to free the GPUs: Slurm, the way in, the container runtimes
(stopping one kills every container), systemd's own. A holder in one is refused."""


@dataclass(frozen=True, slots=True)
class Holders:
    """What holds the GPU device files, as a GPU reset or driver reload must treat it."""

    units: tuple[str, ...] = ()
    """Units whose processes hold the devices, found from the node, to stop first and start
    again afterwards (not the ones the caller keeps running), in the order fuser saw them."""
    replaced: tuple[str, ...] = ()
    """The MPS control daemon's pseudo-unit when a site's own unit runs MPS: that unit stops
    it, not `echo quit` (and starts it, not `nvidia-cuda-mps-control -d`); the caller leaves
    it out of its known list."""
    service_pids: tuple[int, ...] = ()
    """PIDs of services (stopped, or kept running): not jobs, whatever their name."""
    refused: str | None = None


def device_holders(ctx: ActionContext, need: str, kept: Collection[str]) -> Holders:
    """The holders of /dev/nvidia* (`gpu_processes` lists them, `device_holders` says each
    one's unit or job) sorted for NVIDIA's procedures, which need no other client on the
    devices (`need` says which procedure and where NVIDIA says so).

    A job is `busy_reason`'s business. A service is stopped and started again, or left running
    if its unit is in `kept` (a reset leaves Fabric Manager up); the known list (DAEMON_UNITS)
    names the unit of a daemon whose control group could not be read. Anything else refuses,
    naming PID, command and user: a process outside any service and any job (a login
    session's tool, a container), a unit fleetfix never stops, a daemon no running unit owns.
    A holder list that cannot be read refuses too. Without `gpu_processes` facts (an action
    planned without its gates, as in unit tests of the plans) there is nothing to sort."""
    processes: GpuProcessesFacts | None = ctx.facts.get("gpu_processes")
    found: DeviceHoldersFacts | None = ctx.facts.get("device_holders")
    if processes is None:
        return Holders()
    unreadable = _unreadable(processes, found)
    if unreadable is not None:
        return Holders(refused=f"cannot list what holds /dev/nvidia* ({unreadable}); {need}")
    services: ServicesFacts | None = ctx.facts.get("services")
    units: list[str] = []
    replaced: list[str] = []
    pids: list[int] = []
    blocking: list[str] = []
    for holder in _holders(processes, found):
        if holder.pid in processes.compute_pids or holder.job:
            continue
        known = _known_unit(holder.command, services)
        unit, problem = _unit_of(holder, known, services, kept)
        if unit is None:
            blocking.append(f"{_named(holder)}: {problem}")
            continue
        pids.append(holder.pid)
        if unit not in kept:
            units.append(unit)
        if known == MPS_CONTROL and unit != MPS_CONTROL:
            replaced.append(known)
    if blocking:
        return Holders(refused=_blocked(blocking, need))
    return Holders(tuple(dict.fromkeys(units)), tuple(dict.fromkeys(replaced)), tuple(pids))


def _unreadable(processes: GpuProcessesFacts, found: DeviceHoldersFacts | None) -> str | None:
    if processes.fuser_ok is not True:
        return "; ".join(e for e in processes.errors if "fuser" in e) or "fuser gave no answer"
    if found is not None and not found.complete:
        return "; ".join(found.errors) or "fuser gave no answer"
    return None


def _holders(processes: GpuProcessesFacts, found: DeviceHoldersFacts | None) -> list[DeviceHolder]:
    """Every holder once: fuser's table (name, user) with what /proc said of the same PID,
    trusted only for the same command (the PID may have been reused in between)."""
    read = {h.pid: h for h in found.holders} if found is not None else {}
    merged: dict[int, DeviceHolder] = {}
    for process in processes.processes:
        own = read.get(process.pid)
        if own is not None and not _same_command(own.command, process.name):
            own = None
        merged[process.pid] = DeviceHolder(
            pid=process.pid,
            user=(own.user if own else None) or process.user,
            command=process.name or (own.command if own else None),
            cgroup=own.cgroup if own else None,
            unit=own.unit if own else None,
            job=own.job if own else False,
        )
    for pid, holder in read.items():
        merged.setdefault(pid, holder)
    return [merged[pid] for pid in sorted(merged)]


def _same_command(first: str | None, second: str | None) -> bool:
    return first is None or second is None or first[:15] == second[:15]


def _unit_of(
    holder: DeviceHolder, known: str | None, services: ServicesFacts | None, kept: Collection[str]
) -> tuple[str | None, str]:
    """The unit that frees the devices when stopped (or that the caller keeps), else None and
    why not."""
    if holder.unit is not None:
        if any(fnmatch.fnmatchcase(holder.unit, pattern) for pattern in NEVER_STOPPED):
            return None, f"its unit {holder.unit} is one fleetfix never stops"
        return holder.unit, ""
    if known is None:
        return None, "neither a job nor a service"
    if known in kept or services is None or known in services.active:
        return known, ""
    state = services.units.get(known, "not reported")
    return None, f"an NVIDIA daemon whose unit {known} is {state} (started by hand?)"


def _known_unit(command: str | None, services: ServicesFacts | None) -> str | None:
    """The known list's unit for a daemon's process name (fuser shows 15 characters of it)."""
    if not command:
        return None
    if command.startswith("nvsm"):
        return "nvsm"
    unit = next((u for name, u in DAEMON_UNITS.items() if command[:15] == name[:15]), None)
    if unit == "nvidia-dcgm" and services is not None and services.dcgm_unit:
        return services.dcgm_unit
    return unit


def _named(holder: DeviceHolder) -> str:
    where = f", {holder.cgroup}" if holder.cgroup else ""
    command = holder.command or "(command unknown)"
    return f"pid {holder.pid} {command} (user {holder.user or 'unknown'}{where})"


def _blocked(blocking: list[str], need: str) -> str:
    more = f"; and {len(blocking) - 5} more" if len(blocking) > 5 else ""
    them = "it" if len(blocking) == 1 else "them"
    held = "; ".join(blocking[:5]) + more
    sentence = need[:1].upper() + need[1:]
    return f"the GPU devices are held by {held}. {sentence}: stop {them}, then run again"
