"""Held connections: one per host, kept for reuse within a file-descriptor budget.

A run reuses each host's connection for all its commands. Holding one costs a file descriptor
(three for a ProxyCommand), and a process may hold only RLIMIT_NOFILE of them, journal and
pipes included. So the pool keeps connections while the descriptors they hold fit a budget
derived from that limit, and past it closes the least recently used idle one; a host whose
connection was released reconnects transparently at its next command. A connection found
closed when it is next used (the host dropped it while it was idle) is reopened the same way;
if that fails, the host is unreachable, as it would have been.

A connection that drops under a command that was sent (ConnectionLostError) is another matter:
the command may have run. Only a read-only one is run again, when its caller passes a `Retry`:
on a fresh connection after each of its delays, and a host whose connections keep dropping is
then "unreachable: needs a human". Failing to connect or authenticate is never retried here
(the transport retries handshakes that were dropped); neither is a command that changes the node:
the engine settles that by evidence (docs/safety.md, "Connections that drop").
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.errors import UnreachableError
from fleetfix.results import CommandResult
from fleetfix.transport.base import (
    DEFAULT_COMMAND_TIMEOUT,
    Connection,
    ConnectionSpec,
    Transport,
)

RESERVED_FDS = 1024
"""Descriptors never given to held connections: journal (database, WAL, shared memory), stdio,
the event loop, local commands' pipes, reports. At least this, or a tenth of the limit."""


def raise_fd_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft >= hard:
        return soft
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


