"""What a job's logs say about its ranks: NCCL_DEBUG lines, PyTorch's watchdog, torchrun's
ChildFailedError report (read_job_logs), and the suspects they point at (suspects)."""

from __future__ import annotations

from fleetfix.joblogs.model import (
    ChildFailure,
    EventKind,
    JobLogFacts,
    LogEvent,
    Progress,
    RankInfo,
    Suspect,
    SuspectKind,
    Timeout,
    Topic,
)
from fleetfix.joblogs.reader import MAX_LINE, read_job_logs
from fleetfix.joblogs.suspects import suspects

__all__ = [
    "MAX_LINE",
    "ChildFailure",
    "EventKind",
    "JobLogFacts",
    "LogEvent",
    "Progress",
    "RankInfo",
    "Suspect",
    "SuspectKind",
    "Timeout",
    "Topic",
    "read_job_logs",
    "suspects",
]
