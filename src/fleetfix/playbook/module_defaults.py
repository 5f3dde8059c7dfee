"""`module_defaults` (on a play, a block or a step): read at load and merged down to each
module step as ansible-core merges it.

ansible-core keeps the keyword as a list of mappings, the play's first, then each enclosing
block's, then the step's own (FieldAttribute extend+prepend), and merges them with
`dict.update`: a module named again further in replaces the whole mapping named before, not
parameter by parameter. A step's own arguments win over the defaults, and only the defaults
it does not give are templated (executor/module_common.py, `_get_action_arg_defaults`).
Names are the modules fleetfix runs (modules/specs.py); `copy`, `ansible.builtin.copy` and
`ansible.legacy.copy` name one module. `group/NAME` (action groups) is refused with the
reason, and so is a name close to a module fleetfix runs (`flie`): a typo quietly dropped
leaves every step without its default. Defaults for other modules (`cisco.ios.ios_facts`)
are left out: no step fleetfix runs can use them (a step naming such a module is refused).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleetfix.errors import PlaybookError
from fleetfix.modules.specs import MODULE_SPECS, module_named
from fleetfix.playbook.catalog import shown
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.yamlpos import Node

DEFAULTS_KEY = "defaults"
"""In a module step's args: the defaults that reach it (a mapping, or a template)."""

Defaults = dict[str, Any]
"""Module name (canonical) -> its defaults as written: a mapping, or a template string."""

_SHAPE = (
    "module_defaults is a mapping (or a list of mappings) of module names to their default"
    ' arguments, e.g. module_defaults: {file: {owner: root}} or {file: "{{ file_defaults }}"}'
)
_GROUPS = (
    "action groups are not supported: name each module (module_defaults: {copy: {...},"
    " file: {...}})"
)


def read_module_defaults(node: Node, report: Callable[[PlaybookError], None]) -> list[Defaults]:
    """The keyword's mappings in order, each module named by its canonical name; a problem is
    passed to `report` and its entry left out."""
    if node.value is None:
        return []
    items = node.items if node.is_sequence else (node,)
    read: list[Defaults] = []
    for item in items:
        if not item.is_mapping:
            report(item.error(f"module_defaults entry is {shown(item.value)}", hint=_SHAPE))
            continue
        read.append(_mapping(item, report))
    return read


def _mapping(node: Node, report: Callable[[PlaybookError], None]) -> Defaults:
    defaults: Defaults = {}
    for entry in node.entries:
        name, value = entry.key.value, entry.value
        problem = _problem(name, value)
        if problem is not None:
            report(entry.key.error(problem[0], hint=problem[1]))
            continue
        spec = module_named(str(name))
        if spec is not None:
            defaults[spec.name] = value.value if value.value is not None else {}
    return defaults


def _problem(name: Any, value: Node) -> tuple[str, str] | None:
    """(message, hint) for an entry fleetfix cannot apply, or None."""
    if not isinstance(name, str) or is_template(name):
        return f"module_defaults names a module, not {shown(name)}", _SHAPE
    if name.startswith("group/"):
        return f"module_defaults {name!r}: action groups are not supported", _GROUPS
    if module_named(name) is None:
        short = name.removeprefix("ansible.builtin.").removeprefix("ansible.legacy.")
        close = difflib.get_close_matches(short, sorted(MODULE_SPECS), n=1, cutoff=0.75)
        if close:
            return f"module_defaults {name!r}: no such module", f"did you mean {close[0]!r}?"
        return None  # another collection's module: no step fleetfix runs uses it
    if value.is_mapping or value.value is None:
        return None
    if isinstance(value.value, str) and is_template(value.value):
        return None
    return (
        f"module_defaults {name!r} must be a mapping of arguments, not {shown(value.value)}",
        _SHAPE,
    )


def merged(chain: Iterable[Defaults]) -> Defaults:
    """Ansible's merge: later mappings (inner blocks, the step) replace a module's defaults."""
    result: Defaults = {}
    for defaults in chain:
        result.update(defaults)
    return result


def defaults_for(module: str, chain: Iterable[Defaults]) -> Any:
    """The defaults that reach a step of `module` (a mapping or a template), or None.

    `gather_facts` runs the facts module with its own arguments first: setup's defaults fill
    what gather_facts's do not give, as ansible-core's gather_facts action does."""
    found = merged(chain)
    own = found.get(module)
    if module != "gather_facts" or "setup" not in found:
        return own
    setup = found["setup"]
    if own is None:
        return setup
    if isinstance(own, Mapping) and isinstance(setup, Mapping):
        return {**setup, **own}
    return own


def with_defaults(params: Mapping[str, Any], defaults: Any) -> dict[str, Any]:
    """The step's arguments with each default it does not give (`defaults` rendered first
    when a template; a mapping's values are rendered with the arguments)."""
    if not isinstance(defaults, Mapping):
        return dict(params)
    return {**{k: v for k, v in defaults.items() if k not in params}, **params}
