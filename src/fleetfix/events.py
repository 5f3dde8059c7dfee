"""The events the engine emits; the console, the journal and the reports all consume them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetfix.errors import SourcePosition
from fleetfix.results import CommandResult, RunResult, StepResult
from fleetfix.secrets import Redactor


def _now() -> float:
    return time.time()


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event: when it happened (epoch seconds)."""

    at: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(Event):
    run_id: str = ""
    playbook: str
    hosts: tuple[str, ...]
    check: bool
    topology: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each host's domains (rack, leaf, spine, ...) and `gpu_model`: journaled with the run,
    so `fleetfix report RUN` draws the tree the live run drew (topology/snapshot.py)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlayStarted(Event):
    name: str
    hosts: tuple[str, ...]
    position: SourcePosition


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchStarted(Event):
    index: int
    count: int
    hosts: tuple[str, ...]
    revisit: bool = False
    """Not one of the play's planned batches: parked hosts whose wait is over (the play runs
    again for them), or hosts that waited for a parked host's place (engine/parking.py)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStarted(Event):
    """A step begins across the current batch (the TASK [...] banner; none for a block, as in
    Ansible). `key` is the step's: a host's result for another step than the last announced
    one (hosts walk blocks on their own) is shown under its own banner again."""

    name: str
    position: SourcePosition
    handler: bool = False
    key: str = ""
    block: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class HostStepStarted(Event):
    host: str
    step: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandRan(Event):
    """A command finished on a host (output already redacted when no_log)."""

    host: str
    step: str
    result: CommandResult
    planned_only: bool = False
    read_into_facts: bool = False
    """A probe read the output into facts: they are the evidence (the journal keeps a shorter
    excerpt of such output, journal/rows.py PARSED_EXCERPT)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostStepFinished(Event):
    result: StepResult
    retrying: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopItemFinished(Event):
    """One item of a looped step finished on a host (its key names the item). The step's own
    HostStepFinished follows the last item with the verdict the recap counts; the journal keeps
    each item's verdict so a resumed run replays finished items and re-runs only the rest."""

    result: StepResult
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionStarted(Event):
    """A mutating action is about to send its first command: the write-ahead intent record.

    The journal commits it before the command leaves, so a controller killed at any instant
    leaves a record of every action it may have started; a resumed run re-verifies such an
    action instead of repeating it, and `max_attempts` counts it."""

    host: str
    step: str
    key: str = ""
    action: str
    disruptive: bool = False
    evidence: dict[str, str] = field(default_factory=dict)
    """What a resumed run needs to tell whether the action happened (e.g. the boot id before)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionTaken(Event):
    """A mutating action finished on a host (not in --check): the outcome of its intent."""

    host: str
    step: str
    key: str = ""
    action: str
    failed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class HostObserved(Event):
    """What a probe told the engine about a host that outlives the run: how many GPUs it has,
    and whether Slurm has it in service (a human may have resumed a node fleetfix drained)."""

    host: str
    gpu_count: int | None = None
    in_service: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HostLeft(Event):
    """The run leaves a host unhealthy or untouched on purpose, and says why.

    kind: `owned` (someone else has the node, or it is on the hands-off list), `deferred`
    (its jobs did not leave in time: left drained, the next run finishes), `refused` (a safety
    gate could not be evaluated), `unhealthy` (a fault is still there at the end of the run),
    `leased` (another live run holds it: left out of this run, untouched).
    """

    host: str
    kind: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnershipOverridden(Event):
    """An operator told fleetfix to act on a node someone else owns; journaled with who."""

    host: str
    owner: str
    reason: str
    by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HostOutOfService(Event):
    """A host's first disruptive action: it counts against max_unavailable_per from now."""

    host: str
    domains: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class HostBackInService(Event):
    """A host finished its batch without failing: it no longer counts against the caps."""

    host: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FindingRaised(Event):
    """Failures concentrate in one domain beyond chance: suspect the shared component."""

    kind: str
    domain: str
    message: str
    hosts: tuple[str, ...]
    hold: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRetry(Event):
    host: str
    step: str
    attempt: int
    retries: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconnecting(Event):
    """A read-only command's connection dropped; it runs again on a fresh one in `delay` s."""

    host: str
    step: str
    tries: int
    delay: float
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SafetyStop(Event):
    """A safety gate stopped the play (max_fail_percentage, topology hold, ...)."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PlayFinished(Event):
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(Event):
    result: RunResult


EventSink = Callable[[Event], None]


class EventBus:
    """Fans each event out to every subscriber, in subscription order.

    Each event is redacted once, before any subscriber sees it (fleetfix.secrets): the
    console, the journal, the reports and every observer get the same masked event. With no
    secret known that is one check per event, and the event itself is passed on."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        self._subscribers: list[EventSink] = []
        self.redactor = redactor if redactor is not None else Redactor()

    def subscribe(self, sink: EventSink) -> None:
        self._subscribers.append(sink)

    def emit(self, event: Event) -> None:
        if self.redactor:
            event = self.redactor.redact(event)
        for sink in self._subscribers:
            sink(event)
