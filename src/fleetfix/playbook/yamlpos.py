"""Safe YAML loading that keeps the file, line and column of every key and value.

`parse_yaml` composes the text with PyYAML's safe loader, constructs plain Python values with
the safe constructor (merge keys, anchors and aliases work as usual) and returns a tree of
`Node`s: each node holds its plain value, its position and its source line, so a caller can
point a caret at any key or value. YAML errors become PlaybookError with a position.

Deliberate differences from `yaml.safe_load`: a key repeated in one mapping is reported (PyYAML
silently keeps the last), a recursive alias is refused, `!unsafe` marks a string that must never
be templated (Ansible's tag), and `!vault` is refused with a clear message. A character YAML does
not allow (a NUL byte, a control character) is refused before parsing, at its line and column;
so is a document nested deeper than MAX_DEPTH collections or one whose aliases expand it to
more than MAX_EXPANDED_NODES values (a "billion laughs"), which every later walk would choke on.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from fleetfix.errors import PlaybookError, SourcePosition, describe_character
from fleetfix.yamlvalues import PlacedValueErrors

# YAML's own line breaks (str.splitlines also splits on \f, \v and others YAML does not).
_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")
# What YAML 1.1 does not allow in a stream (PyYAML's Reader.NON_PRINTABLE).
_NOT_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
MAX_DEPTH = 100
"""Collections nested in collections, at most (a playbook needs about ten)."""
MAX_EXPANDED_NODES = 1_000_000
"""Values a document may stand for once its aliases are expanded."""
MAX_FILE_BYTES = 16 * 1024 * 1024
"""A playbook or vars file larger than this is refused; reading stops there (`/dev/zero`)."""


class UnsafeText(str):
    """A string tagged `!unsafe` in YAML: data, never rendered as a template."""

    __slots__ = ()


class NodeKind(enum.Enum):
    """The three YAML node shapes."""

    SCALAR = "scalar"
    SEQUENCE = "sequence"
    MAPPING = "mapping"


@dataclass(frozen=True, slots=True)
class Entry:
    """One key/value pair of a mapping, both with positions."""

    key: Node
    value: Node


@dataclass(frozen=True, slots=True)
class Node:
    """A YAML node: its plain Python value, where it starts, and its children."""

    kind: NodeKind
    value: Any
    position: SourcePosition
    source_line: str
    entries: tuple[Entry, ...] = ()  # mappings, in file order, duplicates resolved (last wins)
    items: tuple[Node, ...] = ()  # sequences
    style: str | None = None  # scalars: None (plain), "'", '"', '|' or '>'

    @property
    def is_mapping(self) -> bool:
        return self.kind is NodeKind.MAPPING

    @property
    def is_sequence(self) -> bool:
        return self.kind is NodeKind.SEQUENCE

    @property
    def is_scalar(self) -> bool:
        return self.kind is NodeKind.SCALAR

    def entry(self, key: str) -> Entry | None:
        """The entry whose key is `key`, or None."""
        for entry in self.entries:
            if entry.key.value == key:
                return entry
        return None

    def get(self, key: str) -> Node | None:
        """The value node of `key`, or None."""
        entry = self.entry(key)
        return entry.value if entry is not None else None

    def error(self, message: str, hint: str | None = None) -> PlaybookError:
        """A PlaybookError pointing at this node."""
        return PlaybookError(message, self.position, source_line=self.source_line, hint=hint)


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """A parsed file: its root node (None when empty) and non-fatal problems (duplicate keys)."""

    file: str
    root: Node | None
    problems: tuple[PlaybookError, ...] = ()


class _SafeLoader(PlacedValueErrors, yaml.SafeLoader):
    """The safe loader plus Ansible's `!unsafe` and a clear refusal of `!vault`; values it
    cannot build are refused with their place."""


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> UnsafeText:
    if not isinstance(node, ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, "!unsafe applies to a string only", node.start_mark
        )
    return UnsafeText(loader.construct_scalar(node))


def _refuse_vault(loader: yaml.SafeLoader, node: yaml.Node) -> None:
    raise yaml.constructor.ConstructorError(
        None,
        None,
        "Ansible Vault values are not supported; pass secrets with -e @file",
        node.start_mark,
    )


# Registered once at import on our own subclass (PyYAML copies the table per class), so no
# other loader in the process is affected.
_SafeLoader.add_constructor("!unsafe", _construct_unsafe)
_SafeLoader.add_constructor("!vault", _refuse_vault)


def load_yaml(path: str | Path) -> YamlDocument:
    """Read and parse one YAML file.

    Raises:
        PlaybookError: the file cannot be read, is not UTF-8, or is not valid YAML.
    """
    file = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PlaybookError(f"cannot read {file}: {reason}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise PlaybookError(f"{file} is larger than {MAX_FILE_BYTES // 2**20} MiB; refused")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PlaybookError("file is not valid UTF-8", SourcePosition(file, line, 1)) from exc
    return parse_yaml(text, file)


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse YAML text that came from `file` (used in positions only).

    Raises:
        PlaybookError: the text is not valid YAML, or uses a recursive alias or unknown tag.
    """
    lines = tuple(_LINE_BREAK.split(text))
    _refuse_unprintable(text, file, lines)
    try:
        loader = _SafeLoader(text)
    except yaml.reader.ReaderError as exc:  # the check above should have caught it
        raise _character_error(text, exc.position, file, lines) from exc
    try:
        composed = loader.get_single_node()
        if composed is None:
            return YamlDocument(file, None)
        problems = tuple(_duplicate_keys(composed, file, lines))
        loader.construct_object(composed, deep=True)
        _check_shape(composed, file, lines)
        root = _Builder(file, lines, loader).build(composed)
    except yaml.MarkedYAMLError as exc:
        raise _marked_error(exc, file, lines) from exc
    except yaml.YAMLError as exc:
        raise PlaybookError(f"invalid YAML: {exc}", SourcePosition(file, 1, 1)) from exc
    except RecursionError as exc:
        raise PlaybookError("YAML is nested too deeply", SourcePosition(file, 1, 1)) from exc
    finally:
        loader.dispose()
    return YamlDocument(file, root, problems)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _check_shape(root: yaml.Node, file: str, lines: tuple[str, ...]) -> None:
    """Refuse a document too deep or too big once expanded; walks each node once."""
    too_deep = _first_too_deep(root)
    if too_deep is not None:
        raise PlaybookError(
            f"YAML is nested too deeply (more than {MAX_DEPTH} levels)",
            _position(file, too_deep),
            source_line=_line(lines, too_deep.start_mark.line),
        )
    sizes = _expanded_sizes(root)
    if sizes[id(root)][1] > MAX_EXPANDED_NODES:
        # The smallest node over the limit is where the aliases multiply past it.
        node, size = min((entry for entry in sizes.values() if entry[1] > MAX_EXPANDED_NODES),
                         key=lambda entry: entry[1])  # fmt: skip
        raise PlaybookError(
            f"YAML aliases expand this value to {size:,} values, more than {MAX_EXPANDED_NODES:,}",
            _position(file, node),
            source_line=_line(lines, node.start_mark.line),
            hint="a 'billion laughs' document? write the values out instead of nesting aliases",
        )