def fd_budget(limit: int) -> int:
    """Descriptors held connections may use under a soft limit of `limit`."""
    return max(1, limit - max(RESERVED_FDS, limit // 10))


class ConnectionLostError(UnreachableError):
    """A held connection dropped under a command: the host was reached (this is not a failure
    to connect or to authenticate), but the command was sent and may have run."""


class StaleConnectionError(ConnectionLostError):
    """A held connection was found closed before a command sent anything on it: the command
    never started, so a new connection may carry it (the pool reconnects once)."""


DEFAULT_RETRY_DELAYS = (0.5, 1.0, 2.0)
"""Seconds before each further try of a read-only command whose connection dropped."""
GAVE_UP = "unreachable: needs a human"
"""How a host whose connections kept dropping under read-only commands is left."""

RetryNotice = Callable[[str, int, float, ConnectionLostError], None]
"""(host, try that failed, seconds before the next, why): told before each retry."""


@dataclass(frozen=True, slots=True)
class Retry:
    """How a read-only command survives connections that drop: one more try on a fresh
    connection after each delay; `notice` hears of each retry (the run shows them at -v)."""

    delays: tuple[float, ...] = DEFAULT_RETRY_DELAYS
    notice: RetryNotice | None = None


def _closed(connection: Connection) -> bool:
    """Whether a connection that can tell says it is closed. getattr, not isinstance of a
    runtime-checkable protocol: typing walks the protocol's members on every call."""
    return bool(getattr(connection, "closed", False))


def _fds(connection: Connection) -> int:
    """The descriptors a connection holds in this process (1 unless it says otherwise)."""
    return int(getattr(connection, "fds", 1))


@dataclass(slots=True)
class _Held:
    connection: Connection
    fds: int
    busy: int = 0
    """Commands running on it (and its host's checkout in progress): never released then."""


class ConnectionPool:
    """One held connection per host within a descriptor budget; see the module docstring.

    Args:
        transport: opens the connections (and is closed by `aclose`).
        budget: descriptors held connections may use; default from RLIMIT_NOFILE, whose soft
            limit is raised to the hard one first.
    """

    def __init__(self, transport: Transport, budget: int | None = None) -> None:
        self._transport = transport
        self.budget = budget if budget is not None else fd_budget(raise_fd_limit())
        self._held: OrderedDict[str, _Held] = OrderedDict()  # least recently used first
        self._held_fds = 0  # kept as connections come and go: summing them is O(hosts)
        self._locks: dict[str, asyncio.Lock] = {}
        self._room = asyncio.Condition()
        self._connecting = 0
        self._typical_fds = 1  # the most a connection held so far: what one being opened costs
        self.opened = 0
        """Connections opened so far (first ones and reconnects)."""
        self.released = 0
        """Idle connections closed to stay within the budget."""
        self.waiting = 0
        """Hosts waiting for room: every held connection is running a command."""

    @property
    def held(self) -> list[str]:
        """Hosts with a held connection, least recently used first."""
        return list(self._held)

    @property
    def held_fds(self) -> int:
        return self._held_fds

    def _hold(self, name: str, held: _Held) -> None:
        self._held[name] = held
        self._held_fds += held.fds

    def _unhold(self, name: str) -> _Held | None:
        held = self._held.pop(name, None)
        if held is not None:
            self._held_fds -= held.fds
        return held

    async def get(self, spec: ConnectionSpec) -> PooledConnection:
        """`spec`'s connection, opened now if not held; raises UnreachableError (as connect)."""
        held, _fresh = await self._checkout(spec)
        await self._checkin(held)
        return PooledConnection(self, spec)

    async def release(self, name: str) -> None:
        """Close and forget `name`'s connection (lost, or the host is rebooting)."""
        held = self._unhold(name)
        if held is not None:
            await self._close(held)

    async def aclose(self) -> None:
        """Close every held connection, then the transport."""
        for name in list(self._held):
            await self.release(name)
        await self._transport.aclose()

    async def run(
        self,
        spec: ConnectionSpec,
        command: str,
        *,
        timeout: float | None,
        env: Mapping[str, str] | None,
        stdin: str | None = None,
        probe: Any = None,
        retry: Retry | None = None,
    ) -> CommandResult:
        """Run `command` on `spec`'s held connection, reconnecting once if it was stale; with
        `probe`, parsed where it ran when the connection can (`parsed` is None otherwise).
        With `retry` (read-only commands only), a connection that drops under the command is
        replaced and the command run again after each delay; when the last try drops too,
        ConnectionLostError says how often and that the host needs a human."""
        delays = retry.delays if retry is not None else ()
        for tries, delay in enumerate(delays, start=1):
            try:
                return await self._run_held(
                    spec, command, timeout=timeout, env=env, stdin=stdin, probe=probe
                )
            except ConnectionLostError as exc:
                assert retry is not None
                if retry.notice is not None:
                    retry.notice(spec.name, tries, delay, exc)
            await asyncio.sleep(delay)
        try:
            return await self._run_held(
                spec, command, timeout=timeout, env=env, stdin=stdin, probe=probe
            )
        except ConnectionLostError as exc:
            if not delays:
                raise
            message = f"{exc.message} (on {len(delays) + 1} connections in a row); {GAVE_UP}"
            raise ConnectionLostError(spec.name, message) from exc

    async def _run_held(
        self,
        spec: ConnectionSpec,
        command: str,
        *,
        timeout: float | None,
        env: Mapping[str, str] | None,
        stdin: str | None,
        probe: Any,
    ) -> CommandResult:
        """One try of `run`: on the held connection, and once more on a new one if it was
        found stale. A connection that dropped under the command is forgotten."""
        held, fresh = await self._checkout(spec)
        try:
            connection = held.connection
            run_probe = getattr(connection, "run_probe", None) if probe is not None else None
            if run_probe is not None:  # a host shard parses where the output arrives
                result: CommandResult = await run_probe(command, probe, timeout=timeout, env=env)
                return result
            return await connection.run(command, timeout=timeout, env=env, stdin=stdin)
        except StaleConnectionError:
            await self._forget(spec.name, held)
            if fresh:
                raise
        except ConnectionLostError:
            await self._forget(spec.name, held)
            raise
        finally:
            await self._checkin(held)
        return await self._run_held(
            spec, command, timeout=timeout, env=env, stdin=stdin, probe=probe
        )

    async def _checkout(self, spec: ConnectionSpec) -> tuple[_Held, bool]:
        """The held connection marked busy, and whether it was opened for this checkout."""
        async with self._locks.setdefault(spec.name, asyncio.Lock()):
            held = self._held.get(spec.name)
            if held is not None and not _closed(held.connection):
                held.busy += 1
                self._held.move_to_end(spec.name)
                return held, False
            if held is not None:
                await self._forget(spec.name, held)  # closed by the host while idle
            return await self._open(spec), True

    async def _open(self, spec: ConnectionSpec) -> _Held:
        await self._make_room()
        try:
            connection = await self._transport.connect(spec)
        finally:
            async with self._room:
                self._connecting -= 1
                self._room.notify_all()
        held = _Held(connection, _fds(connection), busy=1)
        self._typical_fds = max(self._typical_fds, held.fds)
        self._hold(spec.name, held)
        self.opened += 1
        return held

    async def _make_room(self) -> None:
        """Wait until one more connection fits, releasing least recently used idle ones."""
        async with self._room:
            while self.held_fds + self._connecting * self._typical_fds >= self.budget:
                if not await self._release_idle():
                    self.waiting += 1
                    try:
                        await self._room.wait()  # every held connection is running a command
                    finally:
                        self.waiting -= 1
            self._connecting += 1

    async def _release_idle(self) -> bool:
        """Close the least recently used idle connection; False if every one is busy."""
        idle = next((name for name, held in self._held.items() if held.busy == 0), None)
        if idle is None:
            return False
        self.released += 1
        released = self._unhold(idle)
        assert released is not None
        await _close_quietly(released)
        return True

    async def _checkin(self, held: _Held) -> None:
        held.busy -= 1
        if held.busy == 0:
            async with self._room:
                # Connections opened while others connected may have overshot the budget
                # (a ProxyCommand one holds more descriptors than guessed): back under it.
                while self.held_fds > self.budget and await self._release_idle():
                    pass
                self._room.notify_all()

    async def _forget(self, name: str, held: _Held) -> None:
        if self._held.get(name) is held:
            self._unhold(name)
        await self._close(held)

    async def _close(self, held: _Held) -> None:
        await _close_quietly(held)
        async with self._room:
            self._room.notify_all()


async def _close_quietly(held: _Held) -> None:
    with contextlib.suppress(UnreachableError):
        await held.connection.close()


class PooledConnection:
    """A host's connection as the pool lends it: each command runs on the held connection,
    reopened if the pool released it or the host closed it while idle."""

    def __init__(self, pool: ConnectionPool, spec: ConnectionSpec) -> None:
        self._pool = pool
        self.spec = spec

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        retry: Retry | None = None,
    ) -> CommandResult:
        """See Connection.run; `retry` for a read-only command (ConnectionPool.run)."""
        return await self._pool.run(
            self.spec, command, timeout=timeout, env=env, stdin=stdin, retry=retry
        )

    async def run_probe(
        self,
        command: str,
        probe: Any,
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
        retry: Retry | None = None,
    ) -> CommandResult:
        """Like `run`; the probe is parsed where the command ran if the connection can."""
        return await self._pool.run(
            self.spec, command, timeout=timeout, env=env, probe=probe, retry=retry
        )

    async def close(self) -> None:
        await self._pool.release(self.spec.name)
