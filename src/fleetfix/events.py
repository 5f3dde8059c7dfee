"""The events the engine emits; the console, the journal and the reports all consume them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetfix.errors import SourcePosition
from fleetfix.results import CommandResult, RunResult, StepResult


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


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStarted(Event):
    """A step begins across the current batch (the TASK [...] banner)."""

    name: str
    position: SourcePosition
    handler: bool = False


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


@dataclass(frozen=True, slots=True, kw_only=True)
class HostStepFinished(Event):
    result: StepResult
    retrying: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionTaken(Event):
    """A mutating action really ran its plan on a host (not in --check); cooldowns count these."""

    host: str
    step: str
    action: str
    failed: bool


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
    """Fans each event out to every subscriber, in subscription order."""

    def __init__(self) -> None:
        self._subscribers: list[EventSink] = []

    def subscribe(self, sink: EventSink) -> None:
        self._subscribers.append(sink)

    def emit(self, event: Event) -> None:
        for sink in self._subscribers:
            sink(event)
