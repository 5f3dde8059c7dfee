"""The loaded inventory: Host and Group values and the Inventory that answers questions about them.

An Inventory is built once by `load_inventory` and not changed afterwards. Order matters and
follows Ansible: groups and hosts keep the order in which the sources first named them, a group's
hosts are walked breadth-first through its children, and host variables are merged in Ansible's
precedence (see precedence.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetfix.inventory import patterns, precedence


class UnsafeText(str):
    """A string Ansible marks as never to be templated (`!unsafe`, `__ansible_unsafe`)."""

    __slots__ = ()


class HostVars(Mapping[str, Any]):
    """A host's own variables, read-only: the names shared with every host that has the same
    ones in the same order (most of a fleet's hosts), the values its own. At 10,000 hosts
    that is 1.4 MB where a dict each was 2.7 MB (issue 21)."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: tuple[str, ...], values: tuple[Any, ...]) -> None:
        self._names = names
        self._values = values

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[self._names.index(key)]
        except ValueError:
            raise KeyError(key) from None

    def __contains__(self, key: object) -> bool:
        return key in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(zip(self._names, self._values, strict=True)))


@dataclass(frozen=True, slots=True)
class Group:
    """A group as the inventory sources define it (group_vars files are kept apart).

    `hosts`, `children` and `parents` are direct relations in the order first declared;
    `depth` is the longest path from `all`, used with `priority` to order variable merging.
    """

    name: str
    hosts: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    parents: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    priority: int = 1
    depth: int = 0


