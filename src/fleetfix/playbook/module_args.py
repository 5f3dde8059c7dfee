"""A module step's arguments, read at load: `copy: {src: a, dest: /b}`, `copy: src=a dest=/b`,
`raw: dmesg | tail`. Every literal argument is checked against the module's spec before
anything runs; templated ones once rendered on each host."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fleetfix.errors import PlaybookError
from fleetfix.modules.spec import problems
from fleetfix.modules.specs import module_named
from fleetfix.playbook.catalog import shown, suggest
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.extravars import parse_kv
from fleetfix.playbook.yamlpos import Entry, Node, NodeKind

_KV_START = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*=")
"""A string that starts as `key=value` words (a file name or template does not)."""

MODULE_NAME = "module"
"""Step.args of a module step: {'module': canonical name, 'params': {...}, 'as': key written}."""


def module_args(
    key: str, node: Node, report: Callable[[PlaybookError], None], defaults: Any = None
) -> dict[str, Any]:
    """The step's args; each problem is passed to `report` (a PlaybookError), the first
    unrecoverable one raised. `defaults` (module_defaults that reach the step: a mapping, or
    a template known once rendered) count as given for the checks.

    Raises:
        PlaybookError: the arguments cannot be read at all (not a mapping nor a string).
    """
    spec = module_named(key)
    if spec is None:  # the loader only calls this for module keys
        raise node.error(f"unknown module {key!r}")
    given, where = _given(spec.name, spec.free_form, node)
    if isinstance(defaults, str):  # a template: the arguments are checked once rendered
        return {MODULE_NAME: spec.name, "params": given, "as": key}
    checked = {**(defaults or {}), **given}
    for written, problem in problems(spec, checked, is_template):
        at = where.get(written, node) if written is not None else node
        hint = None
        if written is not None and problem.startswith("Unsupported"):
            hint = suggest(written, spec.accepted)
        report(at.error(problem, hint=hint))
    return {MODULE_NAME: spec.name, "params": given, "as": key}


def _given(name: str, free_form: str | None, node: Node) -> tuple[dict[str, Any], dict[str, Node]]:
    """(argument -> value, argument -> the node to point at) as written."""
    if node.value is None:
        return {}, {}
    if isinstance(node.value, str):
        if free_form is not None:
            return {free_form: node.value}, {free_form: node}
        try:
            pairs = parse_kv(node.value)
        except ValueError as exc:
            raise node.error(
                f"{name}: {exc}", hint=f"or use the mapping form: {name}: {{param: value}}"
            ) from exc
        return dict(pairs), dict.fromkeys(pairs, node)
    if not node.is_mapping:
        raise node.error(f"{name} takes a mapping of arguments, not {shown(node.value)}")
    given: dict[str, Any] = {}
    where: dict[str, Node] = {}
    for entry in node.entries:
        key = entry.key.value
        if not isinstance(key, str):
            raise entry.key.error(f"{name} arguments are words, not {shown(key)}")
        if key in given:
            raise entry.key.error(f"{name} argument {key!r} given twice")
        given[key] = entry.value.value
        where[key] = entry.key
    return given, where


def kv_mapping(node: Node, what: str) -> Node:
    """A `name=x tasks_from=y` string as the mapping node `{name: x, tasks_from: y}` (every
    part pointing at the string); any other node as it is.

    Raises:
        PlaybookError: the string is not `key=value` words.
    """
    if not (node.is_scalar and isinstance(node.value, str) and _KV_START.match(node.value)):
        return node
    try:
        pairs = parse_kv(node.value)
    except ValueError as exc:
        raise node.error(f"{what}: {exc}", hint=f"or write {what}: {{name: ...}}") from exc
    entries = tuple(Entry(_scalar(key, node), _scalar(value, node)) for key, value in pairs.items())
    return Node(NodeKind.MAPPING, dict(pairs), node.position, node.source_line, entries)


def _scalar(value: Any, where: Node) -> Node:
    return Node(NodeKind.SCALAR, value, where.position, where.source_line)
