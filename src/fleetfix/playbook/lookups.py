"""Ansible's common lookups in templates and conditions: `lookup('env', 'HOME')`,
`lookup('file', 'motd.txt')`, `lookup('vars', 'name')`, `first_found`, and the ones the `with_`
loops run over (`sequence`, `indexed_items`, `dict`, `nested`, `together`, `subelements`,
`items`, `list`), plus `query`/`q` (always a list).

A `with_X:` loop is the template `{{ query('X', TERMS, _loop_terms=true) }}`: `_loop_terms`
says TERMS is the loop's whole value, spread into the lookup's terms as Ansible does (a list is
the terms, anything else the one term).

They run on the controller, as in Ansible. `file` reads a path relative to the role's `files/`
directory and the role's own (in a role's step), then the playbook's `files/` and its own. Any
other lookup plugin is refused when the playbook loads (`unsupported`), not when a host first
renders it.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import Context

from fleetfix.ansible_cfg import read_settings
from fleetfix.errors import FleetfixError
from fleetfix.playbook.extravars import parse_kv

SUPPORTED = (
    "env",
    "config",
    "file",
    "vars",
    "sequence",
    "indexed_items",
    "dict",
    "nested",
    "together",
    "subelements",
    "first_found",
    "items",
    "list",
)
CALLS = ("lookup", "query", "q")
_MISSING = object()


class LookupFailed(Exception):
    """A lookup failed; the message is Ansible's."""


def _env(_context: Context, terms: tuple[Any, ...], options: Mapping[str, Any]) -> list[Any]:
    default = options.get("default", "")
    return [os.environ.get(str(term), default) for term in terms]


_CONFIG: Mapping[str, tuple[str, Any]] = {
    "DEFAULT_PRIVATE_ROLE_VARS": ("private_role_vars", False),
    "DEFAULT_FORKS": ("forks", 5),
    "DEFAULT_TIMEOUT": ("timeout", 10),
    "DEFAULT_FORCE_HANDLERS": ("force_handlers", False),
    "ERROR_ON_MISSING_HANDLER": ("error_on_missing_handler", True),
    "HOST_KEY_CHECKING": ("host_key_checking", True),
}
"""ansible-core's config names fleetfix reads (fleetfix.ansible_cfg), with Ansible's defaults."""


def _config(_context: Context, terms: tuple[Any, ...], options: Mapping[str, Any]) -> list[Any]:
    """lookup('config', NAME): a setting as ansible.cfg or ANSIBLE_* sets it, else its
    default; only the settings fleetfix itself reads."""
    try:
        settings = read_settings(os.environ, Path.cwd())
    except FleetfixError as exc:
        raise LookupFailed(str(exc)) from exc
    found: list[Any] = []
    for term in terms:
        known = _CONFIG.get(str(term))
        if known is None:
            if options.get("on_missing", "error") == "skip":
                continue
            raise LookupFailed(
                f"Unable to find setting {term} (fleetfix reads {', '.join(sorted(_CONFIG))})"
            )
        setting = settings.get(known[0])
        found.append(setting.value if setting is not None else known[1])
    return found


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
    """Ansible's `indexed_items` (`with_indexed_items`): [index, item] pairs of the terms,
    flattened one level first. As ansible-core 2.19, a term that is not a list (a mapping,
    a string) is one item: its "with_indexed_items expects a list" error is gone."""
    return [[index, item] for index, item in enumerate(_flat(terms))]


def _flat(terms: Any) -> list[Any]:
    """Ansible's LookupBase._flatten: one level of lists spread."""
    return [leaf for term in terms for leaf in (term if isinstance(term, list | tuple) else [term])]


def _dict(_context: Context, terms: tuple[Any, ...], _options: Mapping[str, Any]) -> list[Any]:
    """Ansible's `dict` (`with_dict`): [{key, value}] of each mapping."""
    found: list[Any] = []
    for term in terms:
        if not isinstance(term, Mapping):
            raise LookupFailed(
                f"the 'dict' lookup plugin expects a dictionary, got '{term}' of type {type(term)})"
            )
        found.extend({"key": key, "value": value} for key, value in term.items())
    return found


