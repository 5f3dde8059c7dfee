"""The Jinja2 filters and tests the sandbox offers: Ansible-compatible, pure, no I/O.

`FILTERS` and `TESTS` are what `conditions.Templar` installs in its sandboxed environment; each
behaves as its ansible-core namesake for the arguments playbooks pass (the unit tests compare
them with Ansible's own), except that `bool` refuses words it would have to guess.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import json
import operator
import os
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import jinja2
import yaml

from fleetfix.booleans import boolean
from fleetfix.knowledge.remedy import decide, not_fixed
from fleetfix.probes.base import to_data

__all__ = ["FILTERS", "TESTS"]

# ---------------------------------------------------------------- filters (Ansible-compatible)


def to_bool(value: object) -> bool:
    """Ansible's `bool` filter without its deprecated guessing: unknown words are an error."""
    try:
        return boolean(value)
    except ValueError:
        raise ValueError(
            f"cannot interpret {value!r} as a boolean (use yes/no, true/false, 1/0)"
        ) from None


def _flags(ignorecase: bool, multiline: bool) -> int:
    return (re.IGNORECASE if ignorecase else 0) | (re.MULTILINE if multiline else 0)


def _group_ref(arg: str) -> int | str:
    """'\\1' -> 1, '\\g<name>' -> 'name' (regex_search's backreference arguments)."""
    if match := re.fullmatch(r"\\g<(\w+)>", arg):
        name = match.group(1)
        return int(name) if name.isdigit() else name
    if match := re.fullmatch(r"\\(\d+)", arg):
        return int(match.group(1))
    raise ValueError(
        f"regex_search: unknown group reference {arg!r} (use '\\\\1' or '\\\\g<name>')"
    )


def regex_search(
    value: object, regex: str, *groups: str, ignorecase: bool = False, multiline: bool = False
) -> str | list[str] | None:
    """The first match (or the listed groups of it), None when nothing matches."""
    refs = [_group_ref(group) for group in groups]
    match = re.search(regex, str(value), _flags(ignorecase, multiline))
    if match is None:
        return None
    if not refs:
        return match.group()
    return [match.group(ref) for ref in refs]


def regex_replace(  # noqa: PLR0917 -- Ansible's positional signature, as playbooks call it
    value: object = "",
    pattern: str = "",
    replacement: str = "",
    ignorecase: bool = False,
    multiline: bool = False,
    count: int = 0,
) -> str:
    """re.sub over the text form of value."""
    return re.sub(
        pattern, replacement, str(value), count=count, flags=_flags(ignorecase, multiline)
    )


def regex_findall(
    value: object, regex: str, multiline: bool = False, ignorecase: bool = False
) -> list[Any]:
    """Every match, as re.findall returns them."""
    return re.findall(regex, str(value), _flags(ignorecase, multiline))


