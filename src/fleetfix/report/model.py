"""The report's data model: what one run did, per host and per fleet; no rendering here.

Every renderer (terminal, HTML, JSON, JUnit) reads a `Report`; `collect.ReportCollector` builds
one from the engine's events. Text from hosts is kept as excerpts with control characters
removed; no_log output arrives redacted and stays so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fleetfix.results import RECAP_FIELDS
from fleetfix.topology.findings import Finding, FindingCategory
from fleetfix.verdicts import Verdict, VerdictKind


@dataclass(frozen=True, slots=True)
class CommandRecord:
    """One command a step ran (or, in --check, would have run)."""

    command: str
    rc: int | None
    duration: float
    timed_out: bool = False
    planned_only: bool = False
    stdout: str = ""
    stderr: str = ""
    at: float | None = None


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step on one host: its verdict, its commands and when it ran."""

    host: str
    step: str
    play: str
    status: str
    changed: bool
    message: str
    attempts: int
    duration: float
    started: float | None
    finished: float | None
    commands: tuple[CommandRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class HostReport:
    """One host: its verdict (the engine's, fleetfix/verdicts.py), PLAY RECAP counters,
    place in the topology and its steps."""

    name: str
    verdict: Verdict
    recap: Mapping[str, int]
    domains: Mapping[str, str] = field(default_factory=dict)
    steps: tuple[StepRecord, ...] = ()
    busbw: float | None = None
    left: tuple[str, str] | None = None
    """(kind, why) when the engine left this host during the run (events.HostLeft)."""

    @property
    def status(self) -> VerdictKind:
        return self.verdict.kind

    @property
    def held(self) -> bool:
        return self.verdict.kind is VerdictKind.HELD


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """A mutating action that ran (or, in --check, was planned) on a host."""

    host: str
    step: str
    action: str | None
    failed: bool
    planned: bool
    commands: tuple[str, ...] = ()
    at: float | None = None
    verification_failed: bool = False
    """The action ran without error, then the step's `verify` said the fix did not take."""

    @property
    def outcome(self) -> str:
        """In an operator's words: done, failed, failed verification, planned (check mode)."""
        if self.planned:
            return "planned (check mode)"
        if self.failed:
            return "failed"
        return "failed verification" if self.verification_failed else "done"

    @property
    def bad(self) -> bool:
        return self.failed or self.verification_failed


@dataclass(frozen=True, slots=True)
class LeafNode:
    """A leaf switch in the report's tree: its uplinks and the run's hosts below it."""

    name: str
    hosts: tuple[str, ...]
    spines: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SpineNode:
    name: str
    leaves: tuple[LeafNode, ...]


@dataclass(frozen=True, slots=True)
class Report:
    """Everything one run's report shows."""

    run_id: str
    playbook: str
    started: float | None
    finished: float | None
    check: bool
    outcome: str
    exit_code: int | None
    plays: tuple[str, ...] = ()
    hosts: tuple[HostReport, ...] = ()
    findings: tuple[Finding, ...] = ()
    tree: tuple[SpineNode, ...] = ()
    actions: tuple[ActionRecord, ...] = ()
    safety_stops: tuple[str, ...] = ()
    interrupted: bool = False

    def host(self, name: str) -> HostReport:
        """Raises KeyError for a host not in this report."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @property
    def busbw(self) -> dict[str, float]:
        return {h.name: h.busbw for h in self.hosts if h.busbw is not None}

    @property
    def timeline(self) -> list[StepRecord]:
        """Every step that has a start time, in start order."""
        steps = [s for h in self.hosts for s in h.steps if s.started is not None]
        return sorted(steps, key=lambda s: (s.started or 0.0, s.host))

    def status_counts(self) -> dict[str, int]:
        """Hosts per verdict (every verdict present, zero when none), worst first."""
        counts = {kind.value: 0 for kind in VerdictKind}
        for host in self.hosts:
            counts[host.status.value] += 1
        return counts

    def recap_totals(self) -> dict[str, int]:
        return {name: sum(h.recap.get(name, 0) for h in self.hosts) for name in RECAP_FIELDS}

    def findings_of(self, category: FindingCategory) -> list[Finding]:
        return [f for f in self.findings if f.category is category]

    def suspects(self) -> dict[tuple[str, str], Finding]:
        """(kind, domain) -> the finding that names it a suspect (aliases included)."""
        out: dict[tuple[str, str], Finding] = {}
        for finding in self.findings_of(FindingCategory.CORRELATED_FAILURE):
            out[(finding.kind, finding.domain)] = finding
            for alias in finding.also:
                kind, _, name = alias.partition(" ")
                out[(kind, name)] = finding
        return out


__all__ = [
    "ActionRecord",
    "CommandRecord",
    "HostReport",
    "LeafNode",
    "Report",
    "SpineNode",
    "StepRecord",
]
