"""The fleet's Slurm controller as the lab keeps it: a record per node, the jobs, the
reservations, and the truth read from them (lab/tools/slurm*.py print and change them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SlurmNode:
    """The controller's view of one node."""

    base: str = "IDLE"
    drain: bool = False
    reason: str | None = None
    reason_user: str | None = None
    reason_time: float | None = None
    job_id: int | None = None
    unreadable: bool = False
    """The node cannot reach the controller: Slurm commands run on it fail."""
    reboot: str | None = None
    """A Slurm-managed reboot (`scontrol reboot`): `requested` while a job still holds the
    node, `issued` once its RebootProgram ran, None when none is pending."""
    next_state: str | None = None
    """What the node becomes when slurmd registers after that reboot: RESUME, DOWN, UNDRAIN
    (ASAP without nextstate), or None (as it was, drain and reason kept)."""


@dataclass(slots=True)
class SlurmJob:
    job_id: int
    user: str
    node: str
    name: str
    started: float
    reservation: str | None = None
    """The reservation the job runs in (a job may start on a reserved node only in its own)."""
    epilog_until: float | None = None
    """Set when the job ended and its node's epilog runs: COMPLETING (squeue CG) until then."""
    more_nodes: tuple[str, ...] = ()
    """A job across several nodes: the ones after `node` (its batch host), in Slurm's order."""

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.node, *self.more_nodes)


@dataclass(slots=True)
class Reservation:
    """A Slurm reservation: `scontrol create reservation`, until deleted or its end time."""

    name: str
    nodes: tuple[str, ...]
    start: float
    end: float
    users: tuple[str, ...]
    flags: tuple[str, ...]
    """As scontrol prints them, in Slurm's order (MAINT, IGNORE_JOBS, SPEC_NODES, ...)."""
    created_by: str
    created_at: float

    def active(self, now: float) -> bool:
        return self.start <= now < self.end

    @property
    def maint(self) -> bool:
        return "MAINT" in self.flags

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "nodes": list(self.nodes),
            "start": self.start,
            "end": self.end,
            "users": list(self.users),
            "flags": list(self.flags),
            "created_by": self.created_by,
            "created_at": self.created_at,
        }


@dataclass(slots=True)
class SlurmState:
    """The fleet's Slurm controller: one record per node, the jobs and the reservations."""

    partition: str
    nodes: dict[str, SlurmNode] = field(default_factory=dict)
    jobs: dict[int, SlurmJob] = field(default_factory=dict)
    next_job: int = 1000
    reservations: dict[str, Reservation] = field(default_factory=dict)
    epilog: float = 0.0
    """How long a node stays COMPLETING after a job ends (the scenario's timing.epilog)."""
    next_reservation: int = 1

    def settle(self, now: float) -> None:
        """Epilogs that are over end their jobs; reservations past their end time are purged
        (slurmctld does both on its own; the lab does it whenever someone looks)."""
        for job in list(self.jobs.values()):
            if job.epilog_until is not None and job.epilog_until <= now:
                del self.jobs[job.job_id]
                for node in job.nodes:
                    record = self.nodes[node]
                    if record.job_id == job.job_id:
                        record.job_id = None
        for name in [n for n, r in self.reservations.items() if r.end <= now]:
            del self.reservations[name]

    def completing(self, node: str) -> SlurmJob | None:
        """The job whose epilog still runs on `node` (the node is COMPLETING), if any."""
        job = self.jobs.get(self.nodes[node].job_id or -1)
        return job if job is not None and job.epilog_until is not None else None

    def reservation_of(self, node: str, now: float) -> Reservation | None:
        """The active reservation holding `node` (a MAINT one first, like slurmctld)."""
        found = [r for r in self.reservations.values() if node in r.nodes and r.active(now)]
        found.sort(key=lambda r: not r.maint)
        return found[0] if found else None


def slurm_truth(slurm: SlurmState, name: str, now: float) -> dict[str, Any]:
    record = slurm.nodes[name]
    reservation = slurm.reservation_of(name, now)
    return {
        "state": record.base,
        "drain": record.drain,
        "reason": record.reason,
        "reason_user": record.reason_user,
        "job_id": record.job_id,
        "completing": slurm.completing(name) is not None,
        "reservation": None if reservation is None else reservation.name,
        "unreadable": record.unreadable,
        "reboot": record.reboot,
        "next_state": record.next_state,
    }
