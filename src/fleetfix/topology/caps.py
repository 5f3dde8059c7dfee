"""The availability ledger: `max_unavailable_per` caps and canary-first batch planning.

A play's `max_unavailable_per: {rack: 1, leaf: 2}` means: never more than one host of a rack,
nor more than two hosts of a leaf, out of service at once. A host without a domain of a capped
kind is not limited by that cap. The ledger tracks who is out (`take`/`release`) for the engine
and plans batches (`plan_order`) that respect the caps by construction.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fleetfix.errors import PlaybookError
from fleetfix.topology.graph import DOMAIN_KINDS, Topology

Domain = tuple[str, str]  # (kind, name)


@dataclass(frozen=True, slots=True)
class DomainCap:
    """A `max_unavailable_per` cap as the fleet transaction checks it: at most `cap` of
    `members` out of service at once, counting every controller's (the journal's rows) and
    every node the scheduler has out for any reason (`scheduler_out`, read just before)."""

    label: str  # "rack r01"
    members: frozenset[str]
    cap: int
    scheduler_out: frozenset[str] = frozenset()


class AvailabilityLedger:
    """Who is out of service now, and whether one more host may go, under per-domain caps."""

    def __init__(self, topology: Topology, caps: Mapping[str, int]) -> None:
        """Raises PlaybookError for an unknown domain kind or a cap below 1."""
        self._topology = topology
        self._caps = _checked(caps)
        self._out: set[str] = set()
        self._load: Counter[Domain] = Counter()

    @property
    def caps(self) -> dict[str, int]:
        return dict(self._caps)

    def capped_domains(self, host: str) -> list[Domain]:
        """The host's domains that a cap applies to (none for a host the topology lacks)."""
        try:
            domains = self._topology.domains_of(host)
        except KeyError:
            return []
        return [(kind, domains[kind]) for kind in self._caps if kind in domains]

    def can_take(self, host: str) -> bool:
        """Whether taking `host` out keeps every one of its domains within its cap."""
        return host not in self._out and not self.full_domains(host)

    def full_domains(self, host: str) -> list[Domain]:
        """The host's domains already at their cap (why `can_take` says no)."""
        return [d for d in self.capped_domains(host) if self._load[d] >= self._caps[d[0]]]

    def take(self, host: str) -> None:
        """Mark `host` out of service.

        Raises:
            ValueError: it is already out, or a domain of it is at its cap (call `can_take`).
        """
        if host in self._out:
            raise ValueError(f"{host} is already out of service")
        full = self.full_domains(host)
        if full:
            names = ", ".join(f"{kind} {name}" for kind, name in full)
            raise ValueError(f"taking {host} would exceed max_unavailable_per for {names}")
        self._out.add(host)
        self._load.update(self.capped_domains(host))

    def release(self, host: str) -> None:
        """Return `host` to service. Raises ValueError when it was not out."""
        if host not in self._out:
            raise ValueError(f"{host} is not out of service")
        self._out.remove(host)
        self._load.subtract(self.capped_domains(host))

    def out_of_service(self) -> set[str]:
        return set(self._out)

    def plan_order(
        self, hosts: Iterable[str], canaries: int = 1, max_batch: int | None = None
    ) -> list[list[str]]:
        """Canary-first batches that each respect the caps.

        The first batch holds the first `canaries` hosts (in the given order) that fit together;
        the rest go, in order, into the first later wave with room (first fit), so there are
        few waves and the plan is deterministic. Each batch is planned as if every other host
        were in service (the engine releases a batch before taking the next); `max_batch`
        bounds every batch (e.g. from `serial`). Duplicate hosts count once.

        Raises:
            ValueError: canaries < 0 or max_batch < 1.
        """
        if canaries < 0 or (max_batch is not None and max_batch < 1):
            raise ValueError("canaries must be >= 0 and max_batch >= 1")
        pending = list(dict.fromkeys(hosts))
        batches: list[list[str]] = []
        if canaries and pending:
            canary = self._wave(min(canaries, max_batch or canaries))
            for host in pending:
                if canary.fits(host):
                    canary.add(host)
            batches.append(canary.hosts)
            pending = [h for h in pending if h not in set(canary.hosts)]
        waves: list[_Wave] = []
        for host in pending:
            wave = next((w for w in waves if w.fits(host)), None)
            if wave is None:
                wave = self._wave(max_batch)
                waves.append(wave)
            wave.add(host)
        return batches + [wave.hosts for wave in waves]

    def _wave(self, size: int | None) -> _Wave:
        return _Wave(self, size)


@dataclass(slots=True)
class _Wave:
    """One batch being filled: its hosts and the load it puts on each capped domain."""

    ledger: AvailabilityLedger
    size: int | None
    hosts: list[str] = field(default_factory=list)
    load: Counter[Domain] = field(default_factory=Counter)

    def fits(self, host: str) -> bool:
        if self.size is not None and len(self.hosts) >= self.size:
            return False
        caps = self.ledger.caps
        return all(self.load[d] < caps[d[0]] for d in self.ledger.capped_domains(host))

    def add(self, host: str) -> None:
        self.hosts.append(host)
        self.load.update(self.ledger.capped_domains(host))


def _checked(caps: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, cap in caps.items():
        if kind not in DOMAIN_KINDS:
            close = difflib.get_close_matches(kind, DOMAIN_KINDS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"one of {', '.join(DOMAIN_KINDS)}"
            raise PlaybookError(f"max_unavailable_per: unknown domain kind {kind!r}", hint=hint)
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise PlaybookError(
                f"max_unavailable_per: {kind} must be a whole number >= 1, not {cap!r}",
                hint="a cap of 0 would never let a host of that domain be worked on",
            )
        out[kind] = cap
    return out


__all__ = ["AvailabilityLedger"]
