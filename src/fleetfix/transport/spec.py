"""Build a ConnectionSpec from an inventory host's vars, and read the OpenSSH options they carry.

Precedence, highest first: `fleetfix_*` vars, `ansible_*` vars, then the command-line defaults
(as in Ansible, where inventory connection vars beat `-u` and `--private-key`).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetfix.errors import InventoryError
from fleetfix.transport.base import DEFAULT_CONNECT_TIMEOUT, ConnectionSpec

CONNECTION_TRANSPORTS: Mapping[str, str] = {
    "ssh": "",
    "smart": "",
    "local": "local",
    "paramiko": "fabric",
    "paramiko_ssh": "fabric",
    "fabric": "fabric",
}
"""`ansible_connection` values fleetfix understands, and the transport that serves each.

`ssh` names no transport: it means "over SSH", which the run's default client stack does
(`--transport ssh` or `fabric`), so inventories that spell it out everywhere still switch.
"""

_VARS: Mapping[str, tuple[str, ...]] = {
    "address": ("fleetfix_host", "ansible_host", "ansible_ssh_host"),
    "port": ("fleetfix_port", "ansible_port", "ansible_ssh_port"),
    "user": ("fleetfix_user", "ansible_user", "ansible_ssh_user"),
    "key": (
        "fleetfix_private_key_file",
        "fleetfix_ssh_private_key_file",
        "ansible_ssh_private_key_file",
        "ansible_private_key_file",
    ),
    "password": (
        "fleetfix_password",
        "fleetfix_ssh_pass",
        "ansible_password",
        "ansible_ssh_pass",
        "ansible_ssh_password",
    ),
    "common_args": ("fleetfix_ssh_common_args", "ansible_ssh_common_args"),
    "extra_args": ("fleetfix_ssh_extra_args", "ansible_ssh_extra_args"),
    "connection": ("fleetfix_connection", "ansible_connection"),
    "timeout": ("fleetfix_timeout", "ansible_timeout", "ansible_ssh_timeout"),
    "known_hosts": ("fleetfix_known_hosts",),
    "accept_new": ("fleetfix_accept_new_host_keys",),
}

CONNECTION_VARS: frozenset[str] = frozenset(name for names in _VARS.values() for name in names)
"""Every host var that says how a host is reached (address, port, user, key, connection...)."""

_TRUE_WORDS = frozenset({"1", "true", "yes", "on", "y"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off", "n", ""})
_ACCEPT_NEW_WORDS = frozenset({"no", "off", "accept-new"})


@dataclass(frozen=True, slots=True)
class SpecDefaults:
    """Command-line connection settings, used where a host's vars say nothing."""

    user: str | None = None
    private_keys: tuple[str, ...] = ()
    password: str | None = None
    port: int = 22
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    known_hosts: str | None = None
    accept_new_host_keys: bool = False


@dataclass(frozen=True, slots=True)
class SSHArgs:
    """The parts of an OpenSSH command line (`ansible_ssh_common_args`) fleetfix acts on.

    `options` holds every `-o Key=Value` with lower-cased keys; the named fields are the
    ones the transports use directly.
    """

    proxy_jump: tuple[str, ...] = ()
    proxy_command: str | None = None
    identity_files: tuple[str, ...] = ()
    port: int | None = None
    user: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def option(self, name: str) -> str | None:
        """The value of `-o name=...` (case-insensitive), if given."""
        return self.options.get(name.lower())

    @property
    def strict_host_key_checking(self) -> str | None:
        value = self.option("StrictHostKeyChecking")
        return value.lower() if value is not None else None

    @property
    def known_hosts_file(self) -> str | None:
        value = self.option("UserKnownHostsFile")
        # OpenSSH allows several space-separated files; the first is the one it writes to.
        return _expand(value.split()[0]) if value and value.split() else None


