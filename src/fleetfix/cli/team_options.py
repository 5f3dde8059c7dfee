"""Options a team's runs share: where metrics go, which webhooks hear about a run, which
extra-vars are secret. Each observer subscribes to the run's events and is finished (its last
write made, its last message delivered) when the run ends, also when it is interrupted."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable
from typing import Protocol

from fleetfix.events import Event
from fleetfix.journal import Journal


class RunObserver(Protocol):
    """A subscriber to a run's events that has work to finish when the run ends."""

    def __call__(self, event: Event) -> None: ...

    def finish(self) -> Awaitable[None]:
        """Make the last write, deliver what is pending (bounded in time); never raises."""
        ...


def add_team_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument_group("team")


def run_observers(args: argparse.Namespace, journal: Journal) -> list[RunObserver]:
    """The observers the options ask for, in the order they hear each event."""
    return []
