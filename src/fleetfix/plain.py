"""Facts as plain data: `to_data` turns a probe's typed facts (nested frozen dataclasses,
enums, tuples) into the dicts, lists and scalars that `register:`, templates, the journal and
reports read. The typed facts are the one copy a run keeps; this view is made when it is read.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

_PLAIN = frozenset((str, int, float, bool, type(None)))

_KINDS: dict[type, tuple[str, ...] | str] = {}
"""A memo of each class's kind (which never changes), not run state: a dataclass's field names,
or "enum", "mapping", "sequence" (list, tuple, set) or "other"."""


def _kind(cls: type) -> tuple[str, ...] | str:
    """How `to_data` reads a value of `cls`, worked out once per class (isinstance against
    the abstract Mapping, for every value of every fact, was a third of its time)."""
    kind = _KINDS.get(cls)
    if kind is None:
        if dataclasses.is_dataclass(cls):
            kind = tuple(f.name for f in dataclasses.fields(cls))
        elif issubclass(cls, enum.Enum):
            kind = "enum"
        elif issubclass(cls, Mapping):
            kind = "mapping"
        elif issubclass(cls, (list, tuple, set, frozenset)):
            kind = "sequence"
        else:
            kind = "other"
        _KINDS[cls] = kind
    return kind


def field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names (worked out once per class); None for anything else."""
    kind = _kind(cls)
    return kind if type(kind) is tuple else None


def to_data(value: Any) -> Any:
    """Facts (nested frozen dataclasses, enums, tuples, sets), or an event, as plain JSON-able
    data: the journal encodes events with it too."""
    cls = type(value)
    if cls in _PLAIN:
        return value
    kind = _kind(cls)
    # Scalars, most of the leaves, are taken as they are without a call (a third faster)
    if type(kind) is tuple:
        data: dict[str, Any] = {}
        for name in kind:
            item = getattr(value, name)
            data[name] = item if type(item) in _PLAIN else to_data(item)
        return data
    if kind == "sequence":
        return [v if type(v) in _PLAIN else to_data(v) for v in value]
    if kind == "mapping":
        return {str(k): to_data(v) for k, v in value.items()}
    if kind == "enum":
        return value.value
    return value
