"""Ansible's common lookups in templates and conditions: `lookup('env', 'HOME')`,
`lookup('file', 'motd.txt')`, `lookup('vars', 'name')`, and `query`/`q` (always a list).

They run on the controller, as in Ansible. `file` reads a path relative to the role's `files/`
directory and the role's own (in a role's step), then the playbook's `files/` and its own. Any
other lookup plugin is refused when the playbook loads (`unsupported`), not when a host first
renders it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import Context

SUPPORTED = ("env", "file", "vars")
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


_PLUGINS: Mapping[str, Callable[[Context, tuple[Any, ...], Mapping[str, Any]], list[Any]]] = {
    "env": _env,
    "file": _file,
    "vars": _vars,
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
