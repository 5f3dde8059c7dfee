"""Hosts and groups a run adds (add_host, group_by), and which hosts a play runs on.

A host the operator's inventory does not list (one add_host added, or an implicit localhost)
gets every gate a listed host gets, and one more: no fleetfix action runs on it. The
journal's leases, the repair budget and the topology were all worked out from the inventory
before the run started, so an action there would escape them; and an implicit localhost is
the controller itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetfix.inventory import runtime
from fleetfix.inventory.model import Inventory
from fleetfix.transport.spec import CONNECTION_VARS

if TYPE_CHECKING:
    from fleetfix.engine.context import RunContext


@dataclass(slots=True)
class RuntimeHosts:
    """What add_host and group_by added so far in this run."""

    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    memberships: dict[str, list[str]] = field(default_factory=dict)
    parents: dict[str, list[str]] = field(default_factory=dict)
    base: Inventory | None = None  # the inventory before any addition
    first_listed: frozenset[str] | None = None
    """The hosts the inventory listed when the run started, once a refresh_inventory read it
    again (None: it was not)."""

    @property
    def changed(self) -> bool:
        return bool(self.hosts or self.memberships) or self.first_listed is not None


class LiveGroups(Mapping[str, list[str]]):
    """`groups`: each group's hosts as the run's inventory has them now, so what add_host and
    group_by add shows at once (as in Ansible); an implicit localhost is in none."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    def __getitem__(self, name: str) -> list[str]:
        if name not in self._ctx.inventory.group_names():
            raise KeyError(name)
        return self._ctx.inventory.hosts_in(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ctx.inventory.group_names())

    def __len__(self) -> int:
        return len(self._ctx.inventory.group_names())


def add_host(
    ctx: RunContext, name: str, groups: Sequence[str], host_vars: Mapping[str, Any]
) -> str | None:
    """Add (or extend) a host for the rest of the run; the reason when it is refused."""
    inventory = ctx.inventory
    if not isinstance(inventory, Inventory):
        return "add_host needs an inventory the run can extend"
    listed = name in inventory.hosts and name not in ctx.runtime_hosts.hosts
    redirected = sorted(set(host_vars) & CONNECTION_VARS)
    if (listed or name in inventory.implicit) and redirected:
        return (
            f"add_host may not change how {name}, a host of the inventory, is reached "
            f"({', '.join(redirected)}): fleetfix's leases and gates were taken for it as listed"
        )
    added = ctx.runtime_hosts
    if not listed:
        added.hosts.setdefault(name, {}).update(host_vars)
    for group in groups:
        added.memberships.setdefault(group, [])
        if name not in added.memberships[group]:
            added.memberships[group].append(name)
    _rebuild(ctx, name)
    return None


def group_by(ctx: RunContext, host: str, key: str, parents: Sequence[str]) -> str | None:
    """Put `host` in group `key` (under `parents`) for the rest of the run."""
    if not isinstance(ctx.inventory, Inventory):
        return "group_by needs an inventory the run can extend"
    added = ctx.runtime_hosts
    members = added.memberships.setdefault(key, [])
    if host not in members:
        members.append(host)
    known = added.parents.setdefault(key, [])
    known.extend(p for p in parents if p not in known)
    _rebuild(ctx, host)
    return None


def _rebuild(ctx: RunContext, host: str) -> None:
    added = ctx.runtime_hosts
    assert isinstance(ctx.inventory, Inventory)
    if added.base is None:
        added.base = ctx.inventory
    ctx.inventory = runtime.with_additions(
        added.base, added.hosts, added.memberships, added.parents
    )
    state = ctx.hosts.get(host)
    if state is not None:  # its group vars may have changed with its groups
        state.base_vars = ctx.inventory.host_vars(host)
        state.templated_vars = None
        state.problems_seen = None  # its `gpus` may have changed too


def refresh(ctx: RunContext, fresh: Inventory) -> list[str]:
    """The inventory read again (meta: refresh_inventory), with what add_host and group_by
    added kept as Ansible keeps them (a grouping of a host no source lists now is dropped);
    the hosts of the run that no longer exist, which leave the play."""
    added = ctx.runtime_hosts
    if added.first_listed is None:
        before = added.base or ctx.inventory
        added.first_listed = frozenset(before.hosts if isinstance(before, Inventory) else ())
    known = set(fresh.hosts) | set(added.hosts)
    for members in added.memberships.values():
        members[:] = [host for host in members if host in known]
    added.base = fresh
    ctx.inventory = runtime.with_additions(fresh, added.hosts, added.memberships, added.parents)
    gone = []
    for name, state in ctx.hosts.items():
        if name not in known:
            gone.append(name)
            continue
        state.base_vars = ctx.inventory.host_vars(name)
        state.templated_vars = None
        state.problems_seen = None
    return gone


def play_hosts(ctx: RunContext, pattern: str, select: Callable[[str], list[str]]) -> list[str]:
    """The hosts a play's pattern selects now: the run's selection, plus the hosts and groups
    add_host/group_by added (with --limit still applied)."""
    chosen = select(pattern)
    inventory = ctx.inventory
    if not ctx.runtime_hosts.changed or not isinstance(inventory, Inventory):
        return chosen
    now = runtime.select(inventory, pattern)
    limit = ctx.options.limit
    if limit:
        now = inventory.limit(now, limit)
    return now


def unlisted(ctx: RunContext, host: str) -> str | None:
    """Why no fleetfix action may run on `host`, when the operator's inventory does not list it."""
    if host in ctx.runtime_hosts.hosts:
        return (
            f"{host} was added by add_host, not listed in the inventory: fleetfix actions run "
            "only on listed hosts (leases, repair budget and topology come from the inventory)"
        )
    first = ctx.runtime_hosts.first_listed
    if first is not None and host not in first and host not in ctx.runtime_hosts.hosts:
        return (
            f"{host} came with a meta: refresh_inventory, not listed when the run started: "
            "fleetfix actions run only on hosts listed then (leases, repair budget, topology)"
        )
    inventory = ctx.inventory
    if isinstance(inventory, Inventory) and host in inventory.implicit:
        return (
            f"{host} is the implicit localhost (the controller): fleetfix actions run there "
            "only when the inventory lists it"
        )
    return None
