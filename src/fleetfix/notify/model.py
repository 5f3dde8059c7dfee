"""What a notification says, as plain values: no JSON, no Slack, no HTTP (renderers do that)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fleetfix.notify.kinds import Kind


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The run a notification comes from."""

    run_id: str
    playbook: str
    controller: str
    """The machine fleetfix runs on (its host name)."""
    check: bool


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU of a node as the run's parsed facts identify it; None where no fact said."""

    index: int | None
    bus_id: str | None
    uuid: str | None
    serial: str | None
    name: str | None
    xids: tuple[int, ...] = ()
    """Xid codes logged for this GPU in the kernel log the run read."""
    lost: bool = False
    """nvidia-smi could not open it (fallen off the bus), or it logged an Xid and no
    nvidia-smi listing shows it."""


@dataclass(frozen=True, slots=True)
class XidSeen:
    """One Xid code in the node's kernel log, over every read of this run."""

    code: int
    count: int
    mnemonic: str | None
    gpus: tuple[str, ...]
    """Bus ids of the GPUs that logged it."""
    last_seen: str | None
    """The kernel log's timestamp of its latest occurrence, as printed."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """An action journaled for the node in this run, and how it ended."""

    action: str
    step: str
    outcome: str
    """`ok`, `failed`, or `no outcome` (the run ended or was interrupted before it did)."""
    at: float
    message: str = ""
    """The step's verdict when it failed (e.g. why verification failed)."""


@dataclass(frozen=True, slots=True)
class Rma:
    """A node fleetfix left drained with a reason saying it needs RMA: a ticket's content."""

    node: str
    reason: str
    """The Slurm drain reason fleetfix set (`fleetfix: ... needs RMA`)."""
    gpus: tuple[Gpu, ...]
    xids: tuple[XidSeen, ...]
    tried: tuple[Attempt, ...]
    evidence: str
    """A bounded excerpt (EVIDENCE_CHARS) written from parsed facts, not raw output."""


@dataclass(frozen=True, slots=True)
class Hold:
    """The run held disruptive actions: a suspect shared component, or a safety gate stopped
    the play (max_fail_percentage)."""

    cause: str
    """`finding` (failures concentrate under one switch or rack) or `safety_stop`."""
    reason: str
    domain_kind: str | None = None
    domain: str | None = None
    hosts: tuple[str, ...] = ()
    """The failed hosts behind a finding (at most LIST_LIMIT)."""
    hosts_total: int = 0


@dataclass(frozen=True, slots=True)
class BudgetRefused:
    """Disruptive actions the fleet-wide repair budget refused (one per batch, all hosts)."""

    reason: str
    hosts: tuple[str, ...]
    hosts_total: int


@dataclass(frozen=True, slots=True)
class HostCounts:
    """Hosts by their worst verdict in the run."""

    total: int
    ok: int
    changed: int
    failed: int
    unreachable: int


@dataclass(frozen=True, slots=True)
class LeftHost:
    host: str
    reason: str
    verdict: str = ""
    """The host's verdict (fleetfix/verdicts.py VerdictKind value): `needs_rma`, `deferred`."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How the run ended: the exit code the CLI returns, and what it leaves behind."""

    outcome: str
    """The exit outcome's name, lower case (`ok`, `host_failed`, `safety_abort`, ...)."""
    exit_code: int
    duration_s: float | None
    host_counts: HostCounts
    left: tuple[LeftHost, ...]
    """Hosts left unhealthy or untouched on purpose (at most LIST_LIMIT)."""
    left_total: int
    holds: int
    """Disruptive actions a topology gate or the repair budget held back."""
    interrupted: bool
    safety_stop: str | None
    journal_lost: str | None = None
    """Why the run stopped when it lost its journal (exit 6: it starts no action it cannot
    record); the other fields then say what it had seen until then."""
    verdicts: Mapping[str, int] = field(default_factory=dict)
    """Hosts by the engine's verdict (only verdicts some host has)."""


Body = Rma | Hold | BudgetRefused | RunEnd


@dataclass(frozen=True, slots=True)
class Notification:
    kind: Kind
    at: float
    """When it happened (epoch seconds): the event that caused it."""
    run: RunInfo
    body: Body
    key: str = ""
    """Its idempotency key, `RUN_ID:SESSION:SEQUENCE`: the same on every retry and to every
    webhook, so a receiver that already took it can drop a second copy. SESSION (when this
    controller's run started, in milliseconds) keeps a resumed run's keys apart from those of
    the run it resumes (same run id)."""


LIST_LIMIT = 50
"""Host lists in a notification stop here; the `*_total` field says how many there were."""
EVIDENCE_CHARS = 2000
