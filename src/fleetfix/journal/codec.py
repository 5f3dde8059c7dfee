"""Events to JSON and back, bounded, so the journal can replay a run into any consumer.

Two events keep their bulk in a row of their own, stored once: a `CommandRan` body leaves out
the command and its output (the `commands` row holds them, as excerpts), a `HostStepFinished`
body leaves out the registered data and the commands (the `steps` row holds the data; the
commands are the step's own `CommandRan` events). `decode` puts the row's part back.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from fleetfix import events
from fleetfix.errors import FleetfixError
from fleetfix.events import CommandRan, Event, HostStepFinished, LoopItemFinished, RunFinished
from fleetfix.plain import to_data
from fleetfix.results import EXCERPT, CommandResult, StepResult, excerpt

ROW_FIELDS: dict[type[Event], tuple[str, ...]] = {
    CommandRan: ("command", "stdout", "stderr"),
    HostStepFinished: ("data", "commands"),
    LoopItemFinished: ("data", "commands"),
}
"""Per event type, the fields of its `result` that live in a row of their own, not the body."""


__all__ = ["EXCERPT", "ROW_FIELDS", "CodecError", "decode", "encode", "excerpt"]


class CodecError(FleetfixError):
    """A journaled event could not be read back (a newer or damaged journal)."""


def encode(event: Event) -> tuple[str, str]:
    """(type name, JSON) of an event with its long outputs cut to excerpts; without the
    fields its row keeps (ROW_FIELDS)."""
    return type(event).__name__, json.dumps(_bounded(event), default=str)


def decode(type_name: str, body: str, row: Mapping[str, Any] | None = None) -> Event:
    """The event back from its body and, for a ROW_FIELDS type, the fields its row keeps
    (a journal written before the rows held them has them in the body: `row` is None)."""
    cls = _event_types().get(type_name)
    if cls is None:
        raise CodecError(f"unknown event type {type_name!r} in the journal")
    try:
        value = json.loads(body)
        if row is not None:
            value["result"].update(row)
        built = _build(cls, value)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CodecError(f"cannot read a journaled {type_name}: {exc}") from exc
    return typing.cast(Event, built)


@cache
def _event_types() -> dict[str, type[Any]]:
    return {
        name: cls
        for name, cls in vars(events).items()
        if isinstance(cls, type) and issubclass(cls, Event)
    }


def _bounded(event: Event) -> dict[str, Any]:
    """The event as plain data, without what its row keeps and without repeated results."""
    if isinstance(event, CommandRan):
        lean: Event = dataclasses.replace(event, result=_lean_command(event.result))
    elif isinstance(event, HostStepFinished | LoopItemFinished):
        lean = dataclasses.replace(event, result=_lean_step(event.result))
    elif isinstance(event, RunFinished):
        # Step results are journaled one by one already; the summary keeps only the totals.
        lean = dataclasses.replace(event, result=dataclasses.replace(event.result, results=[]))
    else:
        lean = event
    value: dict[str, Any] = to_data(lean)
    for name in ROW_FIELDS.get(type(event), ()):
        value["result"].pop(name, None)
    if isinstance(event, CommandRan):
        value["result"].pop("parsed", None)  # a shard worker's parse, if any: the step has it
    return value


def _lean_command(result: CommandResult) -> CommandResult:
    return dataclasses.replace(result, command="", stdout="", stderr="")


def _lean_step(result: StepResult) -> StepResult:
    return dataclasses.replace(result, data={}, commands=())


def _build(tp: Any, value: Any) -> Any:
    """Rebuild a value of type `tp` (dataclass, enum, tuple, list, dict, union) from JSON."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(options[0], value) if len(options) == 1 else value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(tp, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    args = typing.get_args(tp)
    if origin is tuple:
        return tuple(_build(args[0], v) for v in value) if args else tuple(value)
    if origin is list:
        return [_build(args[0], v) for v in value] if args else list(value)
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        inner = args[1] if len(args) == 2 else Any
        return {k: _build(inner, v) for k, v in value.items()}
    return value


def _dataclass(cls: type[Any], value: Mapping[str, Any]) -> Any:
    hints = _hints(cls)
    kwargs = {
        f.name: _build(hints[f.name], value[f.name])
        for f in dataclasses.fields(cls)
        if f.name in value and f.init
    }
    return cls(**kwargs)


def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)
