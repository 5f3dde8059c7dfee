"""Ansible's common lookups in templates and conditions: `lookup('env', 'HOME')`,
`lookup('file', 'motd.txt')`, `lookup('vars', 'name')`, `sequence` and `indexed_items` (what
`with_sequence` and `with_indexed_items` loop over), and `query`/`q` (always a list).

They run on the controller, as in Ansible. `file` reads a path relative to the role's `files/`
directory and the role's own (in a role's step), then the playbook's `files/` and its own. Any
other lookup plugin is refused when the playbook loads (`unsupported`), not when a host first
renders it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import Context

from fleetfix.playbook.extravars import parse_kv

SUPPORTED = ("env", "file", "vars", "sequence", "indexed_items")
CALLS = ("lookup", "query", "q")
_MISSING = object()


class LookupFailed(Exception):
    """A lookup failed; the message is Ansible's."""


def _env(_context: Context, terms: tuple[Any, ...], options: Mapping[str, Any]) -> list[Any]:
    default = options.get("default", "")
    return [os.environ.get(str(term), default) for term in terms]


def _file(context: Context, terms: tuple[Any, ...], options: Mapping[str, Any]) -> list[Any]:
    bases = [Path(str(context[d])) for d in ("role_path", "playbook_dir") if context.get(d)]
    found: list[Any] = []
    for term in terms:
        path = Path(str(term))
        relative = [place / path for base in bases for place in (base / "files", base)]
        candidates = [path] if path.is_absolute() else relative
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is None:
            raise LookupFailed(f"could not locate file in lookup: {term}")
        text = hit.read_text(encoding="utf-8")
        if options.get("rstrip", True):
            text = text.rstrip()
        if options.get("lstrip", False):
            text = text.lstrip()
        found.append(text)
    return found


def _vars(context: Context, terms: tuple[Any, ...], options: Mapping[str, Any]) -> list[Any]:
    default = options.get("default", _MISSING)
    found: list[Any] = []
    for term in terms:
        value = context.resolve_or_missing(str(term))
        if value is jinja2.utils.missing:
            if default is _MISSING:
                raise LookupFailed(f"No variable found with this name: {term}")
            value = default
        found.append(value)
    return found


_SEQUENCE_SHORTCUT = re.compile(
    r"^((0?x?[0-9a-f]+)-)?(0?x?[0-9a-f]+)(/(0?x?[0-9a-f]+))?(:(.+))?$", re.IGNORECASE
)
_SEQUENCE_FIELDS = ("start", "end", "stride", "count", "format")


def _sequence(_context: Context, terms: tuple[Any, ...], options: Mapping[str, Any]) -> list[Any]:
    """Ansible's `sequence` (`with_sequence`): `start=1 end=5 stride=1 format=%d`, `count=`,
    or the shortcut `[start-]end[/stride][:format]`; numbers as formatted strings."""
    found: list[Any] = []
    for term in terms or ("",):
        fields = {"start": 1, "stride": 1, "format": "%d", **options}
        fields.update(_sequence_fields(str(term)))
        found.extend(sequence_items(fields))
    return found


def _sequence_fields(term: str) -> dict[str, Any]:
    shortcut = _SEQUENCE_SHORTCUT.match(term.strip())
    if shortcut is not None:
        _, start, end, _, stride, _, form = shortcut.groups()
        given = {"start": start, "end": end, "stride": stride, "format": form}
        return {key: value for key, value in given.items() if value is not None}
    try:
        fields: dict[str, Any] = dict(parse_kv(term)) if term.strip() else {}
    except ValueError as exc:
        raise LookupFailed(
            f"unknown error parsing with_sequence arguments: {term!r}. Error was: {exc}"
        ) from exc
    unknown = [key for key in fields if key not in _SEQUENCE_FIELDS]
    if unknown:
        raise LookupFailed(f"unrecognized arguments to with_sequence: {unknown}")
    return fields


