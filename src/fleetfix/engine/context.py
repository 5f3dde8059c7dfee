"""Run-wide and per-host state the engine threads explicitly through every call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fleetfix.actions.base import Action
from fleetfix.engine.parking import Parking
from fleetfix.engine.runhosts import RuntimeHosts
from fleetfix.engine.safety import Safety
from fleetfix.events import EventBus
from fleetfix.plain import to_data
from fleetfix.playbook.model import Step
from fleetfix.plugins import Registry
from fleetfix.probes.base import Probe
from fleetfix.results import HostStats, ResumeState, RunResult, StepResult
from fleetfix.topology.caps import DomainCap
from fleetfix.transport.base import DEFAULT_COMMAND_TIMEOUT, ConnectionSpec, Transport
from fleetfix.transport.pool import DEFAULT_RETRY_DELAYS, ConnectionPool, PooledConnection

if TYPE_CHECKING:
    from fleetfix.engine.cap_slots import CapSlot
    from fleetfix.engine.node_lease import NodeLeases
    from fleetfix.playbook.role_loader import RoleLoader

SpecFactory = Callable[[str, Mapping[str, Any]], ConnectionSpec]
"""(host name, merged host vars) -> how to reach it."""


class FleetMemory(Protocol):
    """What outlives a run (the journal): attempts, who is out of service, GPUs seen."""

    def action_times(self, host: str, action: str, since: float) -> list[float]:
        """When `action` was started on `host` since `since` (epoch seconds), by any run."""
        ...

    def take_out(
        self, host: str, action: str, limit: int | None, domains: Sequence[DomainCap] = ()
    ) -> str | None:
        """Count `host` against the repair budget and its domains' caps, across every
        controller sharing the journal: None if admitted, else why not."""
        ...

    def gpus_seen(self, host: str) -> int | None:
        """The most GPUs `host` ever showed fleetfix."""
        ...

    def stranded(self, hosts: Sequence[str]) -> dict[str, str]:
        """Hosts an abandoned run took out of service and left: host -> run."""
        ...

    def abandoned(self, run_id: str) -> bool:
        """Whether `run_id` stopped in the middle (killed, crashed, interrupted), its
        controller gone; False for a run that finished, or one the journal does not know."""
        ...

    def settled(self, host: str) -> None:
        """`host` no longer counts against the repair budget: its state is settled."""
        ...

    def mark_undelivered(self, record: int) -> None:
        """An interrupted action proved never to have happened no longer counts."""
        ...


StepGate = Callable[[str], Awaitable[bool]]
"""--step: asked before each step with its name; False skips it."""


class Templating(Protocol):
    """What the engine needs from the condition/template layer (playbook.conditions.Templar)."""

    def evaluate(self, expression: str, variables: Mapping[str, Any]) -> bool: ...

    def render(self, value: Any, variables: Mapping[str, Any]) -> Any: ...

    def broken(self, reason: str) -> Any: ...

    def render_file(
        self,
        text: str,
        variables: Mapping[str, Any],
        *,
        name: str,
        trim_blocks: bool = True,
        lstrip_blocks: bool = False,
        newline_sequence: str = "\n",
    ) -> str: ...

    def resolve(
        self, definitions: Mapping[str, Any], variables: Mapping[str, Any]
    ) -> dict[str, Any]: ...


class HostSource(Protocol):
    """What the engine needs from an inventory."""

    def host_vars(self, host: str) -> dict[str, Any]: ...

    def groups_of(self, host: str) -> list[str]: ...

    def group_names(self) -> list[str]: ...

    def hosts_in(self, group: str) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Run-wide settings, mostly straight from the command line."""

    forks: int = 50
    check: bool = False
    diff: bool = False
    tags: frozenset[str] = frozenset()
    skip_tags: frozenset[str] = frozenset()
    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    become: bool = False
    become_user: str = "root"
    verbosity: int = 0
    """-v count: a `debug` step with `verbosity: N` above it is skipped, as in Ansible."""
    reconnect_poll: float = 2.0
    reconnect_delays: tuple[float, ...] = DEFAULT_RETRY_DELAYS
    """Seconds before each further try of a read-only command whose connection dropped, on a
    fresh connection; when the last drops too, the host is unreachable (transport/pool.py)."""
    resume: ResumeState = field(default_factory=ResumeState)
    """What the interrupted run did: finished host-steps are replayed, open intents verified."""
    memory: FleetMemory | None = None
    step_gate: StepGate | None = None
    gathering: str = "explicit"
    """Ansible's DEFAULT_GATHERING (ANSIBLE_GATHERING, ansible.cfg): which plays gather facts
    first (facts/step.py `gathering_step`). The command line's default is Ansible's,
    'implicit'; a program that builds RunOptions itself asks for facts (`gather_facts: true`,
    or gathering='implicit')."""
    force_handlers: bool = False
    """--force-handlers (or ANSIBLE_FORCE_HANDLERS, ansible.cfg): handlers run on hosts that
    failed too, unless the play says force_handlers: false."""
    error_on_missing_handler: bool = True
    """ANSIBLE_ERROR_ON_MISSING_HANDLER (ansible.cfg error_on_missing_handler): a notify that
    names no handler stops the run (exit 1); false: a warning, and the run goes on."""
    override_holds: bool = False
    run_id: str = ""
    leased: Mapping[str, str] = field(default_factory=dict)
    """Hosts another live run holds -> who: left out of this run, each named (exit 6)."""
    repair_budget: int | None = None
    """At most this many hosts out of service by fleetfix at once, across runs (None: no cap)."""
    hands_off: Mapping[str, str] = field(default_factory=dict)
    """host -> why no disruptive action may touch it (the hands-off list)."""
    override_ownership: frozenset[str] = frozenset()
    """Hosts an operator explicitly allowed fleetfix to act on although someone else owns them."""
    operator: str = ""
    keep_facts: bool = False
    """Keep each probe step's facts (as data) in RunResult.results to the end of the run, for
    a command that prints them all then (`fleetfix probe`); otherwise only the host's latest
    typed facts are kept."""
    """Who runs fleetfix (journaled with every ownership override)."""
    limit: str | None = None
    """--limit: applied again to the hosts add_host and group_by bring into a play."""
    resume_grace: float = 20.0
    """How long after an interrupted reboot's intent a resumed run waits for the boot id to
    change before concluding the reboot was never delivered."""
    task_loader: Callable[[str], tuple[Step, ...]] | None = None
    """Reads a task file an include_tasks names with a template (known per host at run time);
    raises PlaybookError. None: such includes fail, saying so."""
    role_loader: RoleLoader | None = None
    """Reads the role an include_role names with a template (per host at run time); raises
    PlaybookError. None: such includes fail, saying so."""
    inventory_loader: Callable[[], HostSource] | None = None
    """Reads the inventory's sources again for `meta: refresh_inventory` (raises
    InventoryError). None: such a step fails, saying so."""
    node_lease_seconds: float | None = 600.0
    """How long a lease on a node lasts unless renewed (engine/node_lease.py); None: the run
    takes no node leases."""
    node_lease_renew: float = 60.0
    """How often held node leases are renewed (at most a quarter of node_lease_seconds)."""
    node_lease_root: str = "/var/lib/fleetfix"
    """Where on each node the lease lives."""
    run_alive: Callable[[str], bool | None] | None = None
    """Whether a run is alive, as a shared journal knows (None: unknown): a node lease held by
    a run known dead may be taken over before it expires."""


