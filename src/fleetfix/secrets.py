"""Secrets: which values a run must never store or show, and the one place they are masked.

A value is secret when it is (under) an extra var whose name is declared with `--secret NAME`
or matches SECRET_NAME, when a `no_log` step produced it, or when a template that read a secret
made it (a filter, a slice, a concatenation: playbook/taint.py tells the run's Redactor). The
`Redactor` holds those strings and masks every occurrence (longest first) in every event before
any consumer sees it: the EventBus redacts each event once, so the console, the journal, the
report files and any team observer all get the same redacted event. With nothing secret it
returns each event untouched.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import typing
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, ValuesView
from collections.abc import Set as AbstractSet
from functools import cache
from typing import Any, TypeVar

from fleetfix.errors import FleetfixError

MASK = "********"
NO_LOG_TEXT = (
    "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
)
"""What stands for a no_log step's command, output and message (Ansible's words)."""
SECRET_NAME = re.compile(
    r"passw(?:or)?d|secret|token|api_?key|credential|private_?key", re.IGNORECASE
)
"""Variable names secret without `--secret`: a name containing password, passwd, secret,
token, api_key/apikey, credential or private_key, in any case (`db_password`, `VAULT_TOKEN`)."""
LEARNED_MIN = 4
"""Values a `no_log` step produced, or a template made from a secret, that are shorter than
this are not masked elsewhere in the run (masking every `ok` or `1` would destroy the output);
a `no_log` step's own record hides them. A text holds a secret when it is one, or contains one
of at least this many characters (`Redactor.holds`)."""
IDENTITY_FIELDS = frozenset({"host", "hosts", "run_id", "key", "domains", "at"})
"""Event fields that name things the journal indexes by (a host, a step's source position):
never rewritten, so a secret that happens to be part of a host name cannot break a resume."""
_EXTRA_VARS_FLAGS = ("-e", "--extra-vars")

T = TypeVar("T")


def is_secret_name(name: object, declared: Collection[str] = ()) -> bool:
    """Is a variable of this name secret: declared with --secret, or matching SECRET_NAME."""
    return isinstance(name, str) and (name in declared or SECRET_NAME.search(name) is not None)


def secret_values(variables: Mapping[str, Any], declared: Collection[str] = ()) -> set[str]:
    """Every value under a secret name in `variables`, at any depth: a dict or list under a
    secret name is secret whole; a secret name nested under a plain one is secret too."""
    found: set[str] = set()
    _collect(variables, False, declared, found)
    return found


def _collect(value: Any, secret: bool, declared: Collection[str], found: set[str]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _collect(item, secret or is_secret_name(key, declared), declared, found)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _collect(item, secret, declared, found)
    elif secret and value is not None and not isinstance(value, bool) and str(value):
        found.add(str(value))


def leaves(value: Any) -> list[str]:
    """The text of every scalar in a nested value (what a no_log step produced)."""
    found: set[str] = set()
    _collect(value, True, (), found)
    return sorted(found)


class Redactor:
    """The run's secret strings, and each event (or text) with every one of them masked.

    Secrets only ever get added (the extra-vars' at the start, a no_log step's as it finishes),
    so an event is masked with all that is known when it is emitted."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._inside: re.Pattern[str] | None = None
        self.add(secrets)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def add(self, values: Iterable[str], *, min_length: int = 1) -> None:
        """Mask these values from now on (the empty string, and any shorter than
        `min_length`, is ignored)."""
        new = {v for v in values if len(v) >= max(min_length, 1)} - self._secrets
        if not new:
            return
        self._secrets |= new
        # Longest first: the alternation takes the first that matches at a position, so a
        # secret that contains another is masked whole.
        ordered = sorted(self._secrets, key=lambda s: (-len(s), s))
        self._pattern = re.compile("|".join(map(re.escape, ordered)))
        long = [secret for secret in ordered if len(secret) >= LEARNED_MIN]
        self._inside = re.compile("|".join(map(re.escape, long))) if long else None

    def holds(self, value: Any) -> bool:
        """Does `value` hold a secret: a text (or number) that is one, or that contains one of at
        least LEARNED_MIN characters, itself or anywhere in a mapping (keys too), a sequence,
        a set (keys and items views too), a values view or a dataclass. Other objects (a
        function, an undefined) hold none."""
        if self._pattern is None:
            return False
        return _holds(value, self._secrets, self._inside)

    def text(self, text: str) -> str:
        """`text` with every secret masked (the same object when none occurs in it)."""
        if self._pattern is None or self._pattern.search(text) is None:
            return text
        return self._pattern.sub(MASK, text)

    def redact(self, value: T) -> T:
        """A value (an event, a result, a dict of registered data) with every secret in its
        text masked. Only what holds a secret is rebuilt; with nothing to mask it is `value`
        itself, not a copy. Dict keys and IDENTITY_FIELDS are left as they are."""
        if self._pattern is None:
            return value
        return typing.cast(T, _walk(value, self._pattern))


def _holds(value: Any, secrets: set[str], inside: re.Pattern[str] | None) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        return value in secrets or (inside is not None and inside.search(value) is not None)
    if isinstance(value, Mapping):
        return any(
            _holds(key, secrets, inside) or _holds(item, secrets, inside)
            for key, item in value.items()
        )
    if isinstance(value, Sequence | AbstractSet | ValuesView) and not isinstance(value, bytes):
        return any(_holds(item, secrets, inside) for item in value)
    kind: type = type(value)
    return any(_holds(getattr(value, name), secrets, inside) for name in _dataclass_fields(kind))


def _walk(value: Any, pattern: re.Pattern[str]) -> Any:
    kind: type = type(value)
    if kind is str:  # exactly str: a str-valued enum member stays what it is
        return pattern.sub(MASK, value) if pattern.search(value) else value
    if kind is dict:
        return _walk_dict(value, pattern)
    if kind is list or kind is tuple:
        items = [_walk(item, pattern) for item in value]
        same = all(new is old for new, old in zip(items, value, strict=True))
        return value if same else kind(items)
    names = _dataclass_fields(kind)
    if not names:
        return value
    changes = {}
    for name in names:
        old = getattr(value, name)
        new = _walk(old, pattern)
        if new is not old:
            changes[name] = new
    return dataclasses.replace(value, **changes) if changes else value


def _walk_dict(value: dict[Any, Any], pattern: re.Pattern[str]) -> Any:
    changed: dict[Any, Any] | None = None
    for key, old in value.items():
        new = _walk(old, pattern)
        if new is not old:
            if changed is None:
                changed = dict(value)
            changed[key] = new
    return value if changed is None else changed


@cache
def _dataclass_fields(kind: type) -> tuple[str, ...]:
    """The init fields of a dataclass type that may hold text (empty for any other type)."""
    if not dataclasses.is_dataclass(kind):
        return ()
    return tuple(
        f.name for f in dataclasses.fields(kind) if f.init and f.name not in IDENTITY_FIELDS
    )


def redact_argv(
    argv: Sequence[str],
    redactor: Redactor,
    declared: Collection[str] = (),
    parse: Callable[[str], Mapping[str, Any]] | None = None,
) -> list[str]:
    """The command line as the journal may store it: each `-e`/`--extra-vars` value that sets
    a secret name rewritten with the value masked (`k=v` words and JSON/YAML alike; an
    `@file` is a path and stays), then every secret still in any word masked.

    Args:
        argv: the command line (sys.argv).
        redactor: holds the secret values.
        declared: names given with --secret.
        parse: one `-e` value to its variables (playbook.extravars); a value it cannot parse
            is only masked by `redactor`.
    """
    out = list(argv)
    for index in _extra_vars_values(out):
        flag, value = _split_flag(out[index])
        out[index] = flag + _masked_item(value, declared, parse)
    return [redactor.text(word) for word in out]


def _extra_vars_values(argv: list[str]) -> list[int]:
    """Indexes of the words that hold an `-e` value (`-e V`, `-eV`, `--extra-vars[=]V`, and
    argparse's unambiguous prefixes such as `--extra`)."""
    found = []
    for index, word in enumerate(argv):
        if word == "--":
            break
        name = word.partition("=")[0]
        if word in _EXTRA_VARS_FLAGS or (len(name) > 4 and "--extra-vars".startswith(name)):
            if "=" in word:
                found.append(index)
            elif index + 1 < len(argv):
                found.append(index + 1)
        elif word.startswith("-e") and not word.startswith("--") and len(word) > 2:
            found.append(index)
    return found


def _split_flag(word: str) -> tuple[str, str]:
    """('--extra-vars=', 'a=1') for a joined word, ('-e', ...) for `-ea=1`, ('', word) else."""
    if word.startswith("--") and "=" in word:
        flag, _, value = word.partition("=")
        return flag + "=", value
    if word.startswith("-e") and not word.startswith("--") and len(word) > 2:
        return "-e", word[2:]
    return "", word


def _masked_item(
    item: str, declared: Collection[str], parse: Callable[[str], Mapping[str, Any]] | None
) -> str:
    text = item.strip()
    if parse is None or not text or text.startswith("@"):
        return item
    try:
        variables = parse(item)
    except FleetfixError:  # run_command refused a malformed -e already; mask what is known
        return item
    if not secret_values(variables, declared):
        return item
    masked = _masked(variables, False, declared)
    if text[0] in "{[":
        return json.dumps(masked)
    return " ".join(
        f"{key}={value if value == MASK else shlex.quote(str(value))}"
        for key, value in masked.items()
    )


def _masked(value: Any, secret: bool, declared: Collection[str]) -> Any:
    if isinstance(value, Mapping):
        return {
            key: _masked(item, secret or is_secret_name(key, declared), declared)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_masked(item, secret, declared) for item in value]
    if secret and value is not None and not isinstance(value, bool):
        return MASK
    return value