@functools.lru_cache(maxsize=256)
def parse_ssh_args(text: str) -> SSHArgs:
    """Read the OpenSSH client options fleetfix understands out of an argument string.

    Unknown flags are ignored, as Ansible passes them to ssh and fleetfix has no ssh to pass
    them to. Raises ValueError for text that shell-splitting rejects (unbalanced quotes).
    Cached: a fleet shares a few argument strings, read again for every command.
    """
    tokens = shlex.split(text)
    options: dict[str, str] = {}
    jumps: list[str] = []
    keys: list[str] = []
    flags: dict[str, str] = {}
    index = 0
    while index < len(tokens):
        flag, value, index = _next_flag(tokens, index)
        if flag == "-o" and value is not None:
            name, _, option_value = _split_option(value)
            options.setdefault(name.lower(), option_value)
        elif flag == "-J" and value is not None:
            jumps.extend(_split_jumps(value))
        elif flag == "-i" and value is not None:
            keys.append(_expand(value))
        elif flag in ("-p", "-l") and value is not None:
            flags.setdefault(flag, value)
    return _ssh_args(options, jumps, keys, flags)


def _ssh_args(
    options: dict[str, str], jumps: list[str], keys: list[str], flags: dict[str, str]
) -> SSHArgs:
    if not jumps and options.get("proxyjump", "none").lower() != "none":
        jumps = _split_jumps(options["proxyjump"])
    if "identityfile" in options:
        keys.append(_expand(options["identityfile"]))
    command = options.get("proxycommand")
    port = flags.get("-p", options.get("port"))
    return SSHArgs(
        proxy_jump=tuple(jumps),
        proxy_command=None if command is None or command.lower() == "none" else command,
        identity_files=tuple(keys),
        port=int(port) if port is not None and port.isdigit() else None,
        user=flags.get("-l", options.get("user")),
        options=options,
    )


_FLAGS_WITH_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


def _next_flag(tokens: list[str], index: int) -> tuple[str, str | None, int]:
    """The flag at `index`, its value (attached `-oX` or the next token), and the next index."""
    token = tokens[index]
    if not token.startswith("-") or len(token) < 2 or token[1] not in _FLAGS_WITH_VALUE:
        return token, None, index + 1
    flag = token[:2]
    if len(token) > 2:
        return flag, token[2:], index + 1
    if index + 1 < len(tokens):
        return flag, tokens[index + 1], index + 2
    return flag, None, index + 1


def _split_option(text: str) -> tuple[str, str, str]:
    """`Key=Value` or `Key Value` (both valid for ssh -o) -> (Key, sep, Value)."""
    stripped = text.strip()
    cut = min((i for i in (stripped.find("="), stripped.find(" ")) if i >= 0), default=-1)
    if cut < 0:
        return stripped, "", ""
    return stripped[:cut], stripped[cut], stripped[cut + 1 :].strip().lstrip("=").strip()


def _split_jumps(text: str) -> list[str]:
    return [hop.strip() for hop in text.split(",") if hop.strip()]


def _expand(path: str) -> str:
    return str(Path(path).expanduser())


@dataclass(frozen=True, slots=True)
class JumpHost:
    """One ProxyJump hop: `[user@]host[:port]`, also `[v6addr]:port`."""

    host: str
    port: int = 22
    user: str | None = None

    @classmethod
    def parse(cls, text: str) -> JumpHost:
        """Read one hop; raises ValueError for a malformed one."""
        rest = text.removeprefix("ssh://")
        user, _, rest = rest.rpartition("@")
        host, port = _split_host_port(rest)
        if not host:
            raise ValueError(f"malformed ProxyJump host {text!r}")
        return cls(host=host, port=port, user=user or None)

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        return f"{user}{self.host}:{self.port}"


def _split_host_port(text: str) -> tuple[str, int]:
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        port_text = tail.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if port_text and not port_text.isdigit():
        raise ValueError(f"malformed port in {text!r}")
    return host, int(port_text) if port_text else 22


