"""Reading add_host and group_by: the steps that change the run's inventory for later plays.

Both take Ansible's arguments (a mapping or `k=v` words): add_host `name` (aliases `host`,
`hostname`), `groups` (aliases `group`, `groupname`; a list or comma-separated) and any
other key as a host variable; group_by `key` and `parents` (default `all`). Values stay
templates here; the engine renders them (add_host once, group_by per host).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleetfix.errors import PlaybookError
from fleetfix.playbook import catalog as kw
from fleetfix.playbook.catalog import shown
from fleetfix.playbook.extravars import parse_kv
from fleetfix.playbook.yamlpos import Node, NodeKind

CheckTemplates = Callable[[Node], None]

_NAME_KEYS = ("name", "host", "hostname")
_GROUP_KEYS = ("groups", "group", "groupname")
_GROUP_BY_ARGS = frozenset({"key", "parents"})


def add_host_args(node: Node, check_templates: CheckTemplates) -> dict[str, Any]:
    """`add_host:` as {'name', 'groups', 'vars'}."""
    arguments = _arguments(node, "add_host")
    names = [arguments.pop(k) for k in _NAME_KEYS if k in arguments]
    if not names:
        raise node.error("add_host needs name: (the host to add)", hint="add_host: name=gpu042")
    if len(names) > 1:
        raise names[1].error("add_host takes one of name, host, hostname")
    groups = [arguments[k] for k in _GROUP_KEYS if k in arguments]
    arguments.pop("groups", None)  # 'group'/'groupname' stay host vars too, as in Ansible
    for value in (*names, *groups, *arguments.values()):
        check_templates(value)
    host_vars = {str(key): value.value for key, value in arguments.items()}
    return {
        "name": kw.to_string(names[0], "add_host name"),
        "groups": tuple(n for g in groups for n in _group_names(g)),
        "vars": host_vars,
    }


def group_by_args(node: Node, check_templates: CheckTemplates) -> dict[str, Any]:
    """`group_by:` as {'key', 'parents'}."""
    arguments = _arguments(node, "group_by")
    for key, value in arguments.items():
        if key not in _GROUP_BY_ARGS:
            raise value.error(
                f"unsupported group_by parameter {key!r}", hint="group_by takes key and parents"
            )
        check_templates(value)
    key_node = arguments.get("key")
    if key_node is None:
        raise node.error("group_by needs key: (the group's name)", hint="key: rack_{{ rack }}")
    parents = arguments.get("parents")
    return {
        "key": kw.to_string(key_node, "group_by key"),
        "parents": _group_names(parents) if parents is not None else ("all",),
    }


def _arguments(node: Node, what: str) -> dict[str, Node]:
    if isinstance(node.value, str):
        try:
            pairs = parse_kv(node.value)
        except ValueError as exc:
            raise node.error(f"{what}: {exc}") from exc
        return {
            key: Node(NodeKind.SCALAR, value, node.position, node.source_line)
            for key, value in pairs.items()
        }
    if not node.is_mapping or not node.entries:
        raise node.error(f"{what} takes a mapping of arguments, not {shown(node.value)}")
    arguments: dict[str, Node] = {}
    for entry in node.entries:
        if not isinstance(entry.key.value, str):
            raise entry.key.error(f"{what} parameters are words, not {shown(entry.key.value)}")
        arguments[entry.key.value] = entry.value
    return arguments


def _group_names(node: Node) -> tuple[str, ...]:
    """A group list: a list, or one string of comma-separated names (templates kept whole)."""
    try:
        return kw.to_names(node, "groups", split_commas="{{" not in str(node.value))
    except PlaybookError as exc:
        message = f"groups must be a name or a list of names, not {shown(node.value)}"
        raise node.error(message) from exc
