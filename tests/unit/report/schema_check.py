"""A small JSON Schema (2020-12 subset) validator for the report tests.

jsonschema is not in the project's venv (and the rules say not to add it), so this checks the
keywords report-v1.json uses, and refuses any keyword it does not know: the schema cannot
silently say more than the tests check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs"}
TYPES: Mapping[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class SchemaError(AssertionError):
    pass


def validate(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> None:
    """Raise SchemaError naming the JSON path of the first violation."""
    _check(value, schema, root or schema, "$")


def _check(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], path: str) -> None:
    unknown = set(schema) - ANNOTATIONS - set(KEYWORDS)
    if unknown:
        raise SchemaError(f"schema at {path} uses unsupported keywords {sorted(unknown)}")
    for keyword, argument in schema.items():
        if keyword in KEYWORDS:
            KEYWORDS[keyword](value, argument, schema, root, path)


def _ref(value: Any, ref: str, _: Any, root: Mapping[str, Any], path: str) -> None:
    if not ref.startswith("#/$defs/"):
        raise SchemaError(f"only local $defs refs are supported, not {ref}")
    _check(value, root["$defs"][ref.removeprefix("#/$defs/")], root, path)


def _type(value: Any, expected: str | list[str], path: str) -> None:
    names = [expected] if isinstance(expected, str) else expected
    if not any(TYPES[name](value) for name in names):
        raise SchemaError(f"{path}: {value!r} is not of type {names}")


def _properties(value: Any, props: Mapping[str, Any], _: Any, root: Any, path: str) -> None:
    if isinstance(value, dict):
        for key, sub in props.items():
            if key in value:
                _check(value[key], sub, root, f"{path}.{key}")


def _additional(value: Any, extra: Any, schema: Mapping[str, Any], root: Any, path: str) -> None:
    if not isinstance(value, dict):
        return
    for key in set(value) - set(schema.get("properties", {})):
        if extra is False:
            raise SchemaError(f"{path}: unexpected key {key!r}")
        if isinstance(extra, dict):
            _check(value[key], extra, root, f"{path}.{key}")


def _required(value: Any, names: list[str], _: Any, __: Any, path: str) -> None:
    if isinstance(value, dict):
        missing = [n for n in names if n not in value]
        if missing:
            raise SchemaError(f"{path}: missing {missing}")


def _items(value: Any, sub: Mapping[str, Any], _: Any, root: Any, path: str) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check(item, sub, root, f"{path}[{index}]")


def _enum(value: Any, options: list[Any], _: Any, __: Any, path: str) -> None:
    if value not in options:
        raise SchemaError(f"{path}: {value!r} not one of {options}")


def _const(value: Any, constant: Any, _: Any, __: Any, path: str) -> None:
    if value != constant:
        raise SchemaError(f"{path}: {value!r} != {constant!r}")


def _minimum(value: Any, bound: float, _: Any, __: Any, path: str) -> None:
    if TYPES["number"](value) and value < bound:
        raise SchemaError(f"{path}: {value} < {bound}")


def _maximum(value: Any, bound: float, _: Any, __: Any, path: str) -> None:
    if TYPES["number"](value) and value > bound:
        raise SchemaError(f"{path}: {value} > {bound}")


def _min_length(value: Any, bound: int, _: Any, __: Any, path: str) -> None:
    if isinstance(value, str) and len(value) < bound:
        raise SchemaError(f"{path}: shorter than {bound}")


def _pattern(value: Any, pattern: str, _: Any, __: Any, path: str) -> None:
    if isinstance(value, str) and not re.search(pattern, value):
        raise SchemaError(f"{path}: {value!r} does not match {pattern}")


KEYWORDS: Mapping[str, Any] = {
    "$ref": _ref,
    "type": lambda v, a, s, r, p: _type(v, a, p),
    "properties": _properties,
    "additionalProperties": _additional,
    "required": _required,
    "items": _items,
    "enum": _enum,
    "const": _const,
    "minimum": _minimum,
    "maximum": _maximum,
    "minLength": _min_length,
    "pattern": _pattern,
}
