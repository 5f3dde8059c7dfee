"""Ansible's own settings, read the way Ansible reads them: `ansible.cfg` and `ANSIBLE_*` variables.

The file is the first of `$ANSIBLE_CONFIG` (a directory means its ansible.cfg), `./ansible.cfg`
(not in a world-writable directory), `~/.ansible.cfg`, `/etc/ansible/ansible.cfg` that exists
and is readable; the others are not merged in. An environment variable beats the file; the
command line beats both (the CLI applies that, fleetfix.cli.ansible_options). Settings read:

    [defaults] forks, inventory, remote_user, private_key_file, timeout, host_key_checking,
               roles_path, collections_path, gathering, force_handlers, private_role_vars,
               error_on_missing_handler
    ANSIBLE_FORKS, ANSIBLE_INVENTORY, ANSIBLE_REMOTE_USER, ANSIBLE_PRIVATE_KEY_FILE,
    ANSIBLE_TIMEOUT, ANSIBLE_HOST_KEY_CHECKING, ANSIBLE_ROLES_PATH, ANSIBLE_COLLECTIONS_PATH,
    ANSIBLE_GATHERING, ANSIBLE_FORCE_HANDLERS, ANSIBLE_PRIVATE_ROLE_VARS,
    ANSIBLE_ERROR_ON_MISSING_HANDLER

Other keys are ignored, as Ansible ignores keys it does not know; `[ssh_connection]` keys are
noted, never applied (fleetfix's SSH client is not OpenSSH). A bad value of a known key is an
InputError at file:line (UsageError for an environment variable).
"""

from __future__ import annotations

import configparser
import contextlib
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from fleetfix.booleans import FALSE_WORDS, TRUE_WORDS
from fleetfix.errors import InputError, SourcePosition, UsageError

SYSTEM_CONFIG = Path("/etc/ansible/ansible.cfg")


SSH_CONNECTION_NOTES: Mapping[str, str] = {
    "ssh_args": "not applied: fleetfix's SSH client is asyncssh, not OpenSSH; put the options"
    " that matter (ProxyJump, IdentityFile, ...) in ansible_ssh_common_args, which it reads",
    "ssh_common_args": "not applied; set ansible_ssh_common_args in the inventory instead",
    "ssh_extra_args": "not applied; set ansible_ssh_extra_args in the inventory instead",
    "pipelining": "ignored: fleetfix sends each command over an open connection, there is no"
    " module file to pipe",
    "control_path": "ignored: fleetfix keeps its connections open itself (no ControlMaster)",
    "control_path_dir": "ignored: fleetfix keeps its connections open itself (no ControlMaster)",
}
"""Why each commonly set [ssh_connection] key has no effect; any other key there is ignored too."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One resolved value and where it came from: `env: ANSIBLE_FORKS` or `path:line`."""

    value: Any
    origin: str


@dataclass(frozen=True, slots=True)
class AnsibleSettings:
    """What ansible.cfg and the environment say; a setting neither gives is absent."""

    config_file: Path | None = None
    values: Mapping[str, Setting] | None = None
    notes: tuple[str, ...] = ()

    def get(self, name: str) -> Setting | None:
        return (self.values or {}).get(name)


@dataclass(frozen=True, slots=True)
class _Spec:
    key: str
    env: str
    convert: Callable[[str, Path], Any]
    """Reads the text (relative paths against the given directory); ValueError says what
    it wanted instead."""


def _integer(text: str, _base: Path) -> int:
    """Ansible's integer: `7`, also `7.0`; fleetfix wants at least 1 for the ones it reads."""
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError("a whole number") from None
    if not number.is_finite() or number != int(number) or int(number) < 1:
        raise ValueError("a whole number of at least 1")
    return int(number)


def _boolean(text: str, _base: Path) -> bool:
    """Ansible's words; anything else is refused (Ansible reads it as false, see decisions.md)."""
    word = text.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        raise ValueError("a boolean (yes/no, true/false, on/off, 1/0)")
    return word in TRUE_WORDS


def _text(text: str, _base: Path) -> str:
    return _unquote(text)


def _path(text: str, base: Path) -> str:
    return os.path.normpath(os.path.join(base, os.path.expanduser(os.path.expandvars(text))))


def _path_list(text: str, base: Path) -> tuple[str, ...]:
    return tuple(_path(part.strip(), base) for part in text.split(",") if part.strip())


def _path_spec(text: str, base: Path) -> tuple[str, ...]:
    """Ansible's pathspec: paths separated by colons (roles_path, collections_path)."""
    return tuple(_path(part.strip(), base) for part in text.split(os.pathsep) if part.strip())


GATHERING_CHOICES: tuple[str, ...] = ("implicit", "explicit", "smart")


def _gathering(text: str, _base: Path) -> str:
    """DEFAULT_GATHERING: implicit (gather unless gather_facts: false), explicit, smart."""
    word = _unquote(text.strip()).lower()
    if word not in GATHERING_CHOICES:
        raise ValueError(f"one of {', '.join(GATHERING_CHOICES)}")
    return word


def _unquote(text: str) -> str:
    quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'"
    return text[1:-1] if quoted else text


