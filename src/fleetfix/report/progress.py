"""The live view on a terminal: hosts done of the play's hosts, what each running host is
doing, and the slowest one with how long it has been on its step.

    view = LiveProgress()
    bus.subscribe(view)            # it only keeps state; ConsoleView draws it with rich Live
    console.print(view.renderable(now=time.time()))

Counts are of hosts, never of host-steps: the bar cannot pass its total ("99/50" before, when a
task bar counted the results of hosts that walked the play on their own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from fleetfix.events import (
    BatchStarted,
    Event,
    HostLeft,
    HostStepFinished,
    HostStepStarted,
    PlayFinished,
    PlayStarted,
    RunStarted,
)

RUNNING_ROWS = 8
"""Running hosts listed, slowest first; the rest are counted."""
BAR_WIDTH = 30


PARKED_KEY = "fleetfix_parked"
"""The key of a parking step's result data (engine/parking.py's PARK_KEY: the report does not
import the engine): the host waits for its jobs, its step goes on after the result."""


@dataclass(slots=True)
class _Running:
    step: str
    since: float
    parked: bool = False


@dataclass(slots=True)
class LiveProgress:
    """The live view's state, fed engine events; `renderable(now)` draws it."""

    play: str = ""
    hosts: tuple[str, ...] = ()
    done: set[str] = field(default_factory=set)
    running: dict[str, _Running] = field(default_factory=dict)
    batch: tuple[str, ...] = ()
    started: float | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.started = event.at
        elif isinstance(event, PlayStarted):
            self.play, self.hosts, self.batch = event.name, event.hosts, ()
            self.done, self.running = set(), {}
        elif isinstance(event, BatchStarted):
            self._batch(event)
        elif isinstance(event, HostStepStarted):
            self.running[event.host] = _Running(event.step, event.at)
        elif isinstance(event, HostStepFinished) and not event.retrying:
            self._step_done(event)
        elif isinstance(event, HostLeft):
            self._finish_host(event.host)
        elif isinstance(event, PlayFinished):
            for host in self.hosts:
                self._finish_host(host)

    def _step_done(self, event: HostStepFinished) -> None:
        """The host is between steps; one parked waits on its step, which is not over: it
        stays listed, timed from the step's start."""
        host = event.result.host
        running = self.running.get(host)
        if running is not None and isinstance(event.result.data.get(PARKED_KEY), Mapping):
            running.parked = True
        else:
            self.running.pop(host, None)

    def _batch(self, event: BatchStarted) -> None:
        if event.revisit:  # parked hosts come back: not done after all
            self.done.difference_update(event.hosts)
            return
        for host in self.batch:  # batches run one after another: the last one is over,
            if not self._parked(host):  # but for its parked hosts
                self._finish_host(host)
        self.batch = event.hosts

    def _parked(self, host: str) -> bool:
        running = self.running.get(host)
        return running is not None and running.parked

    def _finish_host(self, host: str) -> None:
        if host in self.hosts:
            self.done.add(host)
        self.running.pop(host, None)

    @property
    def counts(self) -> tuple[int, int]:
        """(hosts done, hosts in the play): done never passes the total."""
        return len(self.done), len(self.hosts)

    def slowest(self, now: float) -> tuple[str, str, float] | None:
        """(host, step, seconds on it) of the host longest on its current step."""
        if not self.running:
            return None
        host, running = min(self.running.items(), key=lambda item: (item[1].since, item[0]))
        step = running.step + (", waiting for its jobs" if running.parked else "")
        return host, step, max(0.0, now - running.since)

    def renderable(self, now: float) -> RenderableType:
        done, total = self.counts
        head = Text.assemble((self.play or "starting", "bold"), "  ")
        bar = ProgressBar(total=max(total, 1), completed=done, width=BAR_WIDTH)
        counts = Text(f"  {done}/{total} hosts done · {len(self.running)} at work")
        if self.started is not None:
            counts.append(f" · {_seconds(now - self.started)}", "dim")
        line = Table.grid()
        line.add_row(head, bar, counts)
        return Group(line, *self._rows(now))

    def _rows(self, now: float) -> list[RenderableType]:
        ordered = sorted(self.running.items(), key=lambda item: (item[1].since, item[0]))
        rows: list[RenderableType] = []
        for host, running in ordered[:RUNNING_ROWS]:
            waiting = " (parked: waiting for its jobs)" if running.parked else ""
            rows.append(
                Text.assemble(
                    ("  " + host, "bold"),
                    f"  {running.step}{waiting}  ",
                    (_seconds(now - running.since), "dim"),
                )
            )
        hidden = len(ordered) - RUNNING_ROWS
        if hidden > 0:
            rows.append(Text(f"  ... and {hidden} more at work", "dim"))
        slow = self.slowest(now)
        if slow is not None:
            host, step, seconds = slow
            rows.append(Text(f"slowest: {host}: {step}, {_seconds(seconds)}", "yellow"))
        return rows


def _seconds(seconds: float) -> str:
    whole = int(max(0.0, seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    return f"{minutes} min {rest:02d} s"


__all__ = ["LiveProgress"]
