"""Variables from outside the play: `-e/--extra-vars` items and play `vars_files`.

`-e` follows ansible-playbook: `k=v k2=v2` (values stay strings), a JSON/YAML object, or
`@file` (YAML or JSON); later items override earlier ones, key by key. `k=v` words are split like
a POSIX shell does, except that a Jinja2 block (`{{ a | default('x y') }}`) is never split: the
same rule Ansible applies to `debug: msg=...` free-form arguments, which the loader reuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetfix.errors import PlaybookError, UsageError
from fleetfix.playbook.catalog import is_variable_name, shown
from fleetfix.playbook.yamlpos import Node, load_yaml, parse_yaml

_JINJA_CLOSE = {"{{": "}}", "{%": "%}", "{#": "#}"}
_ESCAPABLE_IN_DOUBLE_QUOTES = '"\\$`'


def parse_extra_vars(items: Sequence[str], base_dir: Path) -> dict[str, Any]:
    """Merge `-e` items in order into one dict.

    Args:
        items: the `-e` values as given on the command line.
        base_dir: where a relative `@file` is looked up (the working directory).

    Raises:
        UsageError: an item is malformed; the message quotes it.
    """
    merged: dict[str, Any] = {}
    for item in items:
        merged.update(_parse_item(item, base_dir))
    return merged


def _parse_item(item: str, base_dir: Path) -> dict[str, Any]:
    text = item.strip()
    if not text:
        raise UsageError(f"-e {item!r}: empty extra vars")
    if text.startswith("@"):
        return _from_file(item, base_dir / Path(text[1:]).expanduser())
    if text[0] in "{[":
        return _from_yaml_text(item)
    if text[0] in "/.":
        raise UsageError(f"-e {item!r}: Please prepend extra_vars filename {item!r} with '@'")
    try:
        words = split_args(text)
    except ValueError as exc:
        raise UsageError(f"-e {item!r}: {exc}") from exc
    # Ansible's rule: key=value words are variables; the other words, joined, are the value of
    # `_raw_params` (so -e 'name: value' sets nothing a playbook reads, as in Ansible).
    found: dict[str, Any] = {}
    raw: list[str] = []
    for word in words:
        key, sep, value = word.partition("=")
        if sep and not is_variable_name(key):
            raise UsageError(f"-e {item!r}: expected key=value, got {word!r}")
        if sep:
            found[key] = value
        else:
            raw.append(word)
    if raw:
        found["_raw_params"] = " ".join(raw)
    return found


def _from_file(item: str, path: Path) -> dict[str, Any]:
    try:
        return load_vars_file(path)
    except PlaybookError as exc:
        raise UsageError(f"-e {item!r}: {exc.render()}") from exc


def _from_yaml_text(item: str) -> dict[str, Any]:
    try:
        root = parse_yaml(item, "<extra vars>").root
        if root is None:
            raise PlaybookError("extra vars must be a mapping of variable names to values")
        return vars_from_node(root, "extra vars")
    except PlaybookError as exc:
        where = (
            f" at column {exc.position.column}" if exc.position and exc.position.column > 1 else ""
        )
        raise UsageError(f"-e {item!r}: {exc.message}{where}") from exc


def load_vars_files(paths: Sequence[str | Path], relative_to: Path) -> dict[str, Any]:
    """Load play `vars_files` in order (later files override earlier ones, key by key).

    Args:
        paths: the files, already rendered if they were templates.
        relative_to: the playbook's directory; absolute paths are used as they are.

    Raises:
        PlaybookError: a file is missing, not YAML, or not a mapping of variable names;
            positioned inside the vars file where the YAML allows it.
    """
    merged: dict[str, Any] = {}
    for path in paths:
        merged.update(load_vars_file(relative_to / Path(path).expanduser()))
    return merged


def load_vars_file(path: Path) -> dict[str, Any]:
    """One vars file as a dict; an empty file is an empty dict.

    Raises:
        PlaybookError: as `load_vars_files`.
    """
    document = load_yaml(path)
    if document.problems:
        raise document.problems[0]
    if document.root is None:
        return {}
    return vars_from_node(document.root, "a vars file")


def vars_from_node(node: Node, what: str) -> dict[str, Any]:
    """A mapping of variable names to plain values.

    Raises:
        PlaybookError: at the first problem `vars_problems` finds.
    """
    problems = vars_problems(node, what)
    if problems:
        raise problems[0]
    return dict(node.value)


def vars_problems(node: Node, what: str) -> list[PlaybookError]:
    """Every reason `node` is not a mapping of usable variable names."""
    if not node.is_mapping:
        return [
            node.error(
                f"{what} must be a mapping of variable names to values, not {shown(node.value)}"
            )
        ]
    return [
        entry.key.error(
            f"invalid variable name {shown(entry.key.value)}",
            hint="variable names are letters, digits and _, not starting with a digit",
        )
        for entry in node.entries
        if not is_variable_name(entry.key.value)
    ]


def parse_kv(text: str, *, template_keys: bool = False) -> dict[str, str]:
    """`a=1 msg="x y"` -> {'a': '1', 'msg': 'x y'}; values stay strings. With
    `template_keys`, a key may be a template (`{{ 'x' + item }}=1`, set_fact's).

    Raises:
        ValueError: a word is not key=value, or a quote / Jinja2 block is not closed.
    """
    result: dict[str, str] = {}
    for word in split_args(text):
        if template_keys and "{{" in word:
            key, sep, value = _split_outside_templates(word)
        else:
            key, sep, value = word.partition("=")
        if not sep or not (is_variable_name(key) or (template_keys and "{{" in key)):
            raise ValueError(f"expected key=value, got {word!r}")
        result[key] = value
    return result


def _split_outside_templates(word: str) -> tuple[str, str, str]:
    """`user_{{ a == b }}={{ c }}` at its first `=` outside `{{ }}` (a set_fact key template)."""
    depth = 0
    for at, char in enumerate(word):
        if word.startswith("{{", at):
            depth += 1
        elif word.startswith("}}", at) and depth:
            depth -= 1
        elif char == "=" and not depth:
            return word[:at], "=", word[at + 1 :]
    return word, "", ""


def split_args(text: str) -> list[str]:
    """Split words like a POSIX shell, never inside `{{ }}`, `{% %}` or `{# #}`.

    Raises:
        ValueError: an unterminated quote or Jinja2 block.
    """
    return _ArgSplitter(text).split()


class _ArgSplitter:
    """One pass over the text; state is the current word and the position."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._at = 0
        self._words: list[str] = []
        self._word: list[str] = []
        self._in_word = False

    def split(self) -> list[str]:
        while self._at < len(self._text):
            self._step()
        self._end_word()
        return self._words

    def _step(self) -> None:
        char = self._text[self._at]
        if self._text.startswith(tuple(_JINJA_CLOSE), self._at):
            self._jinja_block()
        elif char in "'\"":
            self._quoted(char)
        elif char == "\\" and self._at + 1 < len(self._text):
            self._add(self._text[self._at + 1], 2)
        elif char.isspace():
            self._end_word()
            self._at += 1
        else:
            self._add(char, 1)

    def _add(self, chars: str, advance: int) -> None:
        self._word.append(chars)
        self._in_word = True
        self._at += advance

    def _end_word(self) -> None:
        if self._in_word:
            self._words.append("".join(self._word))
        self._word = []
        self._in_word = False

    def _jinja_block(self) -> None:
        opening = self._text[self._at : self._at + 2]
        end = self._text.find(_JINJA_CLOSE[opening], self._at + 2)
        if end < 0:
            raise ValueError(f"unterminated {opening} ... {_JINJA_CLOSE[opening]}")
        block = self._text[self._at : end + 2]
        self._add(block, len(block))

    def _quoted(self, quote: str) -> None:
        self._add("", 1)  # an empty quoted string is still a word
        while True:
            if self._at >= len(self._text):
                raise ValueError(f"unterminated {quote} quote")
            char = self._text[self._at]
            if self._text.startswith(tuple(_JINJA_CLOSE), self._at):
                self._jinja_block()
            elif char == quote:
                self._at += 1
                return
            elif quote == '"' and char == "\\" and self._peek() in _ESCAPABLE_IN_DOUBLE_QUOTES:
                self._add(self._peek(), 2)
            else:
                self._add(char, 1)

    def _peek(self) -> str:
        """The character after the current one; a space at the end (never escapable)."""
        nxt = self._at + 1
        return self._text[nxt] if nxt < len(self._text) else " "
