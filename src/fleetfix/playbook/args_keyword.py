"""The `args:` step keyword: more arguments for a shell, command or module step, as Ansible
reads them (`shell: make` + `args: {chdir: /src, creates: out}`, `raw: uptime` +
`args: {executable: /bin/bash}`). They are merged into the step's own arguments before those
are read, so every check (unknown or repeated arguments) sees them where they are written.
"""

from __future__ import annotations

from fleetfix.errors import PlaybookError
from fleetfix.modules.specs import module_named
from fleetfix.playbook.catalog import shown
from fleetfix.playbook.extravars import parse_kv
from fleetfix.playbook.model import StepKind
from fleetfix.playbook.yamlpos import Entry, Node, NodeKind

ARGS_KINDS = frozenset({StepKind.SHELL, StepKind.COMMAND, StepKind.MODULE})


def with_args(kind: StepKind, kind_entry: Entry, args: Node) -> Entry:
    """The kind's entry with `args:` merged into its value.

    Raises:
        PlaybookError: args: is not a mapping, repeats an argument, or is on another kind.
    """
    if kind not in ARGS_KINDS:
        raise args.error("args: is only valid on shell, command and module steps")
    if not args.is_mapping:
        raise args.error(f"args: must be a mapping of arguments, not {shown(args.value)}")
    own = _own_entries(kind, kind_entry)
    written = {e.key.value for e in own}
    for entry in args.entries:
        if entry.key.value in written:
            raise entry.key.error(f"argument {shown(entry.key.value)} given twice (and in args:)")
    entries = (*own, *args.entries)
    value = kind_entry.value
    merged = Node(
        NodeKind.MAPPING,
        {e.key.value: e.value.value for e in entries},
        value.position,
        value.source_line,
        entries=entries,
    )
    return Entry(kind_entry.key, merged)


def _own_entries(kind: StepKind, entry: Entry) -> tuple[Entry, ...]:
    """The step's own arguments as mapping entries, whatever form they were written in."""
    value = entry.value
    if value.value is None:
        return ()
    if value.is_mapping:
        return value.entries
    if not isinstance(value.value, str):
        raise value.error(
            f"{entry.key.value} takes a string or a mapping, not {shown(value.value)}"
        )
    if kind in (StepKind.SHELL, StepKind.COMMAND):
        return (Entry(_scalar("cmd", value), value),)
    spec = module_named(str(entry.key.value))
    if spec is not None and spec.free_form is not None:
        return (Entry(_scalar(spec.free_form, value), value),)
    try:
        pairs = parse_kv(value.value)
    except ValueError as exc:
        raise PlaybookError(f"{entry.key.value}: {exc}", value.position) from exc
    return tuple(Entry(_scalar(k, value), _scalar(v, value)) for k, v in pairs.items())


def _scalar(text: str, where: Node) -> Node:
    return Node(NodeKind.SCALAR, text, where.position, where.source_line)
