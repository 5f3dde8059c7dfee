"""Topology safety during a run: availability caps per domain and holds on suspect domains."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fleetfix.actions.base import Action
from fleetfix.events import EventBus, FindingRaised, HostBackInService, HostOutOfService
from fleetfix.results import RunResult, failed_and_considered
from fleetfix.topology import AvailabilityLedger, Topology
from fleetfix.topology.caps import DomainCap
from fleetfix.topology.findings import Finding, correlated_failures, held_hosts


@dataclass(slots=True)
class Safety:
    """What the run knows about the fleet's shape and what it has taken out of service.

    A host is out of service from its first disruptive action until its batch ends without it
    failing; a host that failed stays out for the rest of the run (it is drained or broken).
    """

    topology: Topology | None
    bus: EventBus
    override_holds: bool = False
    reserve: Callable[[str, Sequence[DomainCap]], str | None] | None = None
    """Counts a host against the fleet-wide repair budget and its domains' caps, shared by
    every run and controller through the journal, in one transaction: None if admitted, else
    why not."""
    budget: int | None = None
    """The repair budget when no journal keeps it (fleetfix as a library): this run's hosts."""
    fleet: Topology | None = None
    """The whole inventory's shape, beyond this run's hosts (--limit): a cap counts every
    member of a domain. None: the run's own topology."""
    out: set[str] = field(default_factory=set)
    held: set[str] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)
    _ledger: AvailabilityLedger | None = None

    def start_play(self, caps: Mapping[str, int]) -> None:
        """A new play brings its own caps; hosts still out of service count against them."""
        self._ledger = None
        if caps and self.topology is not None:
            self._ledger = AvailabilityLedger(self.topology, caps)
            for host in self.out:
                if host in self.topology.hosts():
                    self._ledger.take(host)

    def batches(self, hosts: Sequence[str], size: int) -> list[list[str]] | None:
        """Cap-respecting, canary-first batches; None when the play has no caps."""
        if self._ledger is None:
            return None
        return self._ledger.plan_order(list(hosts), canaries=1, max_batch=size)

    def capped_members(self, host: str) -> list[str]:
        """Every host sharing a capped domain with `host` (whose Slurm state the caps need);
        empty when the play has no caps or the host no capped domain."""
        if self._ledger is None or self.topology is None:
            return []
        whole = self.fleet or self.topology
        found: set[str] = set()
        for kind, name in self._ledger.capped_domains(host):
            found.update(whole.members(kind, name))
        found.discard(host)
        return sorted(found)

    def blocked(self, host: str, scheduler_out: frozenset[str] = frozenset()) -> str | None:
        """Why `host` may not be taken out now by what this run knows (a suspect domain, its
        caps with `scheduler_out` counted); None when only the fleet-wide checks remain.

        `scheduler_out`: nodes of its capped domains the scheduler has out for any reason (a
        human's drain, another controller's, a node down), read just before: they count
        against the caps though this run never touches them."""
        if host in self.out:
            return None
        if host in self.held and not self.override_holds:
            return f"held: {self.why_held(host)} (override with --override-holds)"
        for domain in self.domain_caps(host, scheduler_out):
            out = self.known_out(domain, host)
            if len(out) >= domain.cap:
                shown = ", ".join(sorted(out)[:5])
                return f"held: max_unavailable_per reached in {domain.label} ({shown} out)"
        return None

    def known_out(self, domain: DomainCap, host: str) -> frozenset[str]:
        """The domain's hosts out by this run or by the scheduler, `host` aside."""
        return frozenset((self.out | domain.scheduler_out) & domain.members - {host})

    def admit(
        self, host: str, *, dry: bool, scheduler_out: frozenset[str] = frozenset()
    ) -> str | None:
        """May `host` take a disruptive action now? None = yes (and it is now out of service):
        `blocked`, then the repair budget and the caps as every controller sharing the journal
        counts them, in one transaction."""
        if host in self.out:
            return None
        held = self.blocked(host, scheduler_out)
        if held is not None:
            return held
        over = self._over_budget(host, self.domain_caps(host, scheduler_out), dry=dry)
        if over is not None:
            return f"held: {over}"
        if not dry:
            self._take(host)
        return None

    def domain_caps(
        self, host: str, scheduler_out: frozenset[str] = frozenset()
    ) -> list[DomainCap]:
        """The host's capped domains with their members and caps (none without caps)."""
        if self._ledger is None or self.topology is None:
            return []
        caps = self._ledger.caps
        whole = self.fleet or self.topology
        return [
            DomainCap(
                f"{kind} {name}",
                frozenset(whole.members(kind, name)),
                caps[kind],
                scheduler_out,
            )
            for kind, name in self._ledger.capped_domains(host)
        ]

    def _over_budget(self, host: str, domains: Sequence[DomainCap], *, dry: bool) -> str | None:
        if self.reserve is not None:
            # --check writes nothing to the journal: a planned action takes no fleet-wide place
            return None if dry else self.reserve(host, domains)
        if self.budget is not None and len(self.out) >= self.budget:
            return (
                f"repair budget reached: {len(self.out)} hosts out of service (limit {self.budget})"
            )
        return None

    def replay_out(self, host: str, action: Action) -> None:
        """A resumed run replays a disruptive action the interrupted run finished: the host is
        out of service again for the caps, without asking (it already is)."""
        if action.disruptive and host not in self.out:
            self._take(host)

    def defer(self, host: str) -> None:
        """A deferred host waits for its jobs, drained: its place under the caps is freed."""
        if host in self.out:
            self.out.discard(host)
            if self._ledger is not None:
                self._ledger.release(host)

    def _take(self, host: str) -> None:
        self.out.add(host)
        domains: tuple[str, ...] = ()
        if self._ledger is not None:
            self._ledger.take(host)
            domains = tuple(f"{kind} {name}" for kind, name in self._ledger.capped_domains(host))
        self.bus.emit(HostOutOfService(host=host, domains=domains))

    def end_batch(self, hosts: Sequence[str], failed: set[str]) -> None:
        """Hosts of the batch that did not fail are back in service."""
        for host in hosts:
            if host in self.out and host not in failed:
                self.out.discard(host)
                if self._ledger is not None:
                    self._ledger.release(host)
                self.bus.emit(HostBackInService(host=host))

    def correlate(self, result: RunResult) -> None:
        """Look for failures concentrated in one domain; hold disruptive actions there."""
        if self.topology is None:
            return
        failed, considered = failed_and_considered(result.results)
        known = {f"{f.kind}/{f.domain}" for f in self.findings}
        for finding in correlated_failures(self.topology, failed, considered):
            if f"{finding.kind}/{finding.domain}" in known:
                continue
            self.findings.append(finding)
            self.bus.emit(
                FindingRaised(
                    kind=finding.kind,
                    domain=finding.domain,
                    message=finding.message,
                    hosts=finding.failed,
                    hold=finding.hold_disruptive,
                )
            )
        self.held = held_hosts(self.topology, self.findings)

    def why_held(self, host: str) -> str:
        for finding in self.findings:
            if self.topology is not None and host in self.topology.members(
                finding.kind, finding.domain
            ):
                return f"suspect {finding.kind} {finding.domain}"
        return "suspect shared component"
