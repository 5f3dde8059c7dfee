"""A host's verdict: what fleetfix concluded about one host in one run, computed once.

The engine judges every host once, at the end of the run (engine/verdict.py), or at the moment
it leaves one (deferred, owned, refused, leased); the verdicts travel in `RunResult.verdicts`
and the journal keeps them with the run's end. The console, HTML, JSON, JUnit, metrics,
webhooks and the exit code all read them: none re-derives a status from recap counters.

    verdict = result.verdicts["gpu007"]
    verdict.kind            # VerdictKind.NEEDS_RMA
    verdict.reason          # "Xid 79 not fixed ...: RMA candidate: run the field diagnostic"
    verdict.next_step       # "open an RMA ticket with the evidence: fleetfix report RUN ..."
    verdict.kind.failing    # True: the run exits non-zero for it
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class LeftKind(enum.StrEnum):
    """Why the engine left a host during the run (events.HostLeft's `kind`)."""

    OWNED = "owned"
    """Someone else has the node (a human's drain, a reservation, the hands-off list)."""
    DEFERRED = "deferred"
    """Its jobs did not leave in time: left drained, the next run finishes the work."""
    REFUSED = "refused"
    """A safety gate could not be evaluated (or refused the action): a human decides."""
    UNHEALTHY = "unhealthy"
    """A fault is still there (or a step failed) at the end of the run."""
    LEASED = "leased"
    """Another live run holds the node: left out of this run, untouched."""


class VerdictKind(enum.StrEnum):
    """What fleetfix concluded about a host. The order is the order of urgency (worst first):
    reports list and colour hosts by it."""

    UNREACHABLE = "unreachable"
    NEEDS_RMA = "needs_rma"
    NEEDS_HUMAN = "needs_human"
    HELD = "held"
    UNHEALTHY = "unhealthy"
    FAILED = "failed"
    DEFERRED = "deferred"
    LEFT_ALONE = "left_alone"
    LEFT_OUT = "left_out"
    DRAINED = "drained"
    INTERRUPTED = "interrupted"
    FIXED = "fixed"
    CHANGED = "changed"
    HEALTHY = "healthy"
    NOT_RUN = "not_run"

    @property
    def failing(self) -> bool:
        """The run exits non-zero for a host with this verdict (2, or 4 for unreachable)."""
        return self in FAILING

    @property
    def label(self) -> str:
        """How an operator reads it: "needs RMA", "left alone", "not run"."""
        return LABELS[self]

    @property
    def meaning(self) -> str:
        return MEANINGS[self]

    @property
    def rank(self) -> int:
        """0 for the most urgent; for sorting worst first."""
        return ORDER.index(self)


ORDER: tuple[VerdictKind, ...] = tuple(VerdictKind)
FAILING = frozenset(
    {
        VerdictKind.UNREACHABLE,
        VerdictKind.NEEDS_RMA,
        VerdictKind.NEEDS_HUMAN,
        VerdictKind.HELD,
        VerdictKind.UNHEALTHY,
        VerdictKind.FAILED,
        VerdictKind.DEFERRED,
        VerdictKind.LEFT_ALONE,
    }
)
"""Verdicts the run exits non-zero for. `left_out` exits 6 through the lease that caused it;
`drained` (out of service with its reason saying why, not by this run) does not fail the run."""
LABELS: Mapping[VerdictKind, str] = {
    VerdictKind.UNREACHABLE: "unreachable",
    VerdictKind.NEEDS_RMA: "needs RMA",
    VerdictKind.NEEDS_HUMAN: "needs a human",
    VerdictKind.HELD: "held",
    VerdictKind.UNHEALTHY: "unhealthy",
    VerdictKind.FAILED: "failed",
    VerdictKind.DEFERRED: "deferred",
    VerdictKind.LEFT_ALONE: "left alone",
    VerdictKind.LEFT_OUT: "left out",
    VerdictKind.DRAINED: "drained",
    VerdictKind.INTERRUPTED: "interrupted",
    VerdictKind.FIXED: "fixed",
    VerdictKind.CHANGED: "changed",
    VerdictKind.HEALTHY: "healthy",
    VerdictKind.NOT_RUN: "not run",
}
MEANINGS: Mapping[VerdictKind, str] = {
    VerdictKind.UNREACHABLE: "could not be reached (or kept connected)",
    VerdictKind.NEEDS_RMA: "drained: needs RMA, or an RMA candidate for the field diagnostic",
    VerdictKind.NEEDS_HUMAN: "a fault no allowed step fixes, or a gate that refused: a human"
    " decides",
    VerdictKind.HELD: "its fix was held: its domain is a suspect, or a cap or budget is full",
    VerdictKind.UNHEALTHY: "a fault is still there, and the node is in service",
    VerdictKind.FAILED: "a step failed",
    VerdictKind.DEFERRED: "its jobs did not leave in time: drained, the next run finishes",
    VerdictKind.LEFT_ALONE: "someone else owns the node: not touched",
    VerdictKind.LEFT_OUT: "another live run holds the node: not touched",
    VerdictKind.DRAINED: "out of service before this run, its drain reason says why",
    VerdictKind.INTERRUPTED: "the run stopped before it was done with the host: --resume it",
    VerdictKind.FIXED: "a fault was repaired and the node validated",
    VerdictKind.CHANGED: "changed, no fault found",
    VerdictKind.HEALTHY: "no fault found (a reservation for a test is not a change)",
    VerdictKind.NOT_RUN: "no step ran on it",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """One host's verdict: the kind, why, the evidence behind it, and what to do next."""

    host: str
    kind: VerdictKind
    reason: str = ""
    evidence: tuple[str, ...] = ()
    next_step: str = ""
    actions: tuple[str, ...] = ()
    """The actions done on the host in this run, in order (`reboot`, `slurm_resume`)."""

    @property
    def failing(self) -> bool:
        return self.kind.failing

    def line(self) -> str:
        """One line: `gpu007  needs RMA: Xid 79 not fixed ...`."""
        return f"{self.host}  {self.kind.label}" + (f": {self.reason}" if self.reason else "")


def by_kind(verdicts: Iterable[Verdict]) -> dict[VerdictKind, list[Verdict]]:
    """Verdicts grouped by kind, worst first, each group in the order given."""
    groups: dict[VerdictKind, list[Verdict]] = {}
    for verdict in sorted(verdicts, key=lambda v: v.kind.rank):
        groups.setdefault(verdict.kind, []).append(verdict)
    return groups


__all__ = ["FAILING", "LeftKind", "Verdict", "VerdictKind", "by_kind"]
