"""Result values: one command, one step on one host, one host's recap, one run."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetfix.plain import to_data
from fleetfix.verdicts import Verdict, VerdictKind

EXCERPT = 4000
"""Characters kept of each output stream, marker included: no more than a report shows
(report/text.py EXCERPT_CHARS), so a report re-rendered from the journal shows about what the
live one showed (its head a few characters shorter), with the true length of the output."""


PARSED_EXCERPT = 1000
"""Characters kept of an output a probe read into facts (head and tail, with its true length):
the facts, in the step's row, are the evidence; 4,000 characters of nvidia-smi's XML were a
fifth of the journal. The journal keeps this much, and so does the live report."""


def kept_of(read_into_facts: bool, full: int = EXCERPT) -> int:
    """Characters of a command's output to keep: PARSED_EXCERPT (at most `full`) when a probe
    read it into facts, else `full`. The journal and the live report keep the same."""
    return min(full, PARSED_EXCERPT) if read_into_facts else full


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """At most `limit` characters of `text`, marker included: a quarter from the head (what
    ran), the rest from the tail (where tools print their verdict and errors). The marker says
    how long the output was and how much of it is cut."""
    if len(text) <= limit:
        return text
    widest = f"\n... [{len(text)} chars, {len(text)} cut] ...\n"  # the cut is never wider
    room = max(limit - len(widest), 0)
    head, tail = room // 4, room - room // 4
    marker = f"\n... [{len(text)} chars, {len(text) - room} cut] ...\n"
    return f"{text[:head]}{marker}{text[len(text) - tail :]}"


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """A probe's verdict on a command's stdout, made where the command ran (a host shard's
    worker process): the typed facts, or why parsing failed."""

    facts: Any = None
    error: str | None = None
    absent: str | None = None
    """The tool that is not installed on the node (then `error` says so and there are no facts):
    the node does not have it, which is not a fault (errors.ToolNotInstalled)."""

    @property
    def data(self) -> Any:
        """The facts as plain data, made now (not kept: the typed facts are the one copy)."""
        return to_data(self.facts)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """A completed remote (or local) command, shaped like asyncssh's SSHCompletedProcess."""

    command: str
    rc: int | None
    stdout: str
    stderr: str
    duration: float = 0.0
    timed_out: bool = False
    parsed: ParsedOutput | None = field(default=None, compare=False, repr=False)
    """Set when a shard worker already parsed stdout with the probe the engine asked for."""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out


INTERNAL_PREFIX = "_ansible_"
"""Result keys for the console only, never registered (as Ansible's internal keys)."""
VERBOSE_KEY = "_ansible_verbose_always"
"""In a step's data: printed whole without -v (debug, assert), as Ansible's default callback."""
DEBUG_KEY = "_ansible_debug"
"""In a debug step's data: printed as Ansible prints debug (its msg alone, or its var)."""
META_KEY = "_ansible_meta"
"""In a meta step's data: no line is printed for it (only `skipping` when its `when` fails)."""
QUIET_KEY = "_ansible_quiet"
"""In an Ansible module's data: its message is not printed without -v, as in Ansible."""
WARNINGS_KEY = "_ansible_warnings"
"""In a step's data: warnings printed before its line (`[WARNING]: ...`)."""


def registered_output(text: str) -> str:
    """A command's output as `register:` keeps it: without the trailing newline, as Ansible's
    command and shell modules strip it (`out.stdout == 'hello'` after `echo hello`)."""
    return text.rstrip("\r\n")


class Status(enum.StrEnum):
    """The verdict of one step on one host, as the PLAY RECAP counts it."""

    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    SKIPPED = "skipped"
    RESCUED = "rescued"
    IGNORED = "ignored"


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step did on one host; `data` is what `register` stores."""

    host: str
    step: str
    status: Status
    changed: bool = False
    message: str = ""
    commands: tuple[CommandResult, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    attempts: int = 1
    duration: float = 0.0
    key: str = ""
    """Where the step stands in the playbook (file:line:col): stable across runs, for resume."""


RECAP_FIELDS: tuple[str, ...] = (
    "ok",
    "changed",
    "unreachable",
    "failed",
    "skipped",
    "rescued",
    "ignored",
)


@dataclass(slots=True)
class HostStats:
    """Per-host counters for the PLAY RECAP, in Ansible's meaning."""

    ok: int = 0
    changed: int = 0
    unreachable: int = 0
    failed: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    def count(self, result: StepResult) -> None:
        """Add one step result the way Ansible's recap does (changed also counts as ok)."""
        status = result.status
        if status in (Status.OK, Status.CHANGED):
            self.ok += 1
            if result.changed:
                self.changed += 1
        elif status is Status.FAILED:
            self.failed += 1
        elif status is Status.UNREACHABLE:
            self.unreachable += 1
        elif status is Status.SKIPPED:
            self.skipped += 1
        elif status is Status.IGNORED:
            self.ok += 1
            self.ignored += 1
            if result.changed:
                self.changed += 1
        elif status is Status.RESCUED:
            self.rescued += 1

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in RECAP_FIELDS}


