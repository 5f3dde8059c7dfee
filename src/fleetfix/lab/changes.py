"""Apply a mid-run change to a node's state: a job starts, a person drains it, Slurm goes dark.

Scenario events and `inject` control requests both end here. A change is applied the way it
happens on a real cluster: Slurm starts no job on a node that is drained, down, not up, still
completing a job, or held by a reservation the job did not ask for, and a person's drain is
recorded as that person's, with the time, like `scontrol update` does.
New GPU processes are returned with `pid` 0; the server starts their placeholder processes.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetfix.lab.scenario import (
    BecomeBusy,
    Drain,
    GpuProcessSpec,
    NodeChange,
    SetDrainReason,
    SlurmUnreadable,
)
from fleetfix.lab.slurm_state import SlurmJob
from fleetfix.lab.state import FleetState, GpuProcess, NodeState

BUSY_MEMORY_MIB = 61234


@dataclass(frozen=True, slots=True)
class ChangeResult:
    """What a change did: `applied` is False when the cluster would not let it happen."""

    applied: bool
    outcome: str
    new_processes: tuple[GpuProcess, ...] = ()


def apply_change(
    fleet: FleetState, node: NodeState, change: NodeChange, now: float
) -> ChangeResult:
    """Change `node` (and the Slurm controller's record of it)."""
    fleet.slurm.settle(now)
    record = fleet.slurm.nodes[node.name]
    if isinstance(change, SlurmUnreadable):
        record.unreadable = change.unreadable
        word = "unreadable" if change.unreadable else "readable again"
        return ChangeResult(True, f"slurm {word} from {node.name}")
    if isinstance(change, Drain | SetDrainReason):
        if isinstance(change, Drain):
            record.drain = True
        record.reason, record.reason_user, record.reason_time = change.reason, change.user, now
        verb = "drained" if isinstance(change, Drain) else "reason set"
        return ChangeResult(True, f"{verb} by {change.user}: {change.reason}")
    return _become_busy(fleet, node, change, now)


def _become_busy(
    fleet: FleetState, node: NodeState, change: BecomeBusy, now: float
) -> ChangeResult:
    record = fleet.slurm.nodes[node.name]
    refusal = _no_job_reason(node, record.drain, record.base, record.job_id)
    refusal = refusal or _reserved_reason(fleet, node.name, change.reservation, now)
    if refusal is not None:
        return ChangeResult(False, f"no job started: {refusal}")
    job_id = change.job_id or fleet.slurm.next_job
    if job_id in fleet.slurm.jobs:
        return ChangeResult(False, f"no job started: job {job_id} already exists")
    fleet.slurm.next_job = max(fleet.slurm.next_job, job_id) + 1
    fleet.slurm.jobs[job_id] = SlurmJob(
        job_id, change.user, node.name, "train.sbatch", now, reservation=change.reservation
    )
    record.base, record.job_id = "ALLOCATED", job_id
    specs = change.processes or _one_per_gpu(node)
    added = tuple(GpuProcess(p.name, p.gpu, p.used_mib, job_id=job_id) for p in specs)
    node.processes.extend(added)
    return ChangeResult(
        True, f"job {job_id} ({change.user}) started with {len(added)} GPU processes", added
    )


def _no_job_reason(node: NodeState, drain: bool, base: str, job_id: int | None) -> str | None:
    if node.status != "up":
        return f"the node is {node.status}"
    if drain or base == "DOWN":
        return "Slurm schedules no job on a drained or down node"
    if job_id is not None:
        return f"job {job_id} already holds the node (running, or completing its epilog)"
    return None


def _reserved_reason(fleet: FleetState, node: str, wanted: str | None, now: float) -> str | None:
    """Slurm starts a job on a reserved node only inside that reservation (and a job that
    names a reservation only on its nodes, while it is active)."""
    held = fleet.slurm.reservation_of(node, now)
    if wanted is None:
        return None if held is None else f"the node is reserved ({held.name})"
    asked = fleet.slurm.reservations.get(wanted)
    if asked is None or not asked.active(now):
        return f"reservation {wanted} does not exist or is not active"
    if node not in asked.nodes:
        return f"reservation {wanted} does not hold the node"
    return None


def _one_per_gpu(node: NodeState) -> tuple[GpuProcessSpec, ...]:
    """A whole-node training job: one process on every GPU that is there and answers."""
    return tuple(
        GpuProcessSpec("python3", gpu.index, BUSY_MEMORY_MIB)
        for gpu in node.visible_gpus()
        if not node.gpu_lost(gpu.index)
    )
