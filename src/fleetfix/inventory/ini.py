"""Read Ansible's INI inventory format into an InventoryBuilder, line for line as Ansible does.

The reading follows ansible.plugins.inventory.ini: lines before any section are hosts of
`ungrouped`; `[g]` holds hosts (ranges and `host:port` allowed), `[g:vars]` one `key=value` per
line, `[g:children]` group names that may be declared later (pending until then). Values, inline
or in `[g:vars]`, go through ast.literal_eval like Ansible's ini plugin does, so `8080` is an int
and `yes` stays a string. Every error carries the file, line and the offending text; a file's
errors are all reported at once (a line in error is left out and reading goes on; the lines of
a section whose header is in error are skipped). Vars that feed safety gates (`gpus`, `rack`,
...) are checked as they are read (gate_values.py).
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from fleetfix.errors import InventoryError, SourcePosition
from fleetfix.inventory import datafiles
from fleetfix.inventory.addresses import AddressError, parse_address
from fleetfix.inventory.builder import BuildError, InventoryBuilder
from fleetfix.inventory.gate_values import GATE_VARS, gate_value_problem
from fleetfix.inventory.model import UnsafeText
from fleetfix.inventory.problems import raise_found
from fleetfix.inventory.ranges import HostRangeError, expand_host_range, has_range

_COMMENT_MARKERS = ("#", ";")
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:\#.*)?$")
_GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:\#.*)?$")
_SECTION_KINDS = ("hosts", "children", "vars")
# Values that ast.literal_eval would certainly leave as strings: a word, dotted name or address
# not starting with a Python constant name, or such words separated by blanks (a quoted
# `gpu_model="NVIDIA H100 80GB HBM3"`: a leading name, without brackets, quotes or commas, is
# never a literal, so literal_eval fails and Ansible keeps the text). Skipping the parser for
# them keeps big inventories fast; everything else takes the exact path.
_PLAIN_WORD = re.compile(r"[A-Za-z_][\w.:/@-]*(?:[ \t]+[\w.:/@-]+)*|\d+(?:\.\d+){2,}")
_CONSTANT_PREFIXES = ("True", "False", "None")
_SMALL_INT = re.compile(r"[1-9]\d{0,17}|0")
# Characters that make shlex do more than split on blanks.
_SHLEX_SPECIAL = re.compile(r"[\"'\\#]")
_QUOTED_WORD = re.compile(r"""(?:[^\s"'\\#]+|"[^"\\]*"|'[^']*')+""")
_QUOTE_PART = re.compile(r""""([^"]*)"|'([^']*)'|([^"']+)""")


def _simply_quoted(line: str) -> list[str] | None:
    """shlex.split(line, comments=True) for a line whose only specials are balanced quotes
    around text without backslashes (`gpu_model="NVIDIA H100 80GB HBM3"`), at regex speed;
    None for anything else (shlex decides). A 10,000-line inventory with a quoted var per
    host read in 1.3 s through shlex."""
    if "\\" in line or "#" in line:
        return None
    if "'" not in line:
        return _double_quoted(line)
    words: list[str] = []
    end = 0
    for match in _QUOTED_WORD.finditer(line):
        if line[end : match.start()].strip():
            return None  # an unbalanced quote, or something the pattern does not cover
        words.append(match.group())
        end = match.end()
    if line[end:].strip():
        return None
    return [_unquoted(w) if '"' in w or "'" in w else w for w in words]


def _double_quoted(line: str) -> list[str] | None:
    """_simply_quoted for a line whose only quotes are double quotes (no backslash, `#` or
    single quote), with str.split: a fifth of the time of the patterns, a tenth of 10,000 lines.
    Between quotes all is kept; outside, shlex's blanks part words; a quoted part is glued to
    what touches it (`a"b c"d` is one word)."""
    parts = line.split('"')
    if len(parts) % 2 == 0:
        return None  # an unbalanced quote: shlex says what is wrong
    words: list[str] = []
    glued = False  # the last word goes on with what comes next (nothing blank between)
    for index, part in enumerate(parts):
        if index % 2:  # between quotes
            if glued:
                words[-1] += part
            else:
                words.append(part)
            glued = True
            continue
        if not part:
            continue
        pieces = _BLANKS.split(part)  # "" first when it starts blank, "" last when it ends so
        if glued and pieces[0]:
            words[-1] += pieces[0]
        elif pieces[0]:
            words.append(pieces[0])
        words.extend(piece for piece in pieces[1:] if piece)
        glued = bool(pieces[-1])
    return words


def _unquoted(word: str) -> str:
    """A word with its quotes taken away, what is between them kept (as shlex does)."""
    return "".join(a or b or c for a, b, c in _QUOTE_PART.findall(word))


_BLANKS = re.compile(r"[ \t\r\n]+")
# NUL and control characters (C0 but tab and line ends, DEL, C1): never meant in an inventory.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


@dataclass(slots=True)
class _Pending:
    """A group named in `[g:children]` or `[g:vars]` before it is declared."""

    line: int
    kind: str
    name: str
    parents: list[str] = field(default_factory=list)


def parse_ini(builder: InventoryBuilder, path: str, data: bytes) -> None:
    """Add the groups, hosts and variables of the INI text `data` (read from `path`).

    Raises:
        InventoryError: the text is not a valid INI inventory; names file and line (several
            errors: an InventoryErrors with each of them).
    """
    # Like Ansible, bytes that are not UTF-8 are kept as surrogates rather than refused.
    text = data.decode("utf-8", "surrogateescape")
    datafiles.refuse_characters(path, text, _CONTROL)
    _IniReader(builder, path).read(text.splitlines())


def parse_value(text: str) -> Any:
    """A value typed as Ansible's ini plugin types it (literal_eval, else the string).

    Raises:
        ValueError: literal_eval failed in a way Ansible does not forgive (e.g. {[1]: 2}).
    """
    if _PLAIN_WORD.fullmatch(text) and not text.startswith(_CONSTANT_PREFIXES):
        return text
    if _SMALL_INT.fullmatch(text):
        return int(text)
    try:
        with warnings.catch_warnings():
            # Invalid escapes like "\d" warn (DeprecationWarning before Python 3.12, then
            # SyntaxWarning); a warnings-as-errors filter must not change the value read.
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    except (TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(str(exc) or type(exc).__name__) from exc
    return _coerce(value)


def _coerce(value: Any) -> Any:
    """Ansible's post-processing of literal_eval results: only JSON-like types survive."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, set)):
        return [_coerce(item) for item in value]
    if isinstance(value, dict):
        return {key: _coerce(item) for key, item in value.items()}
    if value is ...:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        # Ansible decodes bytes literals but does not trust them as templates.
        return UnsafeText(value.decode("utf-8", "surrogateescape"))
    return value


class _SharedTexts:
    """One copy of each host variable's text that repeats (rack=, leaf=, the GPU model), not
    of texts every host has its own of (ansible_host=, bmc_host=): a variable whose texts are
    mostly new stops being shared. Not sys.intern: interned texts stay in the interpreter's
    table for the life of the process (10,000 hosts' addresses: 1.9 MB of table)."""

    SHARED_AT_LEAST = 64  # texts of a variable tried before judging it

    def __init__(self) -> None:
        self._texts: dict[str, dict[str, str] | None] = {}  # variable -> its texts, or None
        self._seen: dict[str, int] = {}

    def shared(self, key: str, text: str) -> str:
        texts = self._texts.get(key, {})
        if texts is None:
            return text
        seen = self._seen[key] = self._seen.get(key, 0) + 1
        if len(texts) > self.SHARED_AT_LEAST and len(texts) * 2 > seen:
            self._texts[key] = None  # mostly unique: each host keeps its own
            return text
        self._texts[key] = texts
        return texts.setdefault(text, text)


class _IniReader:
    """One pass over the lines of one INI file."""

    def __init__(self, builder: InventoryBuilder, path: str) -> None:
        self._builder = builder
        self._path = path
        self._pending: dict[str, _Pending] = {}
        self._group = "ungrouped"
        self._kind = "hosts"
        self._number = 0
        self._raw = ""
        self._lines: list[str] = []
        self._errors: list[InventoryError] = []
        self._texts = _SharedTexts()
        # After a section header in error, its lines mean nothing: skipped, not misread.
        self._skipping = False

    def read(self, lines: list[str]) -> None:
        """Read every line; raise every error found (raise_found) at the end."""
        self._lines = lines
        for number, raw in enumerate(lines, 1):
            self._number, self._raw = number, raw
            line = raw.strip()
            if line and not line.startswith(_COMMENT_MARKERS):
                self._read_recorded(line)
        self._check_pending()
        raise_found(self._errors)

    def _read_recorded(self, line: str) -> None:
        try:
            self._read_line(line)
        except InventoryError as exc:
            self._errors.append(exc)

    def _read_line(self, line: str) -> None:
        section = _SECTION.match(line)
        if section:
            self._skipping = True
            self._enter_section(section.group(1), section.group(2))
            self._skipping = False
        elif line.startswith("[") and line.endswith("]"):
            self._skipping = True
            self._fail(
                f"Invalid section entry: {line!r}. Please make sure that there are no spaces in"
                " the section entry, and that there are no other invalid characters"
            )
        elif self._skipping:
            return
        elif self._kind == "hosts":
            self._read_hosts(line)
        elif self._kind == "vars":
            self._read_variable(line)
        else:
            self._read_child(line)

    def _enter_section(self, group: str, kind: str | None) -> None:
        if kind is not None and kind not in _SECTION_KINDS:
            self._fail(f"Section [{group}:{kind}] has unknown type: {kind}")
        self._group, self._kind = group, kind or "hosts"
        if group not in self._builder.groups:
            # [g:vars] alone does not declare g; remember it and check at the end.
            if self._kind == "vars" and group not in self._pending:
                self._pending[group] = _Pending(self._number, "vars", group)
            self._builder.add_group(group)
        pending = self._pending.get(group)
        if pending is not None and self._kind != "vars":
            if pending.kind == "children":
                self._attach_pending_children(group)
            else:
                del self._pending[group]

    def _attach_pending_children(self, group: str) -> None:
        for parent in self._pending[group].parents:
            self._build(self._builder.add_child, parent, group)
            parent_pending = self._pending.get(parent)
            if parent_pending is not None and parent_pending.kind == "children":
                self._attach_pending_children(parent)
        del self._pending[group]

    def _read_hosts(self, line: str) -> None:
        tokens = self._split_host_line(line)
        names, port = self._expand_host_pattern(tokens[0])
        variables: dict[str, Any] = {}
        for token in tokens[1:]:
            key, equals, text = token.partition("=")
            if not equals:
                self._fail(f"Expected key=value host variable assignment, got: {token}", token)
            value = self._value(text, token)
            # One copy of each name and text for every host that repeats it: a 10,000-host
            # inventory's rack=, leaf=, gpus=8 and model strings were 8 MB, mostly repeats.
            key = sys.intern(key)
            if type(value) is str:
                value = self._texts.shared(key, value)
            variables[key] = value
            if key in GATE_VARS:
                self._check_gate(key, value, token)
        builder = self._builder
        builder.origin = SourcePosition(self._path, self._number)
        try:  # one try for the line, not one per variable: 70,000 of them in 10,000 lines
            for name in names:
                builder.add_host(name, self._group, port)
                for key, value in variables.items():
                    builder.set_variable(name, key, value)
        except BuildError as exc:
            self._fail(str(exc))

    def _split_host_line(self, line: str) -> list[str]:
        if not _SHLEX_SPECIAL.search(line):
            return _BLANKS.split(line)
        if (simple := _simply_quoted(line)) is not None:
            return simple
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:
            self._fail(f"Error parsing host definition {line!r}: {exc}")
        if not tokens:
            self._fail(f"Expected a host name, got: {line}")
        return tokens

    def _expand_host_pattern(self, pattern: str) -> tuple[list[str], int | None]:
        if ":" not in pattern:
            name, port = pattern, None  # what parse_address answers, valid name or not
        else:
            try:
                name, port = parse_address(pattern, allow_ranges=True)
            except AddressError:
                name, port = pattern, None
        try:
            names = expand_host_range(name) if has_range(name) else [name]
        except HostRangeError as exc:
            self._fail(f"{exc} (in {pattern!r})", pattern)
        if pattern.strip().endswith(":") and port is None:
            self._fail(
                f"Invalid host pattern {pattern!r} supplied, ending in ':' is not allowed, this"
                " character is reserved to provide a port.",
                pattern,
            )
        if any(host.strip() == "---" for host in names):
            self._fail(
                f"Invalid host pattern {pattern!r} supplied, '---' is normally a sign this is a"
                " YAML file."
            )
        return names, port

    def _read_variable(self, line: str) -> None:
        if "=" not in line:
            self._fail(f"Expected key=value, got: {line}")
        key, text = (part.strip() for part in line.split("=", 1))
        value = self._value(text, text)
        self._check_gate(key, value, key)
        self._build(self._builder.set_variable, self._group, key, value)

    def _read_child(self, line: str) -> None:
        match = _GROUP_NAME.match(line)
        if not match:
            self._fail(f"Expected group name, got: {line}")
        child = match.group(1)
        if child in self._builder.groups:
            self._build(self._builder.add_child, self._group, child)
        elif child in self._pending:
            self._pending[child].parents.append(self._group)
        else:
            self._pending[child] = _Pending(self._number, "children", child, [self._group])

    def _check_pending(self) -> None:
        for pending in self._pending.values():
            self._number = pending.line
            self._raw = self._lines[pending.line - 1]
            self._errors.append(self._error(self._pending_message(pending)))

    @staticmethod
    def _pending_message(pending: _Pending) -> str:
        if pending.kind == "vars":
            return f"Section [{pending.name}:vars] not valid for undefined group {pending.name!r}."
        return (
            f"Section [{pending.parents[-1]}:children] includes undefined group {pending.name!r}."
        )

    def _check_gate(self, key: str, value: Any, token: str) -> None:
        """Record (not raise: the line's other vars are checked too) a gate var in error."""
        problem = gate_value_problem(key, value)
        if problem is not None:
            self._errors.append(self._error(problem, token))

    def _value(self, text: str, token: str) -> Any:
        try:
            return parse_value(text)
        except ValueError as exc:
            self._fail(f"cannot read value {text!r}: {exc}", token)

    def _build(self, operation: Callable[..., object], *args: Any) -> None:
        try:
            operation(*args)
        except BuildError as exc:
            self._fail(str(exc))

    def _fail(self, message: str, token: str | None = None) -> NoReturn:
        raise self._error(message, token)

    def _error(self, message: str, token: str | None = None) -> InventoryError:
        column = self._raw.find(token) + 1 if token and token in self._raw else 1
        return InventoryError(
            datafiles.shown(message),
            SourcePosition(self._path, self._number, column),
            source_line=datafiles.shown(self._raw) or None,
        )
