"""Make a transport by name: `make_transport("ssh", max_handshakes=32)`.

Transport modules are imported only when asked for: asyncssh and Fabric/paramiko each cost a
noticeable share of CLI start-up, and a run uses one of them.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any, cast

from fleetfix.errors import UsageError
from fleetfix.transport.base import Transport

BUILTIN_TRANSPORTS: tuple[tuple[str, str, str], ...] = (
    ("ssh", "fleetfix.transport.ssh", "SSHTransport"),
    ("local", "fleetfix.transport.local", "LocalTransport"),
    ("fabric", "fleetfix.transport.fabric", "FabricTransport"),
)
"""(name, module, class) of every built-in transport."""


def transport_names() -> list[str]:
    return [name for name, _module, _class in BUILTIN_TRANSPORTS]


def make_transport(name: str, **options: Any) -> Transport:
    """A new transport instance.

    Options a transport does not take are dropped (the CLI passes one set of connection options
    whatever the transport), but an option no built-in transport takes is a typo and an error.

    Raises:
        UsageError: unknown transport name or option, with a close-match suggestion.
    """
    factory = _transport_class(name)
    accepted = _parameters(factory)
    others = {key for key in options if key not in accepted}
    if others:
        _check_options(others, _all_parameters())
    chosen = {key: value for key, value in options.items() if key in accepted}
    return cast(Transport, factory(**chosen))


def _transport_class(name: str) -> type[Any]:
    for known, module_name, class_name in BUILTIN_TRANSPORTS:
        if known == name:
            module = importlib.import_module(module_name)
            return cast(type[Any], getattr(module, class_name))
    raise UsageError(_unknown("transport", name, transport_names()))


def _parameters(factory: type[Any]) -> set[str]:
    return set(inspect.signature(factory).parameters)


def _all_parameters() -> set[str]:
    names: set[str] = set()
    for name in transport_names():
        names |= _parameters(_transport_class(name))
    return names


def _check_options(options: set[str], known: set[str]) -> None:
    for option in sorted(options):
        if option not in known:
            raise UsageError(_unknown("transport option", option, sorted(known)))


def _unknown(kind: str, name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"
    return f"unknown {kind} {name!r}{hint}"
