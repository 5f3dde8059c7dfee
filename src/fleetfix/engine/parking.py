"""Parked hosts: a busy node whose drain is sent waits out of its batch while the play goes on.

An action's command that exits its `defer_rc` with time left to wait (`park_for`) parks the
host: its remaining steps in the batch are not run (it is taken out like an ended host, not
failed), it stays out of service under the caps, and the play looks at it again after each
batch, and after the last until its deadline (engine/revisit.py). Once its action's check
passes, the play runs again for it as a batch of its own; past the deadline it is deferred.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetfix.engine.hoststep import HostStep

PARKED = "parked"
"""The kind of an action outcome's `left` that parks the host instead of leaving it."""
PARK_KEY = "fleetfix_parked"
"""In a parking step's registered result: which action parked it, why, until when (epoch
seconds) and how long the whole wait is; a resumed run parks the host again until then."""


@dataclass(slots=True)
class Parked:
    """One parked host: the step that parked it (its action looks again) and its deadline."""

    hs: HostStep
    action: str
    why: str
    until: float
    wait: float
    """The whole wait the action asked for (its first look included), for the report."""

    @property
    def host(self) -> str:
        return self.hs.state.name

    def deferred(self, why: str = "") -> str:
        """Why the host is deferred in the end, once its wait is over (or cut short: `why`)."""
        cut = f": {why}" if why else f" after {self.wait:.0f}s"
        return f"deferred: {self.why}{cut}: the next run finishes the work"


def parked_data(action: str, why: str, until: float, wait: float) -> dict[str, Any]:
    """What a parking step keeps in its result (PARK_KEY)."""
    return {"action": action, "why": why, "until": until, "wait": wait}


def parked_from(hs: HostStep, data: Mapping[str, Any] | None) -> Parked | None:
    """The park a step's result describes; None when it describes none."""
    if not isinstance(data, Mapping):
        return None
    try:
        return Parked(
            hs, str(data["action"]), str(data["why"]), float(data["until"]), float(data["wait"])
        )
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(slots=True)
class Parking:
    """The hosts parked in the current play, and the batches they were parked in."""

    waiting: dict[str, Parked] = field(default_factory=dict)
    deadlines: dict[str, float] = field(default_factory=dict)
    """A host parked again in the same play (its play ran again and found it busy again)
    keeps its first deadline: a wait never grows by being looked at."""
    batches: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The batch a host was first parked in: a run of the play for it alone is judged with
    that batch by max_fail_percentage, as if it had never left it."""

    def start_play(self) -> None:
        self.waiting.clear()
        self.deadlines.clear()
        self.batches.clear()

    def park(self, parked: Parked, now: float) -> bool:
        """Park a host until its deadline (its first one in this play); False when that has
        passed already: then it is deferred, not parked."""
        host = parked.host
        parked.until = min(parked.until, self.deadlines.get(host, parked.until))
        self.deadlines[host] = parked.until
        if parked.until <= now:
            return False
        self.waiting[host] = parked
        return True

    def parked_in(self, batch: Iterable[str]) -> set[str]:
        """Hosts of `batch` parked now; the first batch a host is parked in is remembered."""
        hosts = list(batch)
        parked = {host for host in hosts if host in self.waiting}
        for host in parked:
            self.batches.setdefault(host, tuple(hosts))
        return parked

    def judged_with(self, hosts: Iterable[str]) -> list[str]:
        """The hosts a batch of revisited `hosts` is judged with: their first batches'."""
        judged = [h for host in hosts for h in self.batches.get(host, (host,))]
        return list(dict.fromkeys(judged))

    def pause(self, now: float, poll: float) -> float:
        """Seconds until the next look: `poll`, or less when a deadline comes first."""
        if not self.waiting:
            return 0.0
        soonest = min(p.until for p in self.waiting.values())
        return max(0.0, min(poll, soonest - now))
