"""The probe contract: a read-only command plus a pure parser from text to typed facts."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.results import ParsedOutput

F = TypeVar("F")


@dataclass(frozen=True, slots=True)
class Probe(Generic[F]):
    """A named probe: `command` builds the shell command from step parameters,
    `parse` turns the command's stdout into facts (raises ProbeParseError on garbage).

    The parser does no I/O, so every captured sample is a test case.
    """

    name: str
    summary: str
    command: Callable[[Mapping[str, Any]], str]
    parse: Callable[[str], F]
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Accepted step parameters and what each means; anything else is refused at load."""


_PLAIN = (str, int, float, bool, type(None))


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}
"""A memo of class metadata (which never changes), not run state."""


def _field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names (read once per class); None for anything else."""
    if cls not in _FIELD_NAMES:
        fields = dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else None
        _FIELD_NAMES[cls] = tuple(f.name for f in fields) if fields is not None else None
    return _FIELD_NAMES[cls]


def to_data(value: Any) -> Any:
    """Facts (nested frozen dataclasses, enums, tuples) as plain JSON-able data."""
    cls = type(value)
    if cls in _PLAIN:
        return value
    names = _field_names(cls)
    if names is not None:
        return {name: to_data(getattr(value, name)) for name in names}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(v) for v in value]
    return value


def verdict(probe: Probe[Any], text: str) -> ParsedOutput:
    """A probe's verdict on `text`: its facts, typed and as data, or why parsing failed.
    The one place output becomes facts, in the main process or in a host shard's worker."""
    try:
        facts = probe.parse(text)
    except ToolNotInstalled as exc:
        return ParsedOutput(error=str(exc), absent=exc.tool)
    except ProbeParseError as exc:
        return ParsedOutput(error=str(exc))
    return ParsedOutput(facts=facts, data=to_data(facts))
