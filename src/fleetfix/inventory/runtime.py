"""The inventory as a run changes it: an implicit localhost, and add_host/group_by additions.

Ansible answers `hosts: localhost` with an implicit localhost (the local connection) when no
source lists it; that host is in no group, so `all` and `groups.all` leave it out. fleetfix
does the same, but only for a pattern that names `localhost` or `127.0.0.1` as a term of its
own: a wildcard (`local*`) or a group never reaches the controller.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from fleetfix.inventory.model import Group, Host, Inventory
from fleetfix.inventory.patterns import LOCALHOST_NAMES, split_pattern

EMPTY_INVENTORY_WARNING = "provided hosts list is empty, only localhost is available"


def implicit_names(inventory: Inventory, pattern: str) -> list[str]:
    """The implicit localhost names `pattern` asks for: plain terms no source lists."""
    return [
        term
        for term in dict.fromkeys(split_pattern(pattern))
        if term in LOCALHOST_NAMES and (term in inventory.implicit or term not in inventory.hosts)
    ]


def with_implicit_localhost(inventory: Inventory, patterns: Iterable[str]) -> Inventory:
    """`inventory` with an implicit localhost for each name the patterns ask for by name."""
    names = [n for p in patterns for n in implicit_names(inventory, p) if n not in inventory.hosts]
    if not names:
        return inventory
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = dict(inventory.hosts)
    for name in dict.fromkeys(names):
        # In `all` for its variables (group_vars/all apply, as in Ansible), in no group's list.
        hosts[name] = Host(name, dict(local), ("all",))
    return _rebuilt(inventory, inventory.groups, hosts, inventory.implicit | set(names))


def with_host_var(inventory: Inventory, key: str, value: Any) -> Inventory:
    """`inventory` with `key` set to `value` on every host, over what the sources set inline
    (a command-line option such as `fleetfix run --lab-port`, which sets fleetfix_lab_port)."""
    hosts = {
        name: replace(host, vars={**host.vars, key: value})
        for name, host in inventory.hosts.items()
    }
    return _rebuilt(inventory, inventory.groups, hosts, inventory.implicit)


def select(inventory: Inventory, pattern: str) -> list[str]:
    """The hosts `pattern` selects; an implicit host only where a term names it."""
    named = set(implicit_names(inventory, pattern))
    # An implicit host a group_by or add_host put in a group the pattern names is that
    # group's member, as in ansible-core (never through `all` or `ungrouped`).
    terms = set(split_pattern(pattern)) - {"all", "ungrouped"}
    grouped = {h for h in inventory.implicit if terms & set(_groups_of(inventory, h))}
    chosen = [
        h
        for h in inventory.select(pattern)
        if h not in inventory.implicit or h in named or h in grouped
    ]
    return chosen + [n for n in named if n in inventory.hosts and n not in chosen]


def _groups_of(inventory: Inventory, host: str) -> tuple[str, ...]:
    found = inventory.hosts.get(host)
    return found.groups if found is not None else ()


def with_additions(
    inventory: Inventory,
    hosts: Mapping[str, Mapping[str, Any]],
    memberships: Mapping[str, Sequence[str]],
    parents: Mapping[str, Sequence[str]],
) -> Inventory:
    """`inventory` with add_host's hosts (name -> vars, merged over a listed host's) and the
    groups add_host and group_by put hosts in (group -> hosts; group -> its parents)."""
    groups = dict(inventory.groups)
    all_hosts = dict(inventory.hosts)
    for name, host_vars in hosts.items():
        old = all_hosts.get(name)
        merged = {**(old.vars if old is not None else {}), **host_vars}
        all_hosts[name] = Host(name, merged, old.groups if old is not None else ("all",))
        if old is None:
            home = "ungrouped" if "ungrouped" in groups else "all"
            groups[home] = replace(groups[home], hosts=(*groups[home].hosts, name))
    for group, members in memberships.items():
        _ensure_group(groups, group, parents.get(group, ()))
        known = groups[group].hosts
        added = tuple(h for h in dict.fromkeys(members) if h not in known)
        groups[group] = replace(groups[group], hosts=(*known, *added))
        for host in members:
            ancestors = _ancestors(groups, group)
            old_host = all_hosts[host]
            joined = tuple(sorted({*old_host.groups, *ancestors, "all"}))
            all_hosts[host] = replace(old_host, groups=joined)
    return _rebuilt(inventory, groups, all_hosts, inventory.implicit)


def _ensure_group(groups: dict[str, Group], name: str, parents: Sequence[str]) -> None:
    for parent in parents:
        if parent not in groups:
            _ensure_group(groups, parent, ())
    wanted = tuple(parents) or (() if name == "all" else ("all",))
    group = groups.get(name) or Group(name)
    new_parents = tuple(p for p in wanted if p not in group.parents)
    if name in groups and not new_parents:
        return
    if name in groups and not parents:
        return  # an existing group keeps its place
    depth = 1 + max((groups[p].depth for p in (*group.parents, *new_parents)), default=0)
    groups[name] = replace(group, parents=(*group.parents, *new_parents), depth=depth)
    for parent in new_parents:
        groups[parent] = replace(groups[parent], children=(*groups[parent].children, name))


def _ancestors(groups: Mapping[str, Group], name: str) -> set[str]:
    found: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current not in found and current in groups:
            found.add(current)
            todo.extend(groups[current].parents)
    return found


def _rebuilt(
    inventory: Inventory,
    groups: Mapping[str, Group],
    hosts: Mapping[str, Host],
    implicit: frozenset[str],
) -> Inventory:
    return Inventory(
        groups,
        hosts,
        inventory.vars_dirs,
        sources=inventory.sources,
        warnings=inventory.warnings,
        implicit=implicit,
    )
