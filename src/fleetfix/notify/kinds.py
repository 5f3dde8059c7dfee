"""The kinds of notification a team can ask for: the words `--notify-on` takes.

Apart from model.py so that reading the option (every `fleetfix run`) loads no more than this.
"""

from __future__ import annotations

import enum


class Kind(enum.StrEnum):
    """The events a team hears about; the words `--notify-on` takes."""

    RMA = "rma"
    HOLD = "hold"
    BUDGET_REFUSED = "budget_refused"
    RUN_FINISHED = "run_finished"


ALL_KINDS = frozenset(Kind)

__all__ = ["ALL_KINDS", "Kind"]
