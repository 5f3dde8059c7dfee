"""The InfiniBand port counter table (knowledge/ib_counters.yml) as typed data.

`explain(counter)` says what a counter means and what to do when it rises (either spelling:
sysfs `symbol_error` or perfquery `SymbolErrorCounter`); `thresholds()` gives fleetfix's
default limits per counter. `load_ib_counter_catalog(text)` is the pure loader tests feed
broken tables.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge.packaged import packaged_text, yaml_mapping
from fleetfix.knowledge.xid import Severity

_WHAT = "ib counter catalog"
_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Threshold:
    """When a counter's rise between two reads is a problem."""

    per_read: int | None
    """A rise of at least this between two reads; None: never on its own."""
    per_hour: float | None
    """A rise of more than this within an hour; None: no rate limit."""

    def exceeded(self, rise: int, seconds: float | None = None) -> bool:
        """Whether `rise` (over `seconds` between the reads, when known) crosses a limit.

        Over less than an hour the rise itself is compared with `per_hour`, so a short window
        is never extrapolated into an alarm.
        """
        if self.per_read is not None and rise >= self.per_read:
            return True
        if self.per_hour is None or seconds is None or seconds <= 0:
            return False
        return rise * _HOUR / max(seconds, _HOUR) > self.per_hour


@dataclass(frozen=True, slots=True)
class CounterInfo:
    """One counter: its names, what it means, what to do, how urgent, its threshold."""

    name: str
    perfquery: str
    title: str
    meaning: str
    action: str
    severity: Severity
    threshold: Threshold
    source: str


@dataclass(frozen=True, slots=True)
class IbCounterCatalog:
    """The versioned table; look entries up with `get`."""

    version: str
    source: str
    entries: Mapping[str, CounterInfo]
    """sysfs name -> entry."""
    aliases: Mapping[str, str]
    """perfquery spelling (and the sysfs `VL15_dropped`) -> sysfs name."""

    def get(self, counter: str) -> CounterInfo | None:
        """The entry for `counter` in either spelling, or None when the table lacks it."""
        return self.entries.get(self.aliases.get(counter, counter))


@functools.cache
def ib_counter_catalog() -> IbCounterCatalog:
    """The packaged table, loaded once.

    Raises:
        KnowledgeError: the packaged file is missing or malformed (a packaging bug).
    """
    return load_ib_counter_catalog(packaged_text("ib_counters.yml", _WHAT))


def explain(counter: str) -> CounterInfo | None:
    """What `counter` (sysfs or perfquery name) means and what to do; None when unknown."""
    return ib_counter_catalog().get(counter)


def thresholds() -> Mapping[str, Threshold]:
    """Each counter's default threshold, by sysfs name."""
    catalog = ib_counter_catalog()
    return MappingProxyType({name: info.threshold for name, info in catalog.entries.items()})


def load_ib_counter_catalog(text: str) -> IbCounterCatalog:
    """Build the table from ib_counters.yml text (pure).

    Raises:
        KnowledgeError: the text is not valid YAML or breaks the table's schema.
    """
    document = yaml_mapping(text, _WHAT)
    raw = document.get("counters")
    if not isinstance(raw, list) or not raw:
        raise KnowledgeError(f"{_WHAT}: 'counters' must be a non-empty list")
    entries: dict[str, CounterInfo] = {}
    aliases: dict[str, str] = {"VL15_dropped": "vl15_dropped"}
    for item in raw:
        info = _entry(item)
        if info.name in entries:
            raise KnowledgeError(f"{_WHAT}: counter {info.name!r} is listed twice")
        entries[info.name] = info
        aliases[info.perfquery] = info.name
    return IbCounterCatalog(
        version=_text(document, "version", "table"),
        source=_text(document, "source", "table"),
        entries=MappingProxyType(entries),
        aliases=MappingProxyType(aliases),
    )


def _entry(item: Any) -> CounterInfo:
    if not isinstance(item, dict):
        raise KnowledgeError(f"{_WHAT}: each counter must be a mapping, got {item!r}")
    name = _text(item, "name", "counter")
    severity = _text(item, "severity", name)
    try:
        level = Severity(severity)
    except ValueError as exc:
        raise KnowledgeError(f"{_WHAT}: {name}: unknown severity {severity!r}") from exc
    return CounterInfo(
        name=name,
        perfquery=_text(item, "perfquery", name),
        title=_text(item, "title", name),
        meaning=_text(item, "meaning", name),
        action=_text(item, "action", name),
        severity=level,
        threshold=Threshold(
            per_read=_limit(item, "per_read", name, int),
            per_hour=_limit(item, "per_hour", name, float),
        ),
        source=_text(item, "source", name),
    )


def _text(mapping: Mapping[str, Any], key: str, where: str) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or not value.strip():
        raise KnowledgeError(f"{_WHAT}: {where}: {key!r} must be non-empty text")
    return value.strip()


def _limit(mapping: Mapping[str, Any], key: str, where: str, kind: type[Any]) -> Any:
    if key not in mapping:
        raise KnowledgeError(f"{_WHAT}: {where}: {key!r} is missing (null for none)")
    value = mapping[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise KnowledgeError(f"{_WHAT}: {where}: {key!r} must be a count >= 0 or null")
    return kind(value)
