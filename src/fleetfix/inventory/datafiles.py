"""Read YAML/JSON data files (inventories, group_vars, host_vars) safely, as Ansible reads them.

Like Ansible's DataLoader, text is tried as JSON first and then as YAML 1.1 with the safe
loader; `!unsafe` marks strings as never to be templated and `__ansible_unsafe` does the same in
JSON. Vault-encrypted files and `!vault` values are refused (fleetfix holds no vault secrets).
Parser errors become InventoryError at the file, line and column the parser names; a character
neither JSON nor YAML allows (a NUL byte, a control character) is refused before parsing; data
nested deeper than MAX_DEPTH collections, or whose YAML aliases expand it to more than
MAX_EXPANDED_VALUES values (a "billion laughs"), is refused after it, before anything walks it.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Hashable, Sequence
from typing import Any

import yaml

from fleetfix.errors import InventoryError, SourcePosition, describe_character
from fleetfix.inventory.model import UnsafeText
from fleetfix.yamlvalues import PlacedValueErrors

VAULT_HEADER = "$ANSIBLE_VAULT"

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# What YAML 1.1 does not allow in a stream (PyYAML's Reader.NON_PRINTABLE); JSON allows less.
NOT_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


class _VaultRefusedError(Exception):
    """A JSON document holds a vault-encrypted value."""


class _Loader(PlacedValueErrors, _BaseLoader):  # type: ignore[valid-type,misc]
    """The safe YAML loader plus Ansible's `!unsafe` tag; `!vault` is refused; values it
    cannot build are refused with their place."""


def _construct_unsafe(loader: _Loader, node: yaml.Node) -> Any:
    # Ansible constructs the node as if untagged, then distrusts every string inside it.
    plain = copy.copy(node)
    plain.tag = loader.resolve(type(node), node.value, (True, False))
    return _distrust(loader.construct_object(plain, deep=True))


def _refuse_vault(loader: _Loader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None,
        None,
        "vault-encrypted values are not supported by fleetfix (no vault secrets)",
        node.start_mark,
    )


_Loader.add_constructor("!unsafe", _construct_unsafe)
_Loader.add_constructor("!vault", _refuse_vault)
_Loader.add_constructor("!vault-encrypted", _refuse_vault)


def read_text(path: str) -> str:
    """The text of a data file (see decode_text).

    Raises:
        InventoryError: unreadable or vault-encrypted.
    """
    return decode_text(path, read_bytes(path))


def list_directory(path: str) -> list[str]:
    """The sorted entry names of a directory. Raises InventoryError when it cannot be listed."""
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        raise InventoryError(f"cannot list {path}: {exc.strerror or exc}") from exc


MAX_FILE_BYTES = 128 * 1024 * 1024
"""An inventory or vars file larger than this is refused (a 1,000,000-host INI file is about
20 MB); reading stops there, so `-i /dev/zero` is an error, not the machine's memory."""