class ProbeData(Mapping[str, Any]):
    """The latest facts of each probe on a host as plain data (what health rules, verdicts and
    `register:` read), made from the typed facts each time it is read: the typed facts are the
    one copy a run keeps (a resumed run's replayed facts are data already)."""

    __slots__ = ("_latest", "version")

    def __init__(self) -> None:
        self._latest: dict[str, Any] = {}
        self.version = 0
        """Counts the changes: what is worked out from the facts (engine/health.py's
        problems) is kept until it moves."""

    def keep(self, name: str, facts: Any) -> None:
        self._latest[name] = facts
        self.version += 1

    def drop(self, name: str) -> None:
        self._latest.pop(name, None)
        self.version += 1

    def field(self, name: str, key: str) -> Any:
        """One field of a probe's latest facts as data (None when absent), without making the
        data of the rest: `field("nvidia_smi", "gpu_count")`."""
        facts = self._latest.get(name)
        if facts is None:
            return None
        if isinstance(facts, Mapping):
            return to_data(facts.get(key))
        return to_data(getattr(facts, key, None))

    def __getitem__(self, name: str) -> Any:
        return to_data(self._latest[name])

    def __contains__(self, name: object) -> bool:
        return name in self._latest

    def __iter__(self) -> Iterator[str]:
        return iter(self._latest)

    def __len__(self) -> int:
        return len(self._latest)


