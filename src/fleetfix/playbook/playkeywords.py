"""Templated play keywords (`hosts: "{{ target }}"`, `serial: "{{ batch }}"`), rendered per play.

Ansible templates a play's keywords once, before the play runs, with the variables a play has
without a host: extra vars, the play's vars and vars_files, `groups`, `playbook_dir`. The
loader checks the template's syntax and keeps its node; `render_play` renders it and reads the
result with the same rules as a value written out, so `serial: "{{ batch }}"` rendering to
`0` is refused as `serial: 0` is, at the keyword's line:col.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from fleetfix.errors import FleetfixError
from fleetfix.playbook import catalog as kw
from fleetfix.playbook.conditions import OMIT, is_template
from fleetfix.playbook.model import Play
from fleetfix.playbook.yamlpos import Entry, Node, NodeKind

_TRUE = frozenset({"true", "yes", "on", "1", "y", "t"})
_FALSE = frozenset({"false", "no", "off", "0", "n", "f", ""})

_CONVERTERS: Mapping[str, Callable[[Node], Any]] = {
    "hosts": lambda n: ",".join(kw.to_names(n, "hosts")),
    "serial": kw.to_serial,
    "max_fail_percentage": lambda n: kw.to_percent(n, "max_fail_percentage"),
    "any_errors_fatal": lambda n: _boolean(n, "any_errors_fatal"),
    "become": lambda n: _boolean(n, "become"),
    "gather_facts": lambda n: _boolean(n, "gather_facts"),
    "check_mode": lambda n: _boolean(n, "check_mode"),
    "force_handlers": lambda n: _boolean(n, "force_handlers"),
    "environment": lambda n: kw.to_environment(n, "environment"),
    "timeout": lambda n: kw.to_seconds(n, "timeout"),
    "order": lambda n: kw.to_choice(n, "order", kw.PLAY_ORDERS),
    "strategy": lambda n: kw.to_choice(n, "strategy", kw.STRATEGIES),
}
TEMPLATED_PLAY_KEYWORDS: frozenset[str] = frozenset(_CONVERTERS)
"""The play keywords whose value may be a template (rendered before the play runs)."""


def is_templated(key: str, node: Node) -> bool:
    """Whether a play keyword's value is kept as a template to render before the play runs."""
    return key in TEMPLATED_PLAY_KEYWORDS and node.is_scalar and is_template(node.value)


def render_play(
    play: Play, render: Callable[[Any, Mapping[str, Any]], Any], variables: Mapping[str, Any]
) -> Play:
    """`play` with its templated keywords rendered with `variables` and read as written values.

    Raises:
        PlaybookError: a keyword cannot be rendered, or renders to a value it may not have;
            the error points at the keyword's value in the playbook.
    """
    if not play.templated and not is_template(play.name) and not is_template(play.hosts):
        return play
    changes: dict[str, Any] = {}
    for key in ("hosts", "name"):  # both strings as written in the model
        text = getattr(play, key)
        if is_template(text):
            where = Node(NodeKind.SCALAR, text, play.position, "")
            changes[key] = _CONVERTERS.get(key, _text)(
                _as_node(_rendered(render, key, where, variables), where)
            )
    with_omit = {"omit": OMIT, **variables}
    for key, node in play.templated.items():
        value = _rendered(render, key, node, with_omit)
        if value != OMIT:  # a keyword rendered to omit is not set (its default stays)
            changes[key] = _CONVERTERS[key](_as_node(value, node))
    return replace(play, templated={}, **changes)


def _rendered(
    render: Callable[[Any, Mapping[str, Any]], Any],
    key: str,
    node: Node,
    variables: Mapping[str, Any],
) -> Any:
    try:
        return render(node.value, variables)
    except FleetfixError as exc:
        raise node.error(
            f"play keyword {key!r} cannot be rendered: {exc}",
            hint="a play keyword sees extra vars, the play's vars and vars_files, not a host's",
        ) from exc


def _as_node(value: Any, written: Node) -> Node:
    """A rendered value as a node at the place its template was written."""
    if isinstance(value, Mapping):
        entries = tuple(
            Entry(_as_node(key, written), _as_node(item, written)) for key, item in value.items()
        )
        return Node(NodeKind.MAPPING, dict(value), written.position, written.source_line, entries)
    if isinstance(value, list | tuple):
        items = tuple(_as_node(item, written) for item in value)
        return Node(
            NodeKind.SEQUENCE, list(value), written.position, written.source_line, (), items
        )
    return Node(NodeKind.SCALAR, value, written.position, written.source_line)


def _boolean(node: Node, what: str) -> bool:
    """A rendered boolean: true/false, or a word Ansible's boolean() reads ('yes', '0', ...)."""
    value = node.value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    return kw.to_bool(node, what)


def _text(node: Node) -> str:
    return str(node.value)
