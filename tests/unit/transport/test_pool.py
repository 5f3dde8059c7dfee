"""ConnectionPool: held connections within a budget, LRU idle release, transparent reconnect."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Mapping
from typing import Any

import pytest

from fleetfix.errors import UnreachableError
from fleetfix.results import CommandResult
from fleetfix.transport.base import ConnectionSpec
from fleetfix.transport.pool import (
    RESERVED_FDS,
    ConnectionPool,
    StaleConnectionError,
    fd_budget,
    raise_fd_limit,
)
from tests.support import eventually


class _Link:
    """A scripted connection: counts commands, can be closed by 'the host', can hang."""

    def __init__(self, name: str, fds: int) -> None:
        self.name = name
        self.fds = fds
        self.closed = False
        self.close_calls = 0
        self.ran: list[str] = []
        self.gate: asyncio.Event | None = None
        self.stale_next = False

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = 1.0,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        if self.closed:
            raise UnreachableError(self.name, "run on a closed connection")
        if self.stale_next:
            self.stale_next = False
            raise StaleConnectionError(self.name, "connection lost: closed")
        self.ran.append(command)
        if self.gate is not None:
            await self.gate.wait()
        if self.closed:
            raise UnreachableError(self.name, "connection lost under a running command")
        return CommandResult(command, 0, f"{self.name}\n", "")

    async def close(self) -> None:
        self.close_calls += 1
        self.closed = True


class _Transport:
    name = "scripted"

    def __init__(self, fds: int = 1) -> None:
        self.fds = fds
        self.links: list[_Link] = []
        self.down: set[str] = set()
        self.closed = False
        self.log: list[str] = []

    async def connect(self, spec: ConnectionSpec) -> _Link:
        self.log.append(f"connect {spec.name}")
        if spec.name in self.down:
            raise UnreachableError(spec.name, "connection refused")
        link = _Link(spec.name, self.fds)
        self.links.append(link)
        return link

    async def aclose(self) -> None:
        self.closed = True

    def opened(self, name: str) -> list[_Link]:
        return [link for link in self.links if link.name == name]


def _spec(name: str) -> ConnectionSpec:
    return ConnectionSpec(name=name, address="127.0.0.1")


async def _run(pool: ConnectionPool, name: str, command: str = "true") -> CommandResult:
    connection = await pool.get(_spec(name))
    return await connection.run(command, timeout=5)


async def test_the_least_recently_used_idle_connection_is_released_first() -> None:
    transport = _Transport()
    pool = ConnectionPool(transport, budget=2)

    await _run(pool, "a")
    await _run(pool, "b")
    await _run(pool, "a")  # a is now the most recently used
    await _run(pool, "c")

    assert pool.held == ["a", "c"]
    assert pool.released == 1
    assert transport.opened("b")[0].closed


async def test_a_released_host_reconnects_transparently() -> None:
    transport = _Transport()
    pool = ConnectionPool(transport, budget=2)
    first = await pool.get(_spec("a"))
    await _run(pool, "b")
    await _run(pool, "c")  # releases a

    result = await first.run("echo again", timeout=5)

    assert result.stdout == "a\n"
    assert [len(transport.opened(h)) for h in "abc"] == [2, 1, 1]
    assert pool.opened == 4
    assert pool.held == ["c", "a"]


async def test_a_sweep_over_more_hosts_than_the_budget_stays_within_it() -> None:
    transport = _Transport(fds=3)  # a ProxyCommand connection holds three descriptors
    pool = ConnectionPool(transport, budget=10)
    hosts = [f"h{i}" for i in range(8)]

    for _step in range(3):
        results = await asyncio.gather(*(_run(pool, h, "step") for h in hosts))
        assert [r.stdout for r in results] == [f"{h}\n" for h in hosts]
        assert pool.held_fds <= 10

    assert len(pool.held) == 3
    assert sum(not link.closed for link in transport.links) == 3


async def test_a_connection_running_a_command_is_never_released() -> None:
    transport = _Transport()
    pool = ConnectionPool(transport, budget=1)
    busy = await pool.get(_spec("a"))
    transport.links[0].gate = gate = asyncio.Event()
    running = asyncio.ensure_future(busy.run("long", timeout=5))
    waiting = asyncio.ensure_future(_run(pool, "b"))

    assert await eventually(lambda: pool.waiting == 1, 5)  # b waits: a's command runs
    assert not transport.links[0].closed
    gate.set()

    assert (await running).ok
    assert (await waiting).stdout == "b\n"
    assert transport.log == ["connect a", "connect b"]
    assert pool.held == ["b"]


async def test_a_connection_the_host_closed_while_idle_is_reopened() -> None:
    transport = _Transport()
    pool = ConnectionPool(transport, budget=10)
    connection = await pool.get(_spec("a"))
    transport.links[0].closed = True  # the host dropped it between commands

    result = await connection.run("true", timeout=5)

    assert result.ok
    assert len(transport.opened("a")) == 2


async def test_a_dead_idle_connection_of_a_host_that_is_gone_is_unreachable() -> None:
    transport = _Transport()
    pool = ConnectionPool(transport, budget=10)
    connection = await pool.get(_spec("a"))
    transport.links[0].closed = True
    transport.down.add("a")

    with pytest.raises(UnreachableError, match="connection refused"):
        await connection.run("true", timeout=5)
    assert pool.held == []


async def test_a_stale_reused_connection_is_retried_once_on_a_new_one() -> None:
    transport = _Transport()
    pool = ConnectionPool(transport, budget=10)
    connection = await pool.get(_spec("a"))
    transport.links[0].stale_next = True

    result = await connection.run("once", timeout=5)

    assert result.ok
    assert [link.ran for link in transport.opened("a")] == [[], ["once"]]
    assert transport.links[0].close_calls == 1


async def test_a_stale_reused_connection_is_retried_only_once() -> None:
    transport = _Transport()
    pool = ConnectionPool(transport, budget=10)
    original_connect = transport.connect

    async def connect_stale(spec: ConnectionSpec) -> _Link:
        link = await original_connect(spec)
        link.stale_next = True
        return link

    transport.connect = connect_stale  # type: ignore[method-assign]
    connection = await pool.get(_spec("a"))

    with pytest.raises(StaleConnectionError):
        await connection.run("true", timeout=5)
    assert len(transport.opened("a")) == 2
    assert pool.held == []


async def test_release_and_aclose_close_connections_and_the_transport() -> None:
    transport = _Transport()
    pool = ConnectionPool(transport, budget=10)
    await _run(pool, "a")
    await _run(pool, "b")

    await pool.release("a")
    assert pool.held == ["b"]
    await pool.aclose()

    assert all(link.close_calls == 1 for link in transport.links)
    assert transport.closed


async def test_run_probe_is_passed_to_a_connection_that_parses_probes() -> None:
    class _Parsing(_Link):
        async def run_probe(
            self,
            command: str,
            probe: Any,
            *,
            timeout: float | None = 1.0,
            env: Mapping[str, str] | None = None,
        ) -> CommandResult:
            return CommandResult(command, 0, f"parsed by {probe}", "")

    class _ParsingTransport(_Transport):
        async def connect(self, spec: ConnectionSpec) -> _Link:
            return _Parsing(spec.name, 1)

    plain = await ConnectionPool(_Transport(), budget=4).get(_spec("a"))
    parsing = await ConnectionPool(_ParsingTransport(), budget=4).get(_spec("a"))

    assert (await parsing.run_probe("x", "gpu", timeout=5)).stdout == "parsed by gpu"
    assert (await plain.run_probe("x", "gpu", timeout=5)).stdout == "a\n"


def test_the_budget_leaves_headroom_for_journal_and_pipes() -> None:
    assert fd_budget(20_000) == 18_000
    assert fd_budget(4_096) == 4_096 - RESERVED_FDS
    assert fd_budget(512) == 1


def test_the_soft_fd_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard // 2), hard))
        raised = raise_fd_limit()

        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == raised
        assert raised == (hard if hard != resource.RLIM_INFINITY else soft)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
