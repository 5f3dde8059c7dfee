"""Operator tools around the engine: probe, parse, xid (filled as the probes land)."""

from __future__ import annotations

from typing import Any


def add_parsers(sub: Any) -> None:
    return None