def _nested(_context: Context, terms: tuple[Any, ...], _options: Mapping[str, Any]) -> list[Any]:
    """Ansible's `nested` (`with_nested`): the product of the lists, each item a flat list."""
    if not terms:
        raise LookupFailed("with_nested requires at least one element in the nested list")
    result: list[Any] = list(_as_list(terms[0]))
    for more in terms[1:]:
        result = [_flat([x, y]) for x in result for y in _as_list(more)]
    return [_flat(x) if isinstance(x, list | tuple) else [x] for x in result]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _together(_context: Context, terms: tuple[Any, ...], _options: Mapping[str, Any]) -> list[Any]:
    """Ansible's `together` (`with_together`): the lists zipped, short ones padded with None."""
    if not terms:
        raise LookupFailed("with_together requires at least one element in each list")
    lists = [_as_list(term) for term in terms]
    return [_flat(row) for row in itertools.zip_longest(*lists, fillvalue=None)]


def _items(_context: Context, terms: tuple[Any, ...], _options: Mapping[str, Any]) -> list[Any]:
    return _flat(terms)


def _list(_context: Context, terms: tuple[Any, ...], _options: Mapping[str, Any]) -> list[Any]:
    return list(terms)


_SUBELEMENT_FLAGS = ("skip_missing",)


def _subelements(
    _context: Context, terms: tuple[Any, ...], _options: Mapping[str, Any]
) -> list[Any]:
    """Ansible's `subelements` (`with_subelements`): [element, sub-item] for each sub-item of
    each element's list at the (dotted) key; the element without that key, as Ansible's."""
    prefix = "subelements lookup expects a list of two or three items, "
    if not 2 <= len(terms) <= 3:
        raise LookupFailed(prefix)
    if not isinstance(terms[0], list | tuple | Mapping) or not isinstance(terms[1], str):
        raise LookupFailed(
            prefix + "first a dict or a list, second a string pointing to the subkey"
        )
    keys = terms[1].split(".")
    elements: Any = terms[0]
    if isinstance(elements, Mapping):
        if elements.get("skipped", False) is not False:
            return []
        elements = list(elements.values())
    flags = terms[2] if len(terms) == 3 else {}
    if not isinstance(flags, Mapping) or any(k not in _SUBELEMENT_FLAGS for k in flags):
        raise LookupFailed(
            prefix + f"the optional third item must be a dict with flags {list(_SUBELEMENT_FLAGS)}"
        )
    skip_missing = str(flags.get("skip_missing", False)).lower() in ("true", "yes", "1", "on")
    found: list[Any] = []
    for element in elements:
        if not isinstance(element, Mapping):
            raise LookupFailed(f"subelements lookup expects a dictionary, got '{element}'")
        if element.get("skipped", False) is not False:
            continue
        first = dict(element)  # Ansible pops the sub-list from (its copy of) the element
        sublist = _sublist(first, keys, skip_missing)
        found.extend([first, sub] for sub in sublist)
    return found


def _sublist(element: dict[str, Any], keys: list[str], skip_missing: bool) -> list[Any]:
    value: Any = element
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        if key not in value:
            if skip_missing:
                return []
            raise LookupFailed(f"could not find '{key}' key in iterated item '{value}'")
        if not last:
            if not isinstance(value[key], Mapping):
                if skip_missing:
                    return []
                raise LookupFailed(
                    f"the key {key} should point to a dictionary, got '{value[key]}'"
                )
            value[key] = dict(value[key])
            value = value[key]
        elif not isinstance(value[key], list | tuple):
            raise LookupFailed(f"the key {key} should point to a list, got '{value[key]}'")
        else:
            return list(value.pop(key))
    return []


