"""`fleetfix lab ...`: delegates to the lab's own command module."""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any) -> None:
    return None