class Outcome(enum.IntEnum):
    """Process exit codes; scripts and timers depend on them (README lists them)."""

    OK = 0
    ERROR = 1
    HOST_FAILED = 2
    UNREACHABLE = 4
    BAD_OPTIONS = 5
    SAFETY_ABORT = 6
    CHECK_CHANGES = 7
    INTERRUPTED = 99
    INTERNAL = 250


@dataclass(slots=True)
class RunResult:
    """Everything a finished run knows: per-host stats and per-step results."""

    stats: dict[str, HostStats] = field(default_factory=dict)
    results: list[StepResult] = field(default_factory=list)
    aborted_by_safety: str | None = None
    holds: list[str] = field(default_factory=list)
    """Disruptive actions a topology gate held back (caps or a suspect domain): exit 6."""
    interrupted: bool = False
    left: dict[str, str] = field(default_factory=dict)
    """Hosts the run leaves unhealthy or untouched on purpose -> why (owned, deferred,
    refused, a fault still present). Any of them makes the run exit non-zero."""
    leased: dict[str, str] = field(default_factory=dict)
    """Hosts left out because another live run holds them -> who: exit 6, the rest is run."""
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    """Each host's verdict, judged once (engine/verdict.py); every report reads it."""

    def outcome(self, *, check_changes_exit: bool = False) -> Outcome:
        """Ansible's precedence: safety gate, then unreachable over failed; a host left
        unhealthy counts as failed, so a timer alerting on the exit code sees it."""
        if self.interrupted:
            return Outcome.INTERRUPTED
        if self.aborted_by_safety or self.holds or self.leased:
            return Outcome.SAFETY_ABORT
        if self.verdicts:  # the engine judged every host: the verdicts decide
            kinds = {v.kind for v in self.verdicts.values()}
            if VerdictKind.UNREACHABLE in kinds:
                return Outcome.UNREACHABLE
            if any(kind.failing for kind in kinds):
                return Outcome.HOST_FAILED
        elif any(s.unreachable for s in self.stats.values()):
            return Outcome.UNREACHABLE
        elif any(s.failed for s in self.stats.values()) or self.left:
            return Outcome.HOST_FAILED
        if check_changes_exit and any(s.changed for s in self.stats.values()):
            return Outcome.CHECK_CHANGES
        return Outcome.OK


def failed_and_considered(results: Iterable[StepResult]) -> tuple[set[str], set[str]]:
    """Which hosts failed a check, among those that ran one (for correlating failures).

    A failed health check counts even when the playbook chose to carry on (`ignore_errors`),
    or rescued it: the node still showed the symptom. Skipped steps say nothing either way.
    """
    failed: set[str] = set()
    considered: set[str] = set()
    for result in results:
        if result.status is Status.SKIPPED:
            continue
        considered.add(result.host)
        if result.status in (Status.FAILED, Status.UNREACHABLE) or (
            result.status is Status.IGNORED and result.data.get("failed")
        ):
            failed.add(result.host)
    return failed, considered


@dataclass(frozen=True, slots=True)
class JournaledStep:
    """The last verdict a host-step got in an interrupted run, as the journal kept it."""

    status: Status
    changed: bool
    message: str
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class OpenIntent:
    """A mutating action whose start is journaled and whose outcome is not: it may have run."""

    action: str
    at: float
    evidence: Mapping[str, str]
    record: int
    """The journal row, so a resumed run can mark the intent undelivered."""


@dataclass(frozen=True, slots=True)
class ResumeState:
    """What a resumed run replays: per (host, step key) the last verdict; per (host, step key,
    action) the actions started whose step never got a verdict."""

    run_id: str = ""
    steps: Mapping[tuple[str, str], JournaledStep] = field(default_factory=dict)
    intents: Mapping[tuple[str, str, str], OpenIntent] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.run_id)
