"""Events to JSON and back, bounded, so the journal can replay a run into any consumer."""

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
from fleetfix.events import CommandRan, Event, HostStepFinished, RunFinished
from fleetfix.results import CommandResult, StepResult

EXCERPT = 8192


class CodecError(FleetfixError):
    """A journaled event could not be read back (a newer or damaged journal)."""


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """Head and tail of long output: the start says what ran, the end says how it ended."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} chars cut] ...\n{text[-half:]}"


def encode(event: Event) -> tuple[str, str]:
    """(type name, JSON) of an event with its long outputs cut to excerpts."""
    return type(event).__name__, json.dumps(_plain(_bounded(event)), default=str)


def decode(type_name: str, body: str) -> Event:
    cls = _event_types().get(type_name)
    if cls is None:
        raise CodecError(f"unknown event type {type_name!r} in the journal")
    try:
        value = _build(cls, json.loads(body))
    except (TypeError, ValueError, KeyError) as exc:
        raise CodecError(f"cannot read a journaled {type_name}: {exc}") from exc
    return typing.cast(Event, value)


@cache
def _event_types() -> dict[str, type[Any]]:
    return {
        name: cls
        for name, cls in vars(events).items()
        if isinstance(cls, type) and issubclass(cls, Event)
    }


def _command(result: CommandResult) -> CommandResult:
    return dataclasses.replace(result, stdout=excerpt(result.stdout), stderr=excerpt(result.stderr))


def _bounded(event: Event) -> Event:
    if isinstance(event, CommandRan):
        return dataclasses.replace(event, result=_command(event.result))
    if isinstance(event, HostStepFinished):
        return dataclasses.replace(event, result=_step(event.result))
    if isinstance(event, RunFinished):
        # Step results are journaled one by one already; the summary keeps only the totals.
        return dataclasses.replace(event, result=dataclasses.replace(event.result, results=[]))
    return event


def _step(result: StepResult) -> StepResult:
    data = {k: v for k, v in result.data.items() if k not in ("stdout_lines", "stderr_lines")}
    for key in ("stdout", "stderr"):
        if isinstance(data.get(key), str):
            data[key] = excerpt(data[key])
    commands = tuple(_command(c) for c in result.commands)
    return dataclasses.replace(result, data=data, commands=commands)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value


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
