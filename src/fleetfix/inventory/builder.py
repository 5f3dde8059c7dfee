"""Accumulate groups, hosts and variables while sources are read, then freeze them.

This is the mutable counterpart of ansible.inventory.data.InventoryData: parsers call add_group,
add_host, add_child and set_variable in file order; `reconcile` applies Ansible's rules once
every source is read (parentless groups go under `all`, hosts in no group go to `ungrouped`),
and `freeze` returns the immutable Group and Host values. Errors are raised as BuildError
without a position; the parser that made the call adds file and line (reconcile, which runs
after parsing, raises InventoryError at the host's first line itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetfix.errors import InventoryError, SourcePosition
from fleetfix.inventory.model import Group, Host, HostVars

MAX_INVENTORY_HOSTS = 1_000_000
"""The most hosts one inventory may hold (as many as one range may stand for, see ranges.py):
more would take gigabytes; no fleet is this big."""


class BuildError(ValueError):
    """An inventory operation Ansible refuses (cycle, unknown group, bad name, ...)."""


@dataclass(slots=True)
class _GroupDraft:
    name: str
    hosts: dict[str, None] = field(default_factory=dict)
    children: dict[str, None] = field(default_factory=dict)
    parents: dict[str, None] = field(default_factory=dict)
    vars: dict[Any, Any] = field(default_factory=dict)
    priority: int = 1


@dataclass(slots=True)
class _HostDraft:
    name: str
    vars: dict[Any, Any] = field(default_factory=dict)
    groups: dict[str, None] = field(default_factory=dict)


class InventoryBuilder:
    """The inventory being read; one per `load_inventory` call."""

    def __init__(self) -> None:
        self.groups: dict[str, _GroupDraft] = {}
        self.hosts: dict[str, _HostDraft] = {}
        self.warnings: list[str] = []
        # Where the host being added is written; parsers keep it current so that errors found
        # only in `reconcile` can still point at a line.
        self.origin: SourcePosition | None = None
        self.origins: dict[str, SourcePosition | None] = {}
        self.add_group("all")
        self.add_group("ungrouped")
        self.add_child("all", "ungrouped")

    def add_group(self, name: object) -> str:
        """Declare a group (again is fine); returns its name."""
        if not name:
            raise BuildError(f"Invalid empty/false group name provided: {name}")
        if not isinstance(name, str):
            raise BuildError(
                f"Invalid group name supplied, expected a string but got {type(name).__name__}"
                f" for {name}"
            )
        if name not in self.groups:
            self.groups[name] = _GroupDraft(name)
        return name

    def add_host(self, name: str, group: str | None = None, port: int | None = None) -> str:
        """Declare a host, optionally in `group`; a port only counts where the host is new."""
        if not name:
            raise BuildError(f"Invalid empty host name provided: {name}")
        if group is not None and group not in self.groups:
            raise BuildError(f"Could not find group {group} in inventory")
        draft = self.hosts.get(name)
        if draft is None:
            if len(self.hosts) >= MAX_INVENTORY_HOSTS:
                raise BuildError(
                    f"the inventory would hold more than {MAX_INVENTORY_HOSTS:,} hosts (the limit)"
                )
            draft = self.hosts[name] = _HostDraft(name)
            self.origins[name] = self.origin
            if port:
                draft.vars["ansible_port"] = port
        if group is not None:
            self._add_member(self.groups[group], draft)
        return name

    def add_child(self, parent: str, child: str) -> None:
        """Make `child` (a group, else a host) a member of group `parent`."""
        if parent not in self.groups:
            raise BuildError(f"{parent} is not a known group")
        if child in self.groups:
            self._add_child_group(self.groups[parent], self.groups[child])
        elif child in self.hosts:
            self._add_member(self.groups[parent], self.hosts[child])
        else:
            raise BuildError(f"{child} is not a known host nor group")

    def set_variable(self, entity: str, key: Any, value: Any) -> None:
        """Set a variable on the group, else the host, called `entity` (groups win, as Ansible)."""
        group = self.groups.get(entity)
        if group is not None:
            self._set_group_variable(group, key, value)
        elif entity in self.hosts:
            self.hosts[entity].vars[key] = value
        else:
            raise BuildError(f"Could not identify group or host named {entity}")

    def reconcile(self) -> None:
        """Apply Ansible's rules for `all` and `ungrouped` (InventoryData.reconcile_inventory)."""
        for group in list(self.groups.values()):
            if group.name != "all" and not group.parents:
                self.add_child("all", group.name)
        ancestry = _Ancestry(self.groups)
        ungrouped = self.groups["ungrouped"]
        for host in self.hosts.values():
            member_of = ancestry.closure(host.groups)
            if "ungrouped" in member_of:
                if member_of - {"all", "ungrouped"} and host.name in ungrouped.hosts:
                    del ungrouped.hosts[host.name]
                    del host.groups["ungrouped"]
            elif not member_of - {"all"}:
                self._add_to_ungrouped(host.name)
                ancestry = _Ancestry(self.groups)
        for name in sorted(self.groups.keys() & self.hosts.keys()):
            self.warnings.append(f"Found both group and host with same name: {name}")

    def _add_to_ungrouped(self, host: str) -> None:
        # Ansible adds by name, so a group of the same name goes under ungrouped instead of
        # the host (and the group graph changes, hence the fresh ancestry in the caller).
        try:
            self.add_child("ungrouped", host)
        except BuildError as exc:
            raise InventoryError(
                f"host {host!r} cannot be placed in group 'ungrouped': {exc}",
                self.origins.get(host),
            ) from exc

    def freeze(self) -> tuple[dict[str, Group], dict[str, Host]]:
        """The immutable groups and hosts, in declaration order."""
        depths = _depths(self.groups)
        groups = {name: _frozen_group(draft, depths[name]) for name, draft in self.groups.items()}
        ancestry = _Ancestry(self.groups)
        # Hosts of one rack share their names of variables and their groups: one copy each.
        shared: dict[tuple[str, ...], tuple[str, ...]] = {}
        hosts = {}
        for name, draft in self.hosts.items():
            names = tuple(draft.vars)
            member_of = tuple(sorted(ancestry.closure(draft.groups)))
            own = HostVars(shared.setdefault(names, names), tuple(draft.vars.values()))
            hosts[name] = Host(name, own, shared.setdefault(member_of, member_of))
        return groups, hosts

    def _add_member(self, group: _GroupDraft, host: _HostDraft) -> None:
        group.hosts.setdefault(host.name)
        host.groups.setdefault(group.name)

    def _add_child_group(self, parent: _GroupDraft, child: _GroupDraft) -> None:
        if parent is child:
            raise BuildError(f"can't add group {child.name!r} to itself")
        if child.name == "all":
            # Ansible accepts this line, then fails when it puts the top groups under `all`.
            raise BuildError(
                f"Adding group 'all' as child to {parent.name!r} creates a recursive dependency"
                " loop: every group is already under 'all'."
            )
        if child.name in parent.children:
            return
        if child.name in _Ancestry(self.groups).of(parent.name):
            raise BuildError(
                f"Adding group {child.name!r} as child to {parent.name!r} creates a recursive"
                " dependency loop."
            )
        parent.children.setdefault(child.name)
        child.parents.setdefault(parent.name)

    def _set_group_variable(self, group: _GroupDraft, key: Any, value: Any) -> None:
        if key != "ansible_group_priority":
            group.vars[key] = value
            return
        # Ansible stores the priority apart from the vars, converting with int() and failing
        # on what int() refuses.
        try:
            group.priority = int(value)
        except (TypeError, ValueError) as exc:
            raise BuildError(f"ansible_group_priority must be an integer, got {value!r}") from exc