def read_bytes(path: str) -> bytes:
    """The raw bytes of an inventory file.

    Raises:
        InventoryError: it cannot be read, or holds more than MAX_FILE_BYTES.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InventoryError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise InventoryError(f"{path} is larger than {MAX_FILE_BYTES // 2**20} MiB; refused")
    return data


def decode_text(path: str, data: bytes) -> str:
    """`data` as text, undecodable bytes kept as surrogates (Ansible's surrogate_or_strict).

    Raises:
        InventoryError: the file is vault-encrypted.
    """
    refuse_vault(path, data)
    return data.decode("utf-8", "surrogateescape")


def refuse_vault(path: str, data: bytes) -> None:
    """Raise InventoryError when `data` is a vault-encrypted file."""
    if data.startswith(VAULT_HEADER.encode()):
        raise InventoryError(
            "vault-encrypted files are not supported by fleetfix (no vault secrets)",
            SourcePosition(path, 1),
            source_line=data.split(b"\n", 1)[0].decode("utf-8", "replace"),
        )


def load_data(path: str, text: str) -> Any:
    """The JSON or YAML document in `text` (from `path`); None for an empty document.

    Raises:
        InventoryError: neither valid JSON nor valid YAML; positioned where YAML failed.
    """
    refuse_characters(path, text, NOT_PRINTABLE)
    try:
        data = json.loads(text, object_hook=_json_object)
        _check_shape(path, text, data)
        return data
    except _VaultRefusedError as exc:
        raise InventoryError(str(exc), SourcePosition(path, 1)) from exc
    except (ValueError, RecursionError):
        pass
    try:
        # _Loader derives from the safe loader: no arbitrary Python objects.
        data = yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(path, text, exc) from exc
    except (yaml.YAMLError, RecursionError) as exc:
        raise InventoryError(f"YAML parsing failed: {exc}", SourcePosition(path, 1)) from exc
    _check_shape(path, text, data)
    return data


def refuse_characters(path: str, text: str, forbidden: re.Pattern[str]) -> None:
    """Raise InventoryError at the first character `forbidden` matches, naming it.

    Lines are counted as `str.splitlines` counts them, which is how the parsers number them."""
    match = forbidden.search(text)
    if match is None:
        return
    before = text[: match.start()].splitlines(keepends=True)
    at_line_start = not before or before[-1].endswith(tuple(_LINE_ENDS))
    line = len(before) + 1 if at_line_start else len(before)
    column = 1 if at_line_start else len(before[-1]) + 1
    position = SourcePosition(path, line, column)
    raise InventoryError(
        f"{describe_character(match.group())} is not allowed in an inventory file",
        position,
        source_line=line_text(text, position),
        hint="remove it (a file saved by a binary tool or a bad copy-paste?)",
    )


MAX_DEPTH = 100
"""Collections nested in collections, at most (50 levels of child groups fit)."""
MAX_EXPANDED_VALUES = 1_000_000
"""Values a document may stand for once its aliases are expanded (it holds far fewer)."""

_LINE_ENDS = ("\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _check_shape(path: str, text: str, data: Any) -> None:
    """Refuse data too deep or, with aliases expanded, too big; walks each value once."""
    too_deep = _first_too_deep(data)
    if too_deep is not None:
        position = locate(path, text, too_deep)
        raise InventoryError(
            f"data nested too deeply (more than {MAX_DEPTH} levels)",
            position,
            source_line=line_text(text, position),
        )
    expanded = _expanded_size(data)
    if expanded > MAX_EXPANDED_VALUES:
        raise InventoryError(
            f"YAML aliases expand this file to {expanded:,} values, more than"
            f" {MAX_EXPANDED_VALUES:,} (a 'billion laughs' document?)",
            SourcePosition(path, 1),
        )


def _items(value: Any) -> list[tuple[Hashable, Any]]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):
        return list(enumerate(value))
    return []


def _first_too_deep(data: Any) -> list[Hashable] | None:
    """The key path to a collection below MAX_DEPTH others, or None."""
    deepest_seen: dict[int, int] = {}
    pending: list[tuple[Any, list[Hashable]]] = [(data, [])]
    while pending:
        value, path = pending.pop()
        if len(path) >= MAX_DEPTH:
            return path
        if deepest_seen.get(id(value), -1) >= len(path):
            continue  # an alias already walked at least this deep
        deepest_seen[id(value)] = len(path)
        pending.extend(
            (item, [*path, key]) for key, item in _items(value) if isinstance(item, dict | list)
        )
    return None


def _expanded_size(data: Any) -> int:
    """How many values `data` stands for with shared (aliased) values counted each time."""
    sizes: dict[int, int] = {}
    pending: list[tuple[Any, bool]] = [(data, False)]
    while pending:
        value, children_done = pending.pop()
        if id(value) in sizes or not isinstance(value, dict | list):
            continue
        if children_done:
            sizes[id(value)] = 1 + sum(
                sizes.get(id(item), 1)
                for item in (value.values() if isinstance(value, dict) else value)
            )
        else:
            pending.append((value, True))
            pending.extend((item, False) for _, item in _items(value))
    return sizes.get(id(data), 1)


def locate(path: str, text: str, keys: Sequence[Hashable]) -> SourcePosition:
    """Where the value under `keys` (a path of mapping keys) starts; the deepest found part."""
    try:
        node = yaml.compose(text, Loader=_BaseLoader)
    except (yaml.YAMLError, RecursionError):
        return SourcePosition(path, 1)
    mark = node.start_mark if node is not None else None
    for key in keys:
        found = _key_node(node, key)
        if found is None:
            break
        key_node, node = found
        mark = key_node.start_mark
    if mark is None:
        return SourcePosition(path, 1)
    return SourcePosition(path, mark.line + 1, mark.column + 1)


def line_text(text: str, position: SourcePosition) -> str | None:
    """The source line at `position`, for error messages (see `shown`)."""
    lines = text.splitlines()
    if 1 <= position.line <= len(lines):
        return shown(lines[position.line - 1])
    return None


def shown(text: str) -> str:
    """`text` safe to print: what YAML would not allow (control characters, bytes that were
    not UTF-8) becomes U+FFFD, one for one, so a caret below still points right."""
    return NOT_PRINTABLE.sub("\ufffd", text)


def _key_node(node: yaml.Node | None, key: Hashable) -> tuple[yaml.Node, yaml.Node] | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and _same_key(key_node, key):
            return key_node, value_node
    return None


def _same_key(key_node: yaml.ScalarNode, key: Hashable) -> bool:
    if isinstance(key, str):
        return bool(key_node.value == key)
    try:
        return bool(yaml.safe_load(key_node.value) == key)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return False


def _distrust(value: Any) -> Any:
    if isinstance(value, str):
        return UnsafeText(value)
    if isinstance(value, list):
        return [_distrust(item) for item in value]
    if isinstance(value, dict):
        return {_distrust(key): _distrust(item) for key, item in value.items()}
    return value


def _json_object(pairs: dict[str, Any]) -> Any:
    if len(pairs) == 1 and isinstance(pairs.get("__ansible_unsafe"), str):
        return UnsafeText(pairs["__ansible_unsafe"])
    if len(pairs) == 1 and "__ansible_vault" in pairs:
        raise _VaultRefusedError("vault-encrypted values are not supported by fleetfix")
    return pairs


def _yaml_error(path: str, text: str, exc: yaml.MarkedYAMLError) -> InventoryError:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or str(exc)
    context = f" ({exc.context})" if exc.context else ""
    lines = text.splitlines()
    if mark is None:
        return InventoryError(f"YAML parsing failed: {problem}{context}", SourcePosition(path, 1))
    line, column = mark.line + 1, mark.column + 1
    if line > len(lines):
        # Unclosed brackets and quotes are only noticed at the end of the file; the last line
        # with content is where the operator has to look.
        problem = f"{problem} at the end of the file"
        line = max(
            (number for number, text_line in enumerate(lines, 1) if text_line.strip()), default=1
        )
        column = 1
    position = SourcePosition(path, line, column)
    return InventoryError(
        f"YAML parsing failed: {problem}{context}",
        position,
        source_line=line_text(text, position),
    )