def build_spec(
    name: str, host_vars: Mapping[str, Any], defaults: SpecDefaults | None = None
) -> ConnectionSpec:
    """The ConnectionSpec for inventory host `name` from its merged vars.

    Args:
        name: the inventory hostname (also the address when no host var names one).
        host_vars: the host's merged variables (group vars already applied).
        defaults: command-line settings used where the vars say nothing.

    Raises:
        InventoryError: a connection var has a value that cannot mean anything.
    """
    cli = defaults or SpecDefaults()
    reader = _VarReader(name, host_vars)
    args_text = " ".join(
        part for part in (reader.text("common_args"), reader.text("extra_args")) if part
    )
    ssh_args = reader.ssh_args(args_text)
    key = reader.text("key")
    connection = transport_for(name, host_vars, default="")
    return ConnectionSpec(
        name=name,
        address=reader.text("address") or name,
        port=reader.integer("port") or ssh_args.port or cli.port,
        user=reader.text("user") or ssh_args.user or cli.user,
        private_keys=(_expand(key),) if key else ssh_args.identity_files or cli.private_keys,
        password=reader.text("password") or cli.password,
        ssh_common_args=args_text,
        connect_timeout=reader.number("timeout") or _connect_timeout(ssh_args, cli),
        known_hosts=reader.text("known_hosts") or ssh_args.known_hosts_file or cli.known_hosts,
        accept_new_host_keys=_accept_new(reader, ssh_args, cli),
        # Only a host that asks for a transport gets one; the others use the run's default.
        extra={"connection": connection} if connection else {},
    )


def transport_for(name: str, host_vars: Mapping[str, Any], default: str = "ssh") -> str:
    """The transport ('local', 'fabric') a host's `ansible_connection` asks for, else `default`."""
    value = _VarReader(name, host_vars).text("connection")
    if not value:
        return default
    try:
        return CONNECTION_TRANSPORTS[value.lower()] or default
    except KeyError:
        known = ", ".join(sorted(CONNECTION_TRANSPORTS))
        raise InventoryError(
            f"host {name}: unsupported connection {value!r}", hint=f"supported: {known}"
        ) from None


def _connect_timeout(ssh_args: SSHArgs, cli: SpecDefaults) -> float:
    value = ssh_args.option("ConnectTimeout")
    return float(value) if value and value.isdigit() and int(value) > 0 else cli.connect_timeout


def _accept_new(reader: _VarReader, ssh_args: SSHArgs, cli: SpecDefaults) -> bool:
    explicit = reader.boolean("accept_new")
    if explicit is not None:
        return explicit
    strict = ssh_args.strict_host_key_checking
    if strict is not None:
        # `no` is honoured as `accept-new`: a changed key is refused even then (safer than ssh).
        return strict in _ACCEPT_NEW_WORDS
    return cli.accept_new_host_keys


class _VarReader:
    """Typed reads of one host's connection vars, the first var of each precedence list winning."""

    def __init__(self, host: str, host_vars: Mapping[str, Any]) -> None:
        self._host = host
        self._vars = host_vars

    def _raw(self, field: str) -> tuple[str, Any]:
        for var in _VARS[field]:
            value = self._vars.get(var)
            if value is not None:
                return var, value
        return "", None

    def _error(self, var: str, value: Any, expected: str) -> InventoryError:
        return InventoryError(f"host {self._host}: {var}={value!r} is not {expected}")

    def text(self, field: str) -> str | None:
        var, value = self._raw(field)
        if value is None:
            return None
        if isinstance(value, bool | int | float | str):
            return str(value)
        raise self._error(var, value, "a string")

    def integer(self, field: str) -> int | None:
        var, value = self._raw(field)
        if value is None:
            return None
        text = str(value).strip()
        if isinstance(value, bool) or not text.isdigit() or not 0 < int(text) < 65536:
            raise self._error(var, value, "a port number (1-65535)")
        return int(text)

    def number(self, field: str) -> float | None:
        var, value = self._raw(field)
        if value is None:
            return None
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise self._error(var, value, "a number of seconds") from None
        if isinstance(value, bool) or number <= 0:
            raise self._error(var, value, "a positive number of seconds")
        return number

    def boolean(self, field: str) -> bool | None:
        var, value = self._raw(field)
        if value is None or isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _TRUE_WORDS or word in _FALSE_WORDS:
            return word in _TRUE_WORDS
        raise self._error(var, value, "a boolean")

    def ssh_args(self, text: str) -> SSHArgs:
        try:
            return parse_ssh_args(text)
        except ValueError as exc:
            raise InventoryError(
                f"host {self._host}: cannot read ssh args {text!r}: {exc}"
            ) from exc