SPECS: tuple[_Spec, ...] = (
    _Spec("forks", "ANSIBLE_FORKS", _integer),
    _Spec("inventory", "ANSIBLE_INVENTORY", _path_list),
    _Spec("remote_user", "ANSIBLE_REMOTE_USER", _text),
    _Spec("private_key_file", "ANSIBLE_PRIVATE_KEY_FILE", _path),
    _Spec("timeout", "ANSIBLE_TIMEOUT", _integer),
    _Spec("host_key_checking", "ANSIBLE_HOST_KEY_CHECKING", _boolean),
    _Spec("roles_path", "ANSIBLE_ROLES_PATH", _path_spec),
    _Spec("collections_path", "ANSIBLE_COLLECTIONS_PATH", _path_spec),
    _Spec("gathering", "ANSIBLE_GATHERING", _gathering),
    _Spec("force_handlers", "ANSIBLE_FORCE_HANDLERS", _boolean),
    _Spec("error_on_missing_handler", "ANSIBLE_ERROR_ON_MISSING_HANDLER", _boolean),
    _Spec("private_role_vars", "ANSIBLE_PRIVATE_ROLE_VARS", _boolean),
)


def find_config_file(
    env: Mapping[str, str], cwd: Path, *, system: Path = SYSTEM_CONFIG
) -> Path | None:
    """The ansible.cfg Ansible would use from `cwd` with environment `env`, or None."""
    candidates: list[Path] = []
    chosen = env.get("ANSIBLE_CONFIG")
    if chosen is not None:
        path = cwd / os.path.expanduser(os.path.expandvars(chosen))
        candidates.append(path / "ansible.cfg" if path.is_dir() else path)
    with contextlib.suppress(OSError):
        if not cwd.stat().st_mode & stat.S_IWOTH:  # anyone could plant one there
            candidates.append(cwd / "ansible.cfg")
    home = env.get("HOME") or str(Path.home())
    candidates += [Path(home) / ".ansible.cfg", system]
    return next((p for p in candidates if p.is_file() and os.access(p, os.R_OK)), None)


def read_settings(
    env: Mapping[str, str], cwd: Path, *, system: Path = SYSTEM_CONFIG
) -> AnsibleSettings:
    """The settings of SPECS from `env` and the config file Ansible would use.

    Raises:
        InputError: the config file cannot be read, is not INI, or a known key's value is bad.
        UsageError: a known ANSIBLE_* variable's value is bad.
    """
    path = find_config_file(env, cwd, system=system)
    parser, lines = _parse(path) if path else (configparser.ConfigParser(), [])
    values: dict[str, Setting] = {}
    for spec in SPECS:
        setting = _from_env(spec, env, cwd)
        if setting is None and spec.env not in env and path is not None:
            setting = _from_file(spec, parser, path, lines)
        if setting is not None:
            values[spec.key] = setting
    return AnsibleSettings(path, values, _ssh_notes(parser, path, lines) if path else ())


def _from_env(spec: _Spec, env: Mapping[str, str], cwd: Path) -> Setting | None:
    """The variable's value; an empty one means Ansible's default, so also not the file's."""
    text = env.get(spec.env)
    if not text:
        return None
    try:
        return Setting(spec.convert(text, cwd), f"env: {spec.env}")
    except ValueError as exc:
        raise UsageError(f"{spec.env}={text!r} is not {exc}") from None


def _from_file(
    spec: _Spec, parser: configparser.ConfigParser, path: Path, lines: list[str]
) -> Setting | None:
    text = parser.get("defaults", spec.key, raw=True, fallback=None)
    if text is None:
        return None
    line = _line_of(lines, "defaults", spec.key)
    try:
        return Setting(spec.convert(text, path.parent), f"{path}:{line}")
    except ValueError as exc:
        source = lines[line - 1] if 0 < line <= len(lines) else None
        column = source.find(text) + 1 if source and text in source else 1
        raise InputError(
            f"[defaults] {spec.key} = {text!r} is not {exc}",
            SourcePosition(str(path), line, column),
            source_line=source,
        ) from None


def _parse(path: Path) -> tuple[configparser.ConfigParser, list[str]]:
    # Ansible's parser: `;` starts an inline comment, values are taken raw (no % interpolation).
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError) as exc:
        raise InputError(f"cannot read ansible.cfg: {exc}", SourcePosition(str(path), 1)) from exc
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as exc:
        line = getattr(exc, "lineno", None) or _parsing_line(exc)
        reason = str(exc).splitlines()[0]
        raise InputError(
            f"not an ansible.cfg Ansible can read: {reason}", SourcePosition(str(path), line)
        ) from exc
    return parser, text.splitlines()


def _parsing_line(exc: configparser.Error) -> int:
    errors = getattr(exc, "errors", None)
    return int(errors[0][0]) if errors else 1


_SECTION = re.compile(r"^\s*\[([^\]]*)\]")


def _line_of(lines: list[str], section: str, key: str) -> int:
    """The 1-based line where `key` is set in `section` (the last time, as configparser reads)."""
    current, found = "", 0
    option = re.compile(rf"^\s*{re.escape(key)}\s*[=:]", re.IGNORECASE)
    for number, text in enumerate(lines, 1):
        header = _SECTION.match(text)
        if header:
            current = header[1].strip()
        elif current == section and option.match(text):
            found = number
    return found or 1


def _ssh_notes(parser: configparser.ConfigParser, path: Path, lines: list[str]) -> tuple[str, ...]:
    if not parser.has_section("ssh_connection"):
        return ()
    notes = []
    for key in parser.options("ssh_connection"):
        if key in parser.defaults():
            continue  # a [DEFAULT] key, not one set in this section
        why = SSH_CONNECTION_NOTES.get(key, "ignored")
        notes.append(f"{path}:{_line_of(lines, 'ssh_connection', key)}: {key} {why}")
    return tuple(notes)
