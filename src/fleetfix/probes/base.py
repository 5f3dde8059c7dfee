"""The probe contract: a read-only command plus a pure parser from text to typed facts."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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


def to_data(value: Any) -> Any:
    """Facts (nested frozen dataclasses, enums, tuples) as plain JSON-able data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(v) for v in value]
    return value
