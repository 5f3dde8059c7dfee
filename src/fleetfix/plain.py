"""Facts as plain data: `to_data` turns a probe's typed facts (nested frozen dataclasses,
enums, tuples) into the dicts, lists and scalars that `register:`, templates, the journal and
reports read. The typed facts are the one copy a run keeps; this view is made when it is read.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

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
