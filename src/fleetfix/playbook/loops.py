"""The loop keywords of a step (`loop`, `with_items`, `with_list`, `with_sequence`,
`with_indexed_items`, `loop_control`) read into `Step.loop`, `Step.loop_flatten` and
`LoopControl`; the engine runs the items (engine/loops.py).

`with_sequence: start=1 end={{ n }}` and `with_indexed_items: "{{ disks }}"` become the loop
template `{{ query('sequence', 'start=1 end=' ~ (n)) }}` (lookups.py): the terms are rendered
on each host and a bad sequence fails that host's step with Ansible's message, as Ansible's
`with_` lookups do (not the load).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fleetfix.playbook import catalog as kw
from fleetfix.playbook.catalog import shown, suggest
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.model import LoopControl
from fleetfix.playbook.yamlpos import Node

if TYPE_CHECKING:
    from fleetfix.playbook.steps import ValueReader

__all__ = [
    "LOOKUP_LOOPS",
    "indexed_items_value",
    "lookup_loop_value",
    "loop_control",
    "loop_value",
    "one_loop",
    "sequence_value",
]

LOOKUP_LOOPS: tuple[str, ...] = ("dict", "nested", "together", "subelements", "first_found")
"""`with_X` loops that are the lookup X over the keyword's value (lookups.py)."""

_TEMPLATE_PART = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


def loop_value(values: ValueReader, node: Node, what: str) -> Any:
    """A list (items may hold templates), or a template that renders to one per host."""
    value = node.value
    if node.is_sequence:
        values.check_templates(node)
        return value
    if is_template(value):
        values.check_templates(node)
        return value
    if what != "loop" and node.is_scalar and value is not None:
        return [value]  # with_items: x is the one-item list [x], as in Ansible
    hint = "write a YAML list, or a template that renders to one: '{{ names }}'"
    if node.is_mapping:
        hint = 'to loop over a mapping, use loop: "{{ x | dict2items }}"'
    raise node.error(f"{what} requires a list, not {shown(value)}", hint=hint)


def sequence_value(values: ValueReader, node: Node) -> str:
    """`with_sequence`: a term (`start=0 end=3`, `2-6/2`, `4`) or a list of them, as a loop
    template over the `sequence` lookup."""
    items = node.items if node.is_sequence else (node,)
    terms: list[str] = []
    for item in items:
        if isinstance(item.value, bool) or not isinstance(item.value, str | int):
            raise item.error(
                f"with_sequence takes 'start=1 end=5' (or '1-5'), not {shown(item.value)}",
                hint="the fields are start, end, stride, count and format",
            )
        values.check_templates(item)
        terms.append(jinja_text(item, str(item.value)))
    return "{{ query('sequence', " + ", ".join(terms) + ") }}"


def indexed_items_value(values: ValueReader, node: Node) -> str:
    """`with_indexed_items`: a list (or a template of one) as a loop template over the
    `indexed_items` lookup ([index, item] pairs)."""
    values.check_templates(node)
    if node.is_scalar and isinstance(node.value, str) and is_template(node.value):
        term = jinja_text(node, node.value)
    else:
        term = jinja_literal(node)
    return "{{ query('indexed_items', " + term + ", _loop_terms=true) }}"


def lookup_loop_value(values: ValueReader, node: Node, name: str) -> str:
    """`with_nested`, `with_dict`, ...: the value (a list of terms, or one term; templates
    inside) as a loop template over the lookup, rendered on each host."""
    values.check_templates(node)
    if node.is_scalar and isinstance(node.value, str) and is_template(node.value):
        term = jinja_text(node, node.value)
    else:
        term = jinja_literal(node)
    return "{{ query(" + repr(name) + ", " + term + ", _loop_terms=true) }}"


def jinja_text(node: Node, text: str) -> str:
    """A string that may hold `{{ expr }}` parts as one Jinja2 expression: 'a=' ~ (expr)."""
    if "{%" in text or "{#" in text:
        raise node.error(
            "a with_ lookup's terms may hold {{ }} expressions, not {% %} blocks",
            hint="compute the value in vars: and name it here",
        )
    pieces = _TEMPLATE_PART.split(text)
    parts = [
        f"({piece.strip()})" if odd else repr(piece)
        for odd, piece in ((i % 2 == 1, p) for i, p in enumerate(pieces))
        if odd or piece
    ]
    if len(parts) == 1 and parts[0].startswith("("):
        return parts[0]  # "{{ disks }}" keeps its value's type (a list stays a list)
    return " ~ ".join(parts) or "''"


def jinja_literal(node: Node) -> str:
    """A YAML value as a Jinja2 literal; strings may hold `{{ expr }}` parts."""
    if node.is_sequence:
        return "[" + ", ".join(jinja_literal(item) for item in node.items) + "]"
    if node.is_mapping:
        pairs = (f"{jinja_literal(e.key)}: {jinja_literal(e.value)}" for e in node.entries)
        return "{" + ", ".join(pairs) + "}"
    value = node.value
    if isinstance(value, str):
        return jinja_text(node, value)
    if value is None or isinstance(value, bool):
        return {None: "none", True: "true", False: "false"}[value]
    return repr(value)


def loop_control(values: ValueReader, node: Node) -> LoopControl:
    if not node.is_mapping:
        raise node.error(f"loop_control must be a mapping, not {shown(node.value)}")
    fields: dict[str, Any] = {}
    for entry in node.entries:
        key, value = entry.key.value, entry.value
        if key in ("loop_var", "index_var"):
            templated = isinstance(value.value, str) and is_template(value.value)
            if not templated and not kw.is_variable_name(value.value):  # a template: at run time
                raise value.error(f"{key} must be a variable name, not {shown(value.value)}")
            fields[key] = value.value
        elif key == "label":
            fields[key] = values.template_string(value, "label")
        elif key == "pause":
            fields[key] = kw.to_seconds(value, "pause", allow_zero=True)
        elif key in ("extended", "extended_allitems"):
            fields[key] = kw.to_bool(value, key)
        elif key == "break_when":
            fields[key] = values.conditions(value, "break_when", allow_empty=True)
        else:
            hint = suggest(key, kw.LOOP_CONTROL_ARGS) if isinstance(key, str) else None
            raise entry.key.error(
                f"unsupported loop_control argument {shown(key)}",
                hint=hint or f"fleetfix supports {', '.join(sorted(kw.LOOP_CONTROL_ARGS))}",
            )
    return LoopControl(**fields)


def one_loop(values: ValueReader, node: Node, fields: dict[str, Any]) -> None:
    """loop/with_items/with_list to Step.loop (and loop_flatten); at most one of them."""
    given = [e for e in node.entries if e.key.value in kw.LOOP_KEYWORDS]
    for extra in given[1:]:
        values.report(
            extra.key.error(
                f"a step loops once: {given[0].key.value!r} and {extra.key.value!r}",
                hint="keep one of them",
            )
        )
    for name in kw.LOOP_KEYWORDS:
        if name in fields:
            value = fields.pop(name)
            if given and name == given[0].key.value:
                fields["loop"] = value
                fields["loop_flatten"] = name == "with_items"
    control = node.entry("loop_control")
    if control is not None and not given:
        values.report(control.key.error("loop_control: needs loop: (or with_items:) on the step"))