def _plain(value: Any) -> Any:
    """JSON/YAML-able data from facts (dataclasses, enums, sets, tuples, read-only mappings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {
            (k if isinstance(k, str | int | float | bool) else str(k)): _plain(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return value


def to_json(value: Any, **kwargs: Any) -> str:
    return json.dumps(_plain(value), **kwargs)


def to_nice_json(value: Any, indent: int = 4, sort_keys: bool = True, **kwargs: Any) -> str:
    kwargs.pop("separators", None)
    return json.dumps(
        _plain(value), indent=indent, sort_keys=sort_keys, separators=(",", ": "), **kwargs
    )


def from_json(text: str) -> Any:
    return json.loads(text)


def to_yaml(value: Any, default_flow_style: bool | None = None, **kwargs: Any) -> str:
    text: str = yaml.safe_dump(
        _plain(value), allow_unicode=True, default_flow_style=default_flow_style, **kwargs
    )
    return text


def to_nice_yaml(value: Any, indent: int = 4, **kwargs: Any) -> str:
    kwargs.setdefault("default_flow_style", False)
    return to_yaml(value, indent=indent, **kwargs)


def from_yaml(text: str) -> Any:
    return yaml.safe_load(text)


def quote(value: object) -> str:
    """Quote one shell word (None quotes as the empty string, as in Ansible)."""
    return shlex.quote("" if value is None else str(value))


def dict2items(
    mapping: Mapping[Any, Any], key_name: str = "key", value_name: str = "value"
) -> list[dict[str, Any]]:
    if not isinstance(mapping, Mapping):
        raise TypeError(f"dict2items requires a mapping, got {type(mapping).__name__}")
    return [{key_name: key, value_name: value} for key, value in mapping.items()]


def items2dict(
    items: Iterable[Mapping[str, Any]], key_name: str = "key", value_name: str = "value"
) -> dict[Any, Any]:
    if isinstance(items, str | Mapping):
        raise TypeError(f"items2dict requires a list, got {type(items).__name__}")
    try:
        return {item[key_name]: item[value_name] for item in items}
    except (KeyError, TypeError) as exc:
        raise TypeError(
            f"items2dict requires each item to have the keys {key_name!r} and {value_name!r}"
        ) from exc


_LIST_MERGES = ("replace", "keep", "append", "prepend", "append_rp", "prepend_rp")


def combine(*terms: Any, recursive: bool = False, list_merge: str = "replace") -> dict[Any, Any]:
    """Merge mappings left to right (`a | combine(b, c)`, or a list of mappings)."""
    if list_merge not in _LIST_MERGES:
        raise ValueError(f"combine: list_merge must be one of {', '.join(_LIST_MERGES)}")
    merged: dict[Any, Any] = {}
    for term in flatten(terms, levels=1):
        if not isinstance(term, Mapping):
            raise TypeError(f"combine expects mappings, got {type(term).__name__}")
        merged = _merge(merged, term, recursive, list_merge)
    return merged


def _merge(
    low: Mapping[Any, Any], high: Mapping[Any, Any], recursive: bool, list_merge: str
) -> dict[Any, Any]:
    result = dict(low)
    for key, value in high.items():
        old = result.get(key)
        if recursive and isinstance(old, Mapping) and isinstance(value, Mapping):
            result[key] = _merge(old, value, recursive, list_merge)
        elif isinstance(old, list) and isinstance(value, list):
            result[key] = _merge_lists(old, value, list_merge)
        else:
            result[key] = value
    return result


def _merge_lists(old: list[Any], new: list[Any], how: str) -> list[Any]:
    if how == "keep":
        return old
    if how == "append":
        return old + new
    if how == "prepend":
        return new + old
    if how == "append_rp":
        return [item for item in old if item not in new] + new
    if how == "prepend_rp":
        return new + [item for item in old if item not in new]
    return new


def flatten(value: Any, levels: int | None = None, skip_nulls: bool = True) -> list[Any]:
    """Nested lists made flat (all levels, or `levels` of them)."""
    flat: list[Any] = []
    for item in value:
        if skip_nulls and item in (None, "None", "null"):
            continue
        if isinstance(item, list | tuple) and (levels is None or levels > 0):
            flat.extend(flatten(item, None if levels is None else levels - 1, skip_nulls))
        else:
            flat.append(item)
    return flat


def mandatory(value: Any, msg: str | None = None) -> Any:
    if isinstance(value, jinja2.Undefined):
        if msg:
            raise jinja2.UndefinedError(msg)
        value._fail_with_undefined_error()
    return value


def ternary(value: Any, true_val: Any, false_val: Any, none_val: Any = None) -> Any:
    if value is None and none_val is not None:
        return none_val
    return true_val if value else false_val


def b64encode(text: str, encoding: str = "utf-8") -> str:
    return base64.b64encode(str(text).encode(encoding)).decode("ascii")


def b64decode(text: str, encoding: str = "utf-8") -> str:
    return base64.b64decode(str(text)).decode(encoding)


def split(text: str, separator: str | None = None, maxsplit: int = -1) -> list[str]:
    return str(text).split(separator, maxsplit)


def type_debug(value: Any) -> str:
    return type(value).__name__


def _unique_list(items: Iterable[Any]) -> list[Any]:
    result: list[Any] = []
    for item in items:
        if item not in result:
            result.append(item)
    return result


def union(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    return _unique_list([*a, *b])


def intersect(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    others = list(b)
    return _unique_list(item for item in a if item in others)


def difference(a: Iterable[Any], b: Iterable[Any]) -> list[Any]:
    others = list(b)
    return _unique_list(item for item in a if item not in others)


def zip_lists(*lists: Iterable[Any]) -> list[tuple[Any, ...]]:
    return list(zip(*lists, strict=False))


def fleetfix_remedy(smi: Any, xid: Any = None, services: Any = None) -> dict[str, Any]:
    """fleetfix's own filter: what the node's GPUs need now (knowledge/remedy.py), from
    registered `nvidia_smi` (and `xid`, `services`) facts:
    `{{ smi.facts | fleetfix_remedy(xid.facts, services.facts) }}` gives `remedy` (none, reset,
    recover_imex, reboot, human, field_diag, rma), `gpus`, `reset_gpus`, `why`, `needs_action`,
    `rma`. Undefined or failed nvidia-smi facts give `human`; without `services` the Fabric
    Manager rule is not applied."""
    smi_data = _facts_data(smi)
    return decide(smi_data, _facts_data(xid), _facts_data(services)).to_data()


def fleetfix_not_fixed(result: Any, fault: Any) -> str:
    """fleetfix's own filter: the drain reason for a node a repair did not fix, saying what it
    needs next (knowledge/remedy.py `not_fixed`): `{{ ansible_failed_result |
    fleetfix_not_fixed(need.why | first) }}`."""
    ladder = result.get("ladder") if isinstance(result, Mapping) else None
    rungs = [r for r in ladder or () if isinstance(r, Mapping)]
    return not_fixed(str(fault), rungs)


def _facts_data(value: Any) -> Mapping[str, Any] | None:
    if value is None or isinstance(value, jinja2.Undefined):
        return None
    data = to_data(value)
    return data if isinstance(data, Mapping) else None


FILTERS: Mapping[str, Callable[..., Any]] = MappingProxyType(
    {
        "bool": to_bool,
        "regex_search": regex_search,
        "regex_replace": regex_replace,
        "regex_findall": regex_findall,
        "regex_escape": re.escape,
        "to_json": to_json,
        "to_nice_json": to_nice_json,
        "from_json": from_json,
        "to_yaml": to_yaml,
        "to_nice_yaml": to_nice_yaml,
        "from_yaml": from_yaml,
        "quote": quote,
        "dict2items": dict2items,
        "items2dict": items2dict,
        "combine": combine,
        "flatten": flatten,
        "mandatory": mandatory,
        "ternary": ternary,
        "b64encode": b64encode,
        "b64decode": b64decode,
        "basename": posixpath.basename,
        "dirname": posixpath.dirname,
        "expanduser": os.path.expanduser,  # on the controller, as Ansible's filter
        "expandvars": os.path.expandvars,
        "split": split,
        "type_debug": type_debug,
        "union": union,
        "intersect": intersect,
        "difference": difference,
        "zip": zip_lists,
        "fleetfix_remedy": fleetfix_remedy,
        "fleetfix_not_fixed": fleetfix_not_fixed,
    }
)

# ---------------------------------------------------------------- tests (Ansible-compatible)


def _result(value: Any, test: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(
            f"the {test!r} test expects a registered result, got {type(value).__name__}"
        )
    return value


def failed(result: Any) -> bool:
    return bool(_result(result, "failed").get("failed"))


def succeeded(result: Any) -> bool:
    return not bool(_result(result, "succeeded").get("failed"))


def changed(result: Any) -> bool:
    return bool(_result(result, "changed").get("changed"))


def skipped(result: Any) -> bool:
    return bool(_result(result, "skipped").get("skipped"))


def unreachable(result: Any) -> bool:
    return bool(_result(result, "unreachable").get("unreachable"))


def reachable(result: Any) -> bool:
    return not unreachable(result)


_VERSION_OPERATORS: Mapping[str, Callable[[Any, Any], bool]] = MappingProxyType(
    {
        "==": operator.eq,
        "=": operator.eq,
        "eq": operator.eq,
        "<": operator.lt,
        "lt": operator.lt,
        "<=": operator.le,
        "le": operator.le,
        ">": operator.gt,
        "gt": operator.gt,
        ">=": operator.ge,
        "ge": operator.ge,
        "!=": operator.ne,
        "<>": operator.ne,
        "ne": operator.ne,
    }
)
_VERSION_PART = re.compile(r"(\d+|[a-z]+|\.)")


def _loose_version(text: object) -> list[int | str]:
    """distutils' LooseVersion components: numbers as ints, everything else as strings."""
    parts = [p for p in _VERSION_PART.split(str(text)) if p and p != "."]
    return [int(p) if p.isdigit() else p for p in parts]


