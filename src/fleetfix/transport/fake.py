"""A scripted in-memory transport, shipped for unit tests of engine logic (Fabric-testing style).

Each host gets a list of rules, matched in order against the command: the first rule whose regex
matches answers. Rules can return a fixed result, raise UnreachableError, or hang until timeout.
Every command is recorded, so tests assert on what ran where.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fleetfix.errors import UnreachableError
from fleetfix.results import CommandResult
from fleetfix.transport.base import DEFAULT_COMMAND_TIMEOUT, ConnectionSpec

Responder = Callable[[str, int], "Reply"]
"""Called with (command, how many times this rule matched before) -> Reply."""


@dataclass(frozen=True, slots=True)
class Reply:
    stdout: str = ""
    stderr: str = ""
    rc: int = 0
    hang: bool = False
    drop: bool = False  # the connection is lost while running this command
    cancel_error: Exception | None = None
    """Raised instead of the cancellation when a hanging command is cancelled: a transport
    whose clean-up fails under a closing connection."""


@dataclass(slots=True)
class _Rule:
    pattern: re.Pattern[str]
    respond: Responder
    hits: int = 0


@dataclass(slots=True)
class FakeHost:
    rules: list[_Rule] = field(default_factory=list)
    unreachable: str | None = None

    def on(self, pattern: str, reply: Reply | Responder) -> FakeHost:
        """Answer commands matching `pattern` (re.search) with `reply`."""
        respond: Responder = reply if callable(reply) else _constant(reply)
        self.rules.append(_Rule(re.compile(pattern), respond))
        return self


def _constant(reply: Reply) -> Responder:
    def respond(_command: str, _hits: int) -> Reply:
        return reply

    return respond


@dataclass(frozen=True, slots=True)
class RanCommand:
    host: str
    command: str
    env: Mapping[str, str]


class FakeTransport:
    """Transport whose hosts follow scripted rules; unknown commands succeed with no output."""

    name = "fake"

    def __init__(self) -> None:
        self.hosts: dict[str, FakeHost] = {}
        self.ran: list[RanCommand] = []
        self.connects: list[str] = []
        self.closed = False

    def host(self, name: str) -> FakeHost:
        return self.hosts.setdefault(name, FakeHost())

    def commands_on(self, host: str) -> list[str]:
        return [r.command for r in self.ran if r.host == host]

    async def connect(self, spec: ConnectionSpec) -> FakeConnection:
        self.connects.append(spec.name)
        host = self.host(spec.name)
        if host.unreachable is not None:
            raise UnreachableError(spec.name, host.unreachable)
        return FakeConnection(self, spec.name, host)

    async def aclose(self) -> None:
        self.closed = True


class FakeConnection:
    """One scripted host connection."""

    def __init__(self, transport: FakeTransport, name: str, host: FakeHost) -> None:
        self._transport = transport
        self._name = name
        self._host = host

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        self._transport.ran.append(RanCommand(self._name, command, dict(env or {})))
        reply = self._reply(command)
        if reply.drop:
            raise UnreachableError(self._name, "connection lost")
        if reply.hang:
            if timeout is None:
                raise UnreachableError(self._name, "fake command hangs with no timeout")
            try:
                await asyncio.sleep(timeout)
            except asyncio.CancelledError:
                if reply.cancel_error is not None:
                    raise reply.cancel_error from None
                raise
            return CommandResult(command, None, "", "", timeout, timed_out=True)
        await asyncio.sleep(0)
        return CommandResult(command, reply.rc, reply.stdout, reply.stderr)

    def _reply(self, command: str) -> Reply:
        for rule in self._host.rules:
            if rule.pattern.search(command):
                reply = rule.respond(command, rule.hits)
                rule.hits += 1
                return reply
        return Reply()

    async def close(self) -> None:
        return None
