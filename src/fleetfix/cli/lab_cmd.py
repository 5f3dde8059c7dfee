"""`fleetfix lab ...`: the simulated GPU cluster's own commands (up, down, status, truth, ...)."""

from __future__ import annotations

from typing import Any

from fleetfix.lab.cli import add_lab_parser


def add_parser(sub: Any) -> None:
    add_lab_parser(sub)
