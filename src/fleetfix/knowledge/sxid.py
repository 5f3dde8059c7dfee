"""The NVSwitch SXid knowledge table (knowledge/sxid.yml) as typed data: what an SXid means.

`sxid_catalog()` loads the packaged table once; `load_sxid_catalog(text)` is the pure loader
tests feed broken tables. An entry takes its kind's fleetfix columns (severity, action, playbook)
unless it states its own; NVIDIA's texts (name, impact, recovery) stay as the guide has them.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge.packaged import packaged_text, yaml_mapping
from fleetfix.knowledge.xid import Severity


class SxidKind(enum.StrEnum):
    """Which of the Fabric Manager guide's SXid tables lists the code."""

    NON_FATAL = "non_fatal"
    FATAL = "fatal"
    ALWAYS_FATAL = "always_fatal"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class SxidKindInfo:
    """One of the guide's tables: NVIDIA's title and text, and the fleetfix defaults it sets."""

    kind: SxidKind
    title: str
    text: str
    severity: Severity
    fleetfix_action: str
    fleetfix_playbook: str | None


@dataclass(frozen=True, slots=True)
class SxidInfo:
    """One SXid: NVIDIA's columns (None where the guide has no text) plus fleetfix's."""

    code: int
    name: str | None
    kind: SxidKind
    impact: str | None
    recovery: str | None
    other: str | None
    """NVIDIA's "Other Guest VM Impact"."""
    note: str | None
    severity: Severity
    fleetfix_action: str
    fleetfix_playbook: str | None


@dataclass(frozen=True, slots=True)
class SxidCatalog:
    """The versioned SXid table; look entries up with `get`."""

    version: str
    source: str
    entries: Mapping[int, SxidInfo]
    kinds: Mapping[SxidKind, SxidKindInfo]
    actions: Mapping[str, str]

    def get(self, code: int) -> SxidInfo | None:
        """The entry for `code`, or None when the table does not list it."""
        return self.entries.get(code)

    @property
    def codes(self) -> tuple[int, ...]:
        """Every SXid in the table, ascending."""
        return tuple(sorted(self.entries))

    def action_text(self, action: str) -> str | None:
        """What a fleetfix action asks of an operator."""
        return self.actions.get(action)


@functools.cache
def sxid_catalog() -> SxidCatalog:
    """The packaged table (knowledge/sxid.yml), loaded once: it is immutable package data.

    Raises:
        KnowledgeError: the packaged file is missing or malformed (a packaging bug).
    """
    return load_sxid_catalog(packaged_text("sxid.yml", "sxid catalog"))


def load_sxid_catalog(text: str) -> SxidCatalog:
    """Build the table from sxid.yml text (pure).

    Raises:
        KnowledgeError: the text is not valid YAML or breaks the table's schema.
    """
    document = yaml_mapping(text, "sxid catalog")
    actions = _actions(document.get("actions"))
    kinds = _kinds(document.get("kinds"), actions)
    entries: dict[int, SxidInfo] = {}
    for raw in _mapping_list(document.get("sxids"), "sxids"):
        for info in _entries(raw, kinds, actions):
            if info.code in entries:
                raise KnowledgeError(f"sxid catalog: SXid {info.code} is listed twice")
            entries[info.code] = info
    return SxidCatalog(
        version=_text(document, "version", "table"),
        source=_text(document, "source", "table"),
        entries=MappingProxyType(entries),
        kinds=MappingProxyType(kinds),
        actions=actions,
    )


def _actions(raw: Any) -> Mapping[str, str]:
    if not isinstance(raw, dict) or not raw:
        raise KnowledgeError("sxid catalog: 'actions' must map action names to text")
    return MappingProxyType({str(k): _text(raw, k, "actions") for k in raw})


def _kinds(raw: Any, actions: Mapping[str, str]) -> dict[SxidKind, SxidKindInfo]:
    if not isinstance(raw, dict) or set(raw) != {str(k) for k in SxidKind}:
        names = ", ".join(SxidKind)
        raise KnowledgeError(f"sxid catalog: 'kinds' must describe exactly: {names}")
    kinds = {}
    for kind in SxidKind:
        where = f"kind {kind}"
        spec = _mapping(raw[kind], where)
        kinds[kind] = SxidKindInfo(
            kind=kind,
            title=_text(spec, "title", where),
            text=_text(spec, "text", where),
            severity=_severity(spec.get("severity"), where),
            fleetfix_action=_action(spec.get("fleetfix_action"), actions, where),
            fleetfix_playbook=_optional_text(spec, "fleetfix_playbook", where),
        )
    return kinds


def _entries(
    raw: Mapping[str, Any], kinds: Mapping[SxidKind, SxidKindInfo], actions: Mapping[str, str]
) -> list[SxidInfo]:
    codes = _codes(raw)
    where = f"SXid {codes[0]}"
    try:
        base = kinds[SxidKind(str(raw.get("kind")))]
    except ValueError as exc:
        raise KnowledgeError(f"sxid catalog: {where}: bad kind {raw.get('kind')!r}") from exc
    # An entry's own `fleetfix_playbook: null` means no playbook, not "the kind's".
    own = {"fleetfix_playbook": raw.get("fleetfix_playbook", base.fleetfix_playbook)}
    first = SxidInfo(
        code=codes[0],
        name=_optional_text(raw, "name", where),
        kind=base.kind,
        impact=_optional_text(raw, "impact", where),
        recovery=_optional_text(raw, "recovery", where),
        other=_optional_text(raw, "other", where),
        note=_optional_text(raw, "note", where),
        severity=_severity(raw.get("severity", base.severity), where),
        fleetfix_action=_action(raw.get("fleetfix_action", base.fleetfix_action), actions, where),
        fleetfix_playbook=_optional_text(own, "fleetfix_playbook", where),
    )
    return [replace(first, code=code) for code in codes]


def _codes(raw: Mapping[str, Any]) -> list[int]:
    # NVIDIA lists some SXids together on one row (the single-bit ECC ones): `codes: [...]`.
    if ("code" in raw) == ("codes" in raw):
        raise KnowledgeError(f"sxid catalog: each entry needs 'code' or 'codes': {dict(raw)!r}")
    codes = [raw["code"]] if "code" in raw else raw["codes"]
    if not isinstance(codes, list) or not codes or not all(type(c) is int for c in codes):
        raise KnowledgeError(f"sxid catalog: SXid codes must be integers: {codes!r}")
    return codes


def _severity(value: Any, where: str) -> Severity:
    try:
        return Severity(str(value))
    except ValueError as exc:
        raise KnowledgeError(f"sxid catalog: {where}: bad severity {value!r}") from exc


def _action(value: Any, actions: Mapping[str, str], where: str) -> str:
    if value not in actions:
        raise KnowledgeError(f"sxid catalog: {where}: unknown fleetfix_action {value!r}")
    return str(value)


def _mapping_list(raw: Any, name: str) -> list[Mapping[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise KnowledgeError(f"sxid catalog: '{name}' must be a non-empty list")
    return [_mapping(item, name) for item in raw]


def _mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise KnowledgeError(f"sxid catalog: {where}: expected a mapping, got {raw!r}")
    return raw


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise KnowledgeError(f"sxid catalog: {where}: '{key}' must be non-empty text")
    return " ".join(value.split())


def _optional_text(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    return None if raw.get(key) is None else _text(raw, key, where)