@dataclass(frozen=True, slots=True)
class Host:
    """A host with the variables its inventory lines give it and every group it belongs to.

    `groups` holds the direct groups and all their ancestors, 'all' included, sorted by name.
    """

    name: str
    vars: Mapping[str, Any] = field(default_factory=dict)
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class VarsDirectory:
    """The group_vars/ and host_vars/ found next to one inventory source, merged per name."""

    path: str
    group_vars: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    host_vars: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class Inventory:
    """Hosts, groups and their variables, queried the way Ansible queries them.

    Returned lists are fresh; variable values inside them are shared with the inventory and must
    be treated as read-only.
    """

    def __init__(
        self,
        groups: Mapping[str, Group],
        hosts: Mapping[str, Host],
        vars_dirs: Sequence[VarsDirectory] = (),
        *,
        sources: Sequence[str] = (),
        warnings: Sequence[str] = (),
        implicit: frozenset[str] = frozenset(),
    ) -> None:
        self._groups = dict(groups)
        self._hosts = dict(hosts)
        self._vars_dirs = tuple(vars_dirs)
        self.sources = tuple(sources)
        self.warnings = tuple(warnings)
        self.implicit = implicit
        """Hosts no source lists (an implicit localhost): in `hosts`, in no group's list."""
        # Walking a group's descendants is the hot path of pattern matching; cache per group.
        self._members: dict[str, tuple[str, ...]] = {}
        # What a host's groups give it, per set of groups: a rack's hosts share theirs.
        self._groups_vars: dict[tuple[str, ...], Mapping[str, Any]] = {}

    def __repr__(self) -> str:
        return f"<Inventory {len(self._hosts)} hosts, {len(self._groups)} groups>"

    @property
    def groups(self) -> Mapping[str, Group]:
        """Every group by name, in the order the sources declared them."""
        return self._groups

    @property
    def hosts(self) -> Mapping[str, Host]:
        """Every host by name, in the order the sources first named them."""
        return self._hosts

    @property
    def vars_dirs(self) -> tuple[VarsDirectory, ...]:
        """One VarsDirectory per inventory source, in source order."""
        return self._vars_dirs

    def with_vars_directory(self, directory: VarsDirectory) -> Inventory:
        """This inventory with `directory` read after its own vars directories, in each tier of
        the precedence (a playbook's group_vars/ and host_vars/: Ansible ranks them just above
        the inventory's, group_vars/all below any other group's)."""
        return Inventory(
            self._groups,
            self._hosts,
            (*self._vars_dirs, directory),
            sources=self.sources,
            warnings=self.warnings,
            implicit=self.implicit,
        )

    def host_names(self) -> list[str]:
        """Every host once, in inventory order (Ansible's order for the pattern `all`)."""
        return self.hosts_in("all")

    def group_names(self) -> list[str]:
        """Every group name ('all' and 'ungrouped' included) in declaration order."""
        return list(self._groups)

    def host(self, name: str) -> Host:
        """The host called `name`. Raises KeyError when there is none."""
        return self._hosts[name]

    def group(self, name: str) -> Group:
        """The group called `name`. Raises KeyError when there is none."""
        return self._groups[name]

    def host_vars(self, host: str) -> dict[str, Any]:
        """The host's variables merged in Ansible's precedence, as `ansible-inventory --host`.

        Strings marked UnsafeText must never be rendered as templates. Raises KeyError for an
        unknown host.
        """
        return precedence.host_vars(self, self._hosts[host])

    def groups_vars_of(self, host: Host) -> Mapping[str, Any]:
        """The vars the host's groups give it, merged (precedence.py, layers 1 to 4) once for
        all the hosts of the same groups: 10,000 hosts' vars are merged twice before a run's
        first command. Read-only: host_vars copies it."""
        merged = self._groups_vars.get(host.groups)
        if merged is None:
            merged = self._groups_vars[host.groups] = precedence.groups_vars(self, host)
        return merged

    def group_vars(self, group: str) -> dict[str, Any]:
        """The group's own vars plus its group_vars files, as `ansible-inventory --graph --vars`.

        Raises KeyError for an unknown group.
        """
        return precedence.group_vars(self, self._groups[group])

    def groups_of(self, host: str) -> list[str]:
        """The host's groups like Ansible's `group_names`: sorted, without 'all'.

        Raises KeyError for an unknown host.
        """
        return [name for name in self._hosts[host].groups if name != "all"]

    def hosts_in(self, group: str) -> list[str]:
        """The hosts of `group` and its descendants, each once, in Ansible's walk order.

        Raises KeyError for an unknown group.
        """
        members = self._members.get(group)
        if members is None:
            members = self._walk_members(group)
            self._members[group] = members
        return list(members)

    def select(self, pattern: str) -> list[str]:
        """The hosts an Ansible host pattern selects (`hosts:` of a play), in inventory order.

        Raises:
            PatternError: the pattern is malformed.
        """
        return patterns.select(self, pattern)

    def limit(self, hosts: list[str], limit: str) -> list[str]:
        """Keep the hosts of `hosts` that `limit` (a --limit value, `@file` allowed) selects.

        Raises:
            PatternError: the limit is malformed or names a file that cannot be read.
        """
        return patterns.limit(self, hosts, limit)

    def range_terms(self, pattern: str) -> list[str]:
        """The terms of `pattern` that fleetfix reads as host ranges (where Ansible would not)."""
        return patterns.range_terms(self, pattern)

    def _walk_members(self, group: str) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for name in self._descendants(group):
            for host in self._groups[name].hosts:
                seen.setdefault(host)
        return tuple(seen)

    def _descendants(self, group: str) -> list[str]:
        """`group` and its descendants level by level, as Ansible's Group._walk_relationship.

        Ansible walks each level from a set, so where two groups of one level both bring new
        children its order is arbitrary; we take declaration order, which is one of its orders.
        """
        start = self._groups[group]
        ordered = [group, *start.children]
        seen: set[str] = set()
        level = list(dict.fromkeys(ordered))
        while level:
            seen.update(level)
            following: dict[str, None] = {}
            for name in level:
                for child in self._groups[name].children:
                    if child not in seen and child not in following:
                        following[child] = None
                        ordered.append(child)
            level = list(following)
        return ordered