def _first_too_deep(root: yaml.Node) -> yaml.Node | None:
    deepest_seen: dict[int, int] = {}
    pending = [(root, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_DEPTH:
            return node
        if deepest_seen.get(id(node), 0) >= depth:
            continue  # an alias already walked at least this deep
        deepest_seen[id(node)] = depth
        pending.extend(
            (child, depth + 1)
            for child in _children(node)
            if isinstance(child, MappingNode | SequenceNode)
        )
    return None


def _expanded_sizes(root: yaml.Node) -> dict[int, tuple[yaml.Node, int]]:
    """Each node's value count with aliases expanded (memoised: aliases share nodes)."""
    sizes: dict[int, tuple[yaml.Node, int]] = {}
    pending: list[tuple[yaml.Node, bool]] = [(root, False)]
    while pending:
        node, children_done = pending.pop()
        if id(node) in sizes:
            continue
        if children_done:
            total = 1 + sum(sizes[id(child)][1] for child in _children(node))
            sizes[id(node)] = (node, total)
        else:
            pending.append((node, True))
            pending.extend((child, False) for child in _children(node))
    return sizes


def _refuse_unprintable(text: str, file: str, lines: tuple[str, ...]) -> None:
    match = _NOT_PRINTABLE.search(text)
    if match is not None:
        raise _character_error(text, match.start(), file, lines)


def _character_error(text: str, index: int, file: str, lines: tuple[str, ...]) -> PlaybookError:
    """A PlaybookError at the character `text[index]`, named, its line shown without it."""
    line = len(_LINE_BREAK.findall(text, 0, index))
    start = max((m.end() for m in _LINE_BREAK.finditer(text, 0, index)), default=0)
    shown = _NOT_PRINTABLE.sub("\ufffd", _line(lines, line))
    return PlaybookError(
        f"{describe_character(text[index])} is not allowed in YAML",
        SourcePosition(file, line + 1, index - start + 1),
        source_line=shown,
        hint="remove it (a file saved by a binary tool or a bad copy-paste?)",
    )


def _marked_error(exc: yaml.MarkedYAMLError, file: str, lines: tuple[str, ...]) -> PlaybookError:
    """A PlaybookError at the mark PyYAML blamed, in PyYAML's words."""
    mark = exc.problem_mark or exc.context_mark
    context, problem = exc.context, exc.problem or exc.context or "invalid YAML"
    hint = None
    if context and exc.problem and problem.startswith("but "):
        problem = f"{context}, {problem}"  # "expected a single document..., but found another"
    elif context and exc.problem and exc.context_mark is not None:
        hint = f"{context} at line {exc.context_mark.line + 1}"  # "while parsing a flow sequence"
    if problem == "found unconstructable recursive node":
        problem = "recursive alias: a node contains itself"
    if mark is None:
        return PlaybookError(f"invalid YAML: {problem}", SourcePosition(file, 1, 1), hint=hint)
    position = SourcePosition(file, mark.line + 1, mark.column + 1)
    return PlaybookError(
        f"invalid YAML: {problem}", position, source_line=_line(lines, mark.line), hint=hint
    )


def _line(lines: tuple[str, ...], index: int) -> str:
    return lines[index] if 0 <= index < len(lines) else ""


def _position(file: str, node: yaml.Node) -> SourcePosition:
    return SourcePosition(file, node.start_mark.line + 1, node.start_mark.column + 1)


def _duplicate_keys(root: yaml.Node, file: str, lines: tuple[str, ...]) -> list[PlaybookError]:
    """Keys written twice in one mapping (before merge keys are applied: `<<` may override)."""
    problems: list[PlaybookError] = []
    seen_nodes: set[int] = set()
    pending: list[yaml.Node] = [root]
    while pending:
        node = pending.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, MappingNode):
            problems.extend(_duplicates_in(node, file, lines))
            pending.extend(child for pair in node.value for child in pair)
        elif isinstance(node, SequenceNode):
            pending.extend(node.value)
    return sorted(
        problems, key=lambda p: (p.position.line, p.position.column) if p.position else (0, 0)
    )


def _duplicates_in(node: MappingNode, file: str, lines: tuple[str, ...]) -> list[PlaybookError]:
    first_line: dict[str, int] = {}
    problems: list[PlaybookError] = []
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = key_node.value
        if key in first_line:
            problems.append(
                PlaybookError(
                    f"duplicate key {key!r}",
                    _position(file, key_node),
                    source_line=_line(lines, key_node.start_mark.line),
                    hint=f"the first is at line {first_line[key]}; only the last one counts",
                )
            )
        else:
            first_line[key] = key_node.start_mark.line + 1
    return problems


class _Builder:
    """Turns composed YAML nodes into `Node`s, sharing one `Node` per aliased YAML node."""

    def __init__(self, file: str, lines: tuple[str, ...], loader: _SafeLoader) -> None:
        self._file = file
        self._lines = lines
        self._loader = loader
        self._built: dict[int, Node] = {}

    def _value(self, node: yaml.Node) -> Any:
        constructed = self._loader.constructed_objects
        if node in constructed:
            return constructed[node]
        # !!omap, !!pairs and !!set build their parts without constructing those nodes.
        return self._loader.construct_object(node, deep=True)

    def build(self, node: yaml.Node) -> Node:
        # Construction ran first and refuses recursive nodes, so this walk always ends.
        done = self._built.get(id(node))
        if done is None:
            done = self._built[id(node)] = self._build_new(node)
        return done

    def _build_new(self, node: yaml.Node) -> Node:
        position = _position(self._file, node)
        source_line = _line(self._lines, node.start_mark.line)
        value = self._value(node)
        if isinstance(node, MappingNode):
            entries = self._entries(node)
            return Node(NodeKind.MAPPING, value, position, source_line, entries=entries)
        if isinstance(node, SequenceNode):
            items = tuple(self.build(item) for item in node.value)
            return Node(NodeKind.SEQUENCE, value, position, source_line, items=items)
        style = node.style if isinstance(node, ScalarNode) else None
        return Node(NodeKind.SCALAR, value, position, source_line, style=style)

    def _entries(self, node: MappingNode) -> tuple[Entry, ...]:
        # After construction, merge keys are flattened into node.value (merged pairs first);
        # keep the last pair per key, as the constructed dict does, in first-seen order.
        by_key: dict[Any, Entry] = {}
        for key_node, value_node in node.value:
            key = self._value(key_node)
            by_key[key] = Entry(self.build(key_node), self.build(value_node))
        return tuple(by_key.values())