def _first_found(context: Context, terms: tuple[Any, ...], options: Mapping[str, Any]) -> list[Any]:
    """Ansible's `first_found`: the absolute path of the first file that exists, searched as
    `file` searches (and a role's `tasks/`); [] with skip=True when none does."""
    skip = bool(options.get("skip", False))
    names = _first_found_names(terms or (options.get("files", []),), options)
    for name in names:
        hit = _search(context, name, ("files", "tasks", "vars", "templates"))
        if hit is not None:
            return [str(hit.absolute())]
    if skip:
        return []
    raise LookupFailed("No file was found when using first_found.")


def _first_found_names(terms: Any, options: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for term in terms:
        if isinstance(term, Mapping):
            files, paths = term.get("files", []), term.get("paths", options.get("paths", []))
        elif isinstance(term, str):
            files, paths = [term], options.get("paths", [])
        elif isinstance(term, list | tuple):
            names.extend(_first_found_names(term, options))
            continue
        else:
            raise LookupFailed(
                "Invalid term supplied. A string, dict or list is required,"
                f" not {type(term).__name__!r})."
            )
        file_list = _split_on(files, ",;")
        path_list = _split_on(paths, ",:;")
        names.extend(
            [os.path.join(p, f) for p in path_list for f in file_list] if path_list else file_list
        )
    return names


def _split_on(value: Any, separators: str) -> list[str]:
    words = [value] if isinstance(value, str) else list(value or [])
    return [part for word in words for part in re.split(f"[{separators}]", str(word)) if part]


def _search(context: Context, name: str, subdirs: tuple[str, ...]) -> Path | None:
    path = Path(name)
    if path.is_absolute():
        return path if path.exists() else None
    bases = [Path(str(context[d])) for d in ("role_path", "playbook_dir") if context.get(d)]
    candidates = [base / sub / path for base in bases for sub in subdirs]
    candidates += [base / path for base in bases]
    return next((c for c in candidates if c.exists()), None)


_PLUGINS: Mapping[str, Callable[[Context, tuple[Any, ...], Mapping[str, Any]], list[Any]]] = {
    "env": _env,
    "config": _config,
    "file": _file,
    "vars": _vars,
    "sequence": _sequence,
    "indexed_items": _indexed_items,
    "dict": _dict,
    "nested": _nested,
    "together": _together,
    "subelements": _subelements,
    "first_found": _first_found,
    "items": _items,
    "list": _list,
}


def _run(
    context: Context, name: str, terms: tuple[Any, ...], options: dict[str, Any]
) -> list[Any] | None:
    """The plugin's values; None when it failed under errors=ignore/warn."""
    plugin = _PLUGINS.get(name)
    if plugin is None:
        raise LookupFailed(f"lookup plugin {name!r} is not supported by fleetfix")
    errors = options.pop("errors", "strict")
    options.pop("wantlist", None)
    if options.pop("_loop_terms", False):  # a with_ loop's value: a list is the terms
        whole = terms[0] if terms else []
        terms = tuple(whole) if isinstance(whole, list | tuple) else (whole,)
    try:
        return plugin(context, terms, options)
    except LookupFailed as exc:
        if errors in ("ignore", "warn"):
            return None
        # ansible-core 2.19 (AnsibleTemplatePluginRuntimeError, its cause joined after it)
        raise LookupFailed(f"The lookup plugin {name!r} failed: {exc}") from None


@jinja2.pass_context
def lookup(context: Context, name: str, *terms: Any, **options: Any) -> Any:
    """Ansible's rule: the list with wantlist=True; else one value alone, several strings
    joined with commas, and any other list as it is."""
    wantlist = bool(options.get("wantlist", False))
    values = _run(context, name, terms, dict(options))
    if values is None:  # failed, errors ignored: Ansible's None (or [] with wantlist)
        return [] if wantlist else None
    if wantlist:
        return values
    if len(values) == 1:
        return values[0]
    if values and all(isinstance(v, str) for v in values):
        return ",".join(values)
    return values


@jinja2.pass_context
def query(context: Context, name: str, *terms: Any, **options: Any) -> list[Any]:
    return list(_run(context, name, terms, dict(options)) or ())


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