def _sequence_int(fields: Mapping[str, Any], name: str) -> int | None:
    value = fields.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    text = str(value).strip()
    try:
        return int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text)
    except ValueError:
        raise LookupFailed(
            f"Invalid type for configuration option setting: {name}: {text!r} is not an integer"
        ) from None


def sequence_items(fields: Mapping[str, Any]) -> list[str]:
    """The numbers of one sequence, formatted; its problems in Ansible's words.

    Raises:
        LookupFailed: the fields do not make a sequence.
    """
    start, end, stride, count = (
        _sequence_int(fields, name) for name in ("start", "end", "stride", "count")
    )
    start, stride, form = start or 0, 1 if stride is None else stride, str(fields["format"])
    if count is None and end is None:
        raise LookupFailed("must specify count or end in with_sequence")
    if count is not None and end is not None:
        raise LookupFailed("can't specify both count and end in with_sequence")
    if count is not None:
        if count == 0:
            return []
        end = start + count * stride - 1
    assert end is not None
    if stride > 0 and end < start:
        raise LookupFailed("to count backwards make stride negative")
    if stride < 0 and end > start:
        raise LookupFailed("to count forward don't make stride negative")
    if stride == 0:
        return []
    if form.count("%") != 1:
        raise LookupFailed(f"bad formatting string: {form}")
    try:
        return [form % number for number in range(start, end + (1 if stride > 0 else -1), stride)]
    except (TypeError, ValueError):
        raise LookupFailed(f"problem formatting {start!r} with {form!r}") from None


def _indexed_items(
    _context: Context, terms: tuple[Any, ...], _options: Mapping[str, Any]
) -> list[Any]:
    """Ansible's `indexed_items` (`with_indexed_items`): [index, item] pairs of the list,
    flattened one level first."""
    given: Any = terms[0] if len(terms) == 1 else list(terms)
    if not isinstance(given, list | tuple):
        raise LookupFailed("with_indexed_items expects a list")
    flat = [leaf for item in given for leaf in (item if isinstance(item, list | tuple) else [item])]
    return [[index, item] for index, item in enumerate(flat)]


_PLUGINS: Mapping[str, Callable[[Context, tuple[Any, ...], Mapping[str, Any]], list[Any]]] = {
    "env": _env,
    "file": _file,
    "vars": _vars,
    "sequence": _sequence,
    "indexed_items": _indexed_items,
}


def _run(context: Context, name: str, terms: tuple[Any, ...], options: dict[str, Any]) -> Any:
    plugin = _PLUGINS.get(name)
    if plugin is None:
        raise LookupFailed(f"lookup plugin {name!r} is not supported by fleetfix")
    errors = options.pop("errors", "strict")
    options.pop("wantlist", None)
    try:
        return plugin(context, terms, options)
    except LookupFailed:
        if errors in ("ignore", "warn"):
            return []
        raise


@jinja2.pass_context
def lookup(context: Context, name: str, *terms: Any, **options: Any) -> Any:
    """One value for one term; several joined with commas (a list with wantlist=True)."""
    wantlist = bool(options.get("wantlist", False))
    values = _run(context, name, terms, dict(options))
    if wantlist:
        return values
    if len(values) == 1:
        return values[0]
    return ",".join(str(v) for v in values)


@jinja2.pass_context
def query(context: Context, name: str, *terms: Any, **options: Any) -> list[Any]:
    return list(_run(context, name, terms, dict(options)))


GLOBALS: Mapping[str, Any] = {"lookup": lookup, "query": query, "q": query}


def unsupported(tree: nodes.Template) -> Iterator[str]:
    """The names of lookup plugins a template asks for that fleetfix does not have."""
    for call in tree.find_all(nodes.Call):
        callee = call.node
        if not (isinstance(callee, nodes.Name) and callee.name in CALLS and call.args):
            continue
        first = call.args[0]
        name = first.value if isinstance(first, nodes.Const) else None
        if isinstance(name, str) and name not in SUPPORTED:
            yield name
