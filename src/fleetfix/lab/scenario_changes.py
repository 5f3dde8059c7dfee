"""Read mid-run node changes: a node's `events:` in a scenario file, and `inject` requests.

Both use one form, a mapping with exactly one change key:

    {become_busy: {job_id: 51234, user: dave, gpu_processes: [{name: python3, gpu: 0}]}}
    {become_busy: {user: root, reservation: fleetfix-gpu003}}   # a job inside a reservation
    {drain: {user: carol, reason: "keep drained, RMA pending"}}
    {drain_reason: {user: carol, reason: "..."}}
    {slurm_unreadable: true}

A scenario event adds `after_commands: N` (the change happens once the node has received N
SSH exec requests). Mistakes are reported through the caller's checker (file, line, hint).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from fleetfix.errors import LabError
from fleetfix.lab.scenario import (
    BecomeBusy,
    Drain,
    GpuProcessSpec,
    NodeChange,
    NodeEvent,
    SetDrainReason,
    SlurmUnreadable,
)

CHANGE_KEYS = ("become_busy", "drain", "drain_reason", "slurm_unreadable")


class Checker(Protocol):
    """The validation helpers of the scenario reader (scenario_file._Builder)."""

    def error(self, message: str, key: str | None = None, hint: str | None = None) -> LabError: ...

    def mapping(self, value: object, where: str, allowed: Sequence[str]) -> dict[str, Any]: ...

    def integer(self, value: object, where: str, minimum: int = 0) -> int: ...

    def flag(self, value: object, where: str) -> bool: ...


def parse_events(
    checker: Checker,
    value: object,
    where: str,
    process: Callable[[object, str], GpuProcessSpec],
) -> tuple[NodeEvent, ...]:
    """A node's `events:` list; `process` parses one `gpu_processes` entry."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise checker.error(f"{where}: expected a list of events", "events")
    return tuple(_event(checker, item, where, process) for item in value)


def _event(
    checker: Checker,
    value: object,
    where: str,
    process: Callable[[object, str], GpuProcessSpec],
) -> NodeEvent:
    raw = checker.mapping(value, where, ("after_commands", *CHANGE_KEYS))
    if "after_commands" not in raw:
        raise checker.error(f"{where}: an event needs after_commands: N", "events")
    after = checker.integer(raw.pop("after_commands"), f"{where}.after_commands")
    return NodeEvent(after_commands=after, change=parse_change(checker, raw, where, process))


def parse_change(
    checker: Checker,
    value: object,
    where: str,
    process: Callable[[object, str], GpuProcessSpec],
) -> NodeChange:
    """One change: a mapping with exactly one of CHANGE_KEYS."""
    raw = checker.mapping(value, where, CHANGE_KEYS)
    if len(raw) != 1:
        raise checker.error(
            f"{where}: name exactly one change ({', '.join(CHANGE_KEYS)}), got {len(raw)}",
            next(iter(raw), None),
        )
    key, body = next(iter(raw.items()))
    inner = f"{where}.{key}"
    if key == "become_busy":
        return _busy(checker, body, inner, process)
    if key == "slurm_unreadable":
        return SlurmUnreadable(checker.flag(body, inner))
    person = checker.mapping(body, inner, ("user", "reason"))
    if not person.get("user") or not person.get("reason"):
        raise checker.error(f"{inner}: needs both user and reason", key)
    kind = Drain if key == "drain" else SetDrainReason
    return kind(user=str(person["user"]), reason=str(person["reason"]))


def _busy(
    checker: Checker,
    value: object,
    where: str,
    process: Callable[[object, str], GpuProcessSpec],
) -> BecomeBusy:
    raw = checker.mapping(
        {} if value is True else value, where, ("job_id", "user", "gpu_processes", "reservation")
    )
    job = raw.get("job_id")
    items = raw.get("gpu_processes") or []
    return BecomeBusy(
        job_id=None if job is None else checker.integer(job, f"{where}.job_id", minimum=1),
        user=str(raw.get("user") or "alice"),
        processes=tuple(process(item, where) for item in _as_list(items)),
        reservation=None if raw.get("reservation") is None else str(raw["reservation"]),
    )


def _as_list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]