@dataclass(slots=True)
class HostState:
    """One host's life in a run: its variables, failure flags and notified handlers."""

    name: str
    base_vars: dict[str, Any]
    facts: dict[str, Any] = field(default_factory=dict)  # register and set_fact results
    gathered: dict[str, Any] = field(default_factory=dict)
    """Facts setup/gather_facts stored (Ansible's fact cache): above inventory, below play vars."""
    included_vars: dict[str, Any] = field(default_factory=dict)
    """include_vars results: above play and step vars, below set_fact (ansible-core 2.19)."""
    failed: bool = False
    unreachable: bool = False
    ended: bool = False  # meta: end_host
    notified: set[str] = field(default_factory=set)
    cleared_failures: int = 0
    """Failed steps a `meta: clear_host_errors` cleared: the recap keeps them, the verdict
    and the exit code do not (as Ansible's)."""
    probe_facts: dict[str, Any] = field(default_factory=dict)  # latest typed facts per probe
    probe_data: ProbeData = field(default_factory=ProbeData)  # the same, as data
    problems_seen: tuple[Hashable, tuple[str, ...]] | None = None
    """engine/health.py's current problems, with what they were worked out from (the facts'
    version, planned, the probe failures and GPU counts)."""
    probe_failures: dict[str, str] = field(default_factory=dict)  # probe -> why it last failed
    gpus_seen: int | None = None  # the most GPUs any probe showed in this run
    journal_gpus_seen: int | None = None
    """The most GPUs any earlier run saw (the journal), read once: engine/gpus.py `most_seen`."""
    journal_gpus_read: bool = False
    last_failure: tuple[Step, StepResult] | None = None
    """The last step that FAILED on this host, with its result: a rescue's
    ansible_failed_task/result, and the hold a safety gate put on it (verdict.py)."""
    last_trouble: str = ""
    """`step: message` of the last step that failed *or found the host unreachable*: the one
    line the end-of-run verdict says of the host (a host unreachable has no last_failure)."""
    """'STEP: message' of the host's last failed or unreachable step (its verdict's why)."""
    actions_done: list[str] = field(default_factory=list)
    """The actions done on the host in this run that did not fail, in order (its verdict)."""
    changed_node: bool = False
    """A step changed the node other than by taking it out of or back into service."""
    templated_vars: frozenset[str] | None = None
    """Names of `base_vars` whose values are templates (found once, reset when they change)."""

    @property
    def active(self) -> bool:
        return not (self.failed or self.unreachable or self.ended)


class Connections:
    """One reused connection per host, opened on first use, held within the descriptor budget
    (transport/pool.py: least recently used idle ones released, reopened transparently)."""

    def __init__(self, transport: Transport) -> None:
        self._pool = ConnectionPool(transport)

    async def get(self, spec: ConnectionSpec) -> PooledConnection:
        return await self._pool.get(spec)

    async def drop(self, name: str) -> None:
        """Forget a host's connection (lost, or the host is rebooting)."""
        await self._pool.release(name)

    async def close_all(self) -> None:
        await self._pool.aclose()


@dataclass(slots=True)
class RunContext:
    """Everything a step needs, passed explicitly (no globals)."""

    inventory: HostSource
    transport: Transport
    templar: Templating
    bus: EventBus
    options: RunOptions
    spec_factory: SpecFactory
    probes: Registry[Probe[Any]]
    actions: Registry[Action]
    connections: Connections
    safety: Safety
    result: RunResult = field(default_factory=RunResult)
    hosts: dict[str, HostState] = field(default_factory=dict)
    runtime_hosts: RuntimeHosts = field(default_factory=RuntimeHosts)
    forks: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(50))
    parking: Parking = field(default_factory=Parking)
    """Busy hosts parked in the current play (engine/parking.py)."""
    node_leases: NodeLeases | None = None
    """The leases this run takes on nodes (engine/node_lease.py; None: node leases are off)."""
    cap_slots: list[CapSlot] = field(default_factory=list)
    """Slots this run holds on its capped domains' cap nodes (engine/cap_slots.py)."""

    def stats(self, host: str) -> HostStats:
        return self.result.stats.setdefault(host, HostStats())

    def host_state(self, name: str) -> HostState:
        if name not in self.hosts:
            self.hosts[name] = HostState(name, self.inventory.host_vars(name))
        return self.hosts[name]
