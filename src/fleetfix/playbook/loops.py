"""The loop keywords of a step (`loop`, `with_items`, `with_list`, `loop_control`) read into
`Step.loop`, `Step.loop_flatten` and `LoopControl`; the engine runs the items (engine/loops.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetfix.playbook import catalog as kw
from fleetfix.playbook.catalog import shown, suggest
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.model import LoopControl
from fleetfix.playbook.yamlpos import Node

if TYPE_CHECKING:
    from fleetfix.playbook.steps import ValueReader

__all__ = ["loop_control", "loop_value", "one_loop"]


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


def loop_control(values: ValueReader, node: Node) -> LoopControl:
    if not node.is_mapping:
        raise node.error(f"loop_control must be a mapping, not {shown(node.value)}")
    fields: dict[str, Any] = {}
    for entry in node.entries:
        key, value = entry.key.value, entry.value
        if key in ("loop_var", "index_var"):
            if not kw.is_variable_name(value.value):
                raise value.error(f"{key} must be a variable name, not {shown(value.value)}")
            fields[key] = value.value
        elif key == "label":
            fields[key] = values.template_string(value, "label")
        elif key == "pause":
            fields[key] = kw.to_seconds(value, "pause", allow_zero=True)
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