class _Ancestry:
    """Ancestors of groups, memoised for one pass over a fixed group graph."""

    def __init__(self, groups: Mapping[str, _GroupDraft]) -> None:
        self._groups = groups
        self._memo: dict[str, frozenset[str]] = {}

    def of(self, name: str) -> frozenset[str]:
        """Every group above `name` (not `name` itself unless the graph is cyclic)."""
        known = self._memo.get(name)
        if known is not None:
            return known
        found: set[str] = set()
        pending = list(self._groups[name].parents)
        while pending:
            parent = pending.pop()
            if parent not in found:
                found.add(parent)
                pending.extend(self._groups[parent].parents)
        self._memo[name] = frozenset(found)
        return self._memo[name]

    def closure(self, direct: Mapping[str, None]) -> set[str]:
        """The direct groups and all their ancestors."""
        member_of = set(direct)
        for name in direct:
            member_of |= self.of(name)
        return member_of


def _frozen_group(draft: _GroupDraft, depth: int) -> Group:
    return Group(
        name=draft.name,
        hosts=tuple(draft.hosts),
        children=tuple(draft.children),
        parents=tuple(draft.parents),
        vars=draft.vars,
        priority=draft.priority,
        depth=depth,
    )


def _depths(groups: Mapping[str, _GroupDraft]) -> dict[str, int]:
    """Longest path from a root for every group (Ansible's Group.depth), without recursion."""
    depths: dict[str, int] = {}
    for start in groups:
        stack = [start]
        while stack:
            name = stack[-1]
            if name in depths:
                stack.pop()
                continue
            waiting = [parent for parent in groups[name].parents if parent not in depths]
            if waiting:
                stack.extend(waiting)
                continue
            parents = groups[name].parents
            depths[name] = 1 + max((depths[parent] for parent in parents), default=-1)
            stack.pop()
    return depths