def version(
    value: object, other: object, operator: str = "eq", version_type: str | None = None
) -> bool:
    """Ansible's `version` test with its default (loose) comparison."""
    if version_type not in (None, "loose"):
        raise ValueError(f"version_type {version_type!r} is not supported (only 'loose')")
    compare = _VERSION_OPERATORS.get(operator)
    if compare is None:
        raise ValueError(f"invalid version operator {operator!r}")
    if not value or not other:
        raise ValueError("version comparison needs two non-empty versions")
    return compare(_loose_version(value), _loose_version(other))


def match(
    value: object, pattern: str = "", ignorecase: bool = False, multiline: bool = False
) -> bool:
    return re.match(pattern, str(value), _flags(ignorecase, multiline)) is not None


def search(
    value: object, pattern: str = "", ignorecase: bool = False, multiline: bool = False
) -> bool:
    return re.search(pattern, str(value), _flags(ignorecase, multiline)) is not None


def contains(container: Any, item: Any) -> bool:
    return item in container


def subset(a: Iterable[Any], b: Iterable[Any]) -> bool:
    others = list(b)
    return all(item in others for item in a)


def superset(a: Iterable[Any], b: Iterable[Any]) -> bool:
    return subset(b, a)


def truthy(value: Any, convert_bool: bool = False) -> bool:
    return to_bool(value) if convert_bool else bool(value)


def falsy(value: Any, convert_bool: bool = False) -> bool:
    return not truthy(value, convert_bool)


TESTS: Mapping[str, Callable[..., bool]] = MappingProxyType(
    {
        "failed": failed,
        "failure": failed,
        "succeeded": succeeded,
        "success": succeeded,
        "successful": succeeded,
        "changed": changed,
        "change": changed,
        "skipped": skipped,
        "skip": skipped,
        "unreachable": unreachable,
        "reachable": reachable,
        "version": version,
        "version_compare": version,
        "match": match,
        "search": search,
        "regex": search,
        "contains": contains,
        "subset": subset,
        "issubset": subset,
        "superset": superset,
        "issuperset": superset,
        "truthy": truthy,
        "falsy": falsy,
    }
)


def now(utc: bool = False, fmt: str | None = None) -> datetime.datetime | str:
    """ansible-core's `now()` template global: the controller's time (local, or UTC), as a
    datetime or formatted with strftime's `fmt`."""
    if utc:
        moment = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    else:
        moment = datetime.datetime.now()
    return moment.strftime(fmt) if fmt else moment


GLOBALS: Mapping[str, Callable[..., Any]] = MappingProxyType({"now": now})
"""Template functions besides lookup()/query() (playbook/lookups.py)."""
