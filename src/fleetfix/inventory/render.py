"""Render an inventory as `ansible-inventory` does: --list JSON, --graph text, --host JSON.

The shapes follow ansible.cli.inventory: --list nests nothing, lists each group with its direct
`hosts` and `children` (empty keys and empty groups left out, `all` never lists hosts) and puts
every host's merged variables under `_meta.hostvars`. Values are made JSON-ready the way
Ansible's legacy encoder does: dates as ISO text, strings not to be templated as
{"__ansible_unsafe": text}.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any

from fleetfix.errors import PatternError
from fleetfix.inventory.model import Group, Inventory, UnsafeText

PROFILE = "inventory_legacy"


def render_list(inventory: Inventory) -> dict[str, Any]:
    """The `ansible-inventory --list` document (serialise with json.dumps(..., sort_keys=True))."""
    # Ansible lists the hosts the pattern `all` selects; a host named "all" shadows the group.
    available = inventory.select("all")
    groups: dict[str, Any] = {}
    _list_group(inventory, inventory.group("all"), frozenset(available), groups, set())
    hostvars: dict[str, Any] = {}
    for host in available:
        variables = inventory.host_vars(host)
        if variables:
            hostvars[display_text(host)] = to_json_data(variables)
    return {"_meta": {"hostvars": hostvars, "profile": PROFILE}, **groups}


def render_graph(inventory: Inventory, group: str = "all", with_vars: bool = False) -> str:
    """The `ansible-inventory --graph [GROUP] [--vars]` text (no trailing newline).

    Raises:
        PatternError: `group` is not the name of a group.
    """
    if group not in inventory.groups:
        raise PatternError(f"Pattern must be valid group name when using --graph: {group!r}")
    return display_text("\n".join(_graph_group(inventory, inventory.group(group), 0, with_vars)))


def render_host(inventory: Inventory, host: str) -> dict[str, Any]:
    """The `ansible-inventory --host HOST` document: that host's merged variables.

    Like Ansible, HOST may be any pattern that selects exactly one host.

    Raises:
        PatternError: the pattern is malformed or does not select exactly one host.
    """
    selected = [host] if host in inventory.hosts else inventory.select(host)
    if len(selected) != 1:
        raise PatternError(
            f"You must pass a single valid host to --host parameter ({host!r} selects"
            f" {len(selected)} hosts)"
        )
    data: dict[str, Any] = to_json_data(inventory.host_vars(selected[0]), mark_unsafe=False)
    return data


def to_json_data(value: Any, *, mark_unsafe: bool = True) -> Any:
    """`value` with only JSON types left, converted as Ansible's inventory encoder does.

    With `mark_unsafe`, strings not to be templated become {"__ansible_unsafe": text}; Ansible
    marks them so in --list host variables but prints them plain for --host.
    """
    if isinstance(value, str):
        text = display_text(value)
        return {"__ansible_unsafe": text} if mark_unsafe and isinstance(value, UnsafeText) else text
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {
            _json_key(key): to_json_data(item, mark_unsafe=mark_unsafe)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json_data(item, mark_unsafe=mark_unsafe) for item in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return to_json_data(UnsafeText(value.decode("utf-8", "replace")), mark_unsafe=mark_unsafe)
    return str(value)


def display_text(text: str) -> str:
    """`text` with bytes that were not UTF-8 (kept as surrogates) shown as '?', as Ansible does."""
    if text.isascii():
        return str(text)
    return text.encode("utf-8", "replace").decode("utf-8")


def _json_key(key: Any) -> str:
    # JSON keys are strings; convert others the way json.dumps would (True -> "true", 1 -> "1")
    # so that dumping with sort_keys never meets keys of mixed types.
    if isinstance(key, str):
        return display_text(key)
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    return str(key)


def _list_group(
    inventory: Inventory,
    group: Group,
    available: frozenset[str],
    out: dict[str, Any],
    seen: set[str],
) -> None:
    entry: dict[str, Any] = {}
    hosts = [display_text(host) for host in group.hosts if host in available]
    if group.name != "all" and hosts:
        entry["hosts"] = hosts
    if group.children:
        entry["children"] = [display_text(child) for child in group.children]
    if entry:
        out[display_text(group.name)] = entry
    for child in group.children:
        if child not in seen:
            _list_group(inventory, inventory.group(child), available, out, seen)
            seen.add(child)


def _graph_group(inventory: Inventory, group: Group, depth: int, with_vars: bool) -> list[str]:
    lines = [_graph_line(f"@{group.name}:", depth)]
    for child in group.children:
        lines.extend(_graph_group(inventory, inventory.group(child), depth + 1, with_vars))
    if group.name != "all":
        for host in group.hosts:
            lines.append(_graph_line(host, depth + 1))
            if with_vars:
                lines.extend(_graph_vars(inventory.host_vars(host), depth + 2))
    if with_vars:
        lines.extend(_graph_vars(inventory.group_vars(group.name), depth + 1))
    return lines


def _graph_vars(variables: Mapping[Any, Any], depth: int) -> list[str]:
    ordered = sorted(variables.items(), key=lambda item: str(item[0]))
    return [_graph_line(f"{{{name} = {value}}}", depth) for name, value in ordered]


def _graph_line(text: str, depth: int) -> str:
    return "  |" * depth + "--" + text if depth else text
