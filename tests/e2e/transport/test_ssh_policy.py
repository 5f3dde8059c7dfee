"""SSH costs against real servers: AES-GCM negotiated, no keepalive timers, the pool's budget."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import UnreachableError
from fleetfix.transport.base import ConnectionSpec
from fleetfix.transport.pool import ConnectionPool
from fleetfix.transport.ssh import PREFERRED_MACS, SSHConnection, SSHTransport
from tests.support import eventually, spec_for
from tests.support.asyncssh_server import AsyncSSHServer
from tests.support.sshd import OpenSSHServer

CHACHA = "chacha20-poly1305@openssh.com"
GCM = "aes128-gcm@openssh.com"


@pytest.fixture
async def transport() -> AsyncIterator[SSHTransport]:
    ssh = SSHTransport()
    try:
        yield ssh
    finally:
        await ssh.aclose()


async def test_aes_gcm_is_negotiated_where_both_sides_offer_it(
    transport: SSHTransport, ssh_server: Any
) -> None:
    conn = await transport.connect(spec_for(ssh_server))

    assert conn.get_extra_info("send_cipher") == GCM
    assert conn.get_extra_info("recv_cipher") == GCM
    assert (await conn.run("echo ok")).stdout == "ok\n"


async def test_a_server_offering_only_chacha20_still_connects(
    transport: SSHTransport, tmp_path: Path
) -> None:
    async with AsyncSSHServer(tmp_path / "asyncssh", encryption_algs=(CHACHA,)) as server:
        conn = await transport.connect(spec_for(server))

        assert conn.get_extra_info("send_cipher") == CHACHA
        assert (await conn.run("echo ok")).stdout == "ok\n"


@pytest.mark.sshd
async def test_openssh_offering_only_chacha20_still_connects(
    transport: SSHTransport, tmp_path: Path
) -> None:
    with OpenSSHServer(tmp_path / "sshd", extra_config=(f"Ciphers {CHACHA}",)) as server:
        conn = await transport.connect(spec_for(server))

        assert conn.get_extra_info("send_cipher") == CHACHA
        assert (await conn.run("echo ok")).stdout == "ok\n"


@pytest.mark.sshd
async def test_a_non_aead_cipher_gets_the_cheapest_mac(
    transport: SSHTransport, tmp_path: Path
) -> None:
    with OpenSSHServer(tmp_path / "sshd", extra_config=("Ciphers aes128-ctr",)) as server:
        conn = await transport.connect(spec_for(server))

        assert conn.get_extra_info("send_cipher") == "aes128-ctr"
        assert conn.get_extra_info("send_mac") == PREFERRED_MACS[0]
        assert (await conn.run("echo ok")).stdout == "ok\n"


@contextlib.contextmanager
def _keepalive_timers() -> Iterator[Callable[[], int]]:
    """Count keepalive timers asyncssh arms on this loop (one per received burst when on)."""
    loop = asyncio.get_running_loop()
    original = loop.call_later
    armed = 0

    def counting(delay: float, callback: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        nonlocal armed
        armed += getattr(callback, "__name__", "") == "_keepalive_timer_callback"
        return original(delay, callback, *args, **kw)

    loop.call_later = counting  # type: ignore[method-assign,assignment]
    try:
        yield lambda: armed
    finally:
        loop.call_later = original  # type: ignore[method-assign]


@pytest.mark.parametrize(("interval", "expect_timers"), [(0, False), (15, True)])
async def test_keepalive_timers_only_when_asked_for(
    asyncssh_server: AsyncSSHServer, interval: float, expect_timers: bool
) -> None:
    transport = SSHTransport(keepalive_interval=interval)
    try:
        with _keepalive_timers() as armed:
            conn = await transport.connect(spec_for(asyncssh_server))
            result = await conn.run("head -c 1048576 /dev/zero | tr '\\0' x")
    finally:
        await transport.aclose()

    assert len(result.stdout) == 1024 * 1024
    assert (armed() > 0) is expect_timers


class _Recording:
    """SSHTransport, remembering every connection it opened (to watch them close)."""

    name = "ssh"

    def __init__(self, transport: SSHTransport) -> None:
        self.transport = transport
        self.opened: list[SSHConnection] = []

    async def connect(self, spec: ConnectionSpec) -> SSHConnection:
        connection = await self.transport.connect(spec)
        self.opened.append(connection)
        return connection

    async def aclose(self) -> None:
        await self.transport.aclose()


async def test_an_idle_connection_the_host_dropped_is_reopened(ssh_server: Any) -> None:
    recording = _Recording(SSHTransport())
    pool = ConnectionPool(recording, budget=10)
    try:
        connection = await pool.get(spec_for(ssh_server))
        assert (await connection.run("echo one")).stdout == "one\n"
        ssh_server.drop_connections()
        assert await eventually(lambda: recording.opened[0].closed, 10)

        result = await connection.run("echo two")
    finally:
        await pool.aclose()

    assert result.stdout == "two\n"
    assert len(recording.opened) == 2


@pytest.mark.sshd
async def test_a_silently_dead_idle_connection_is_unreachable_at_its_next_use(
    openssh_server: OpenSSHServer,
) -> None:
    pool = ConnectionPool(SSHTransport(), budget=10)
    spec = spec_for(openssh_server, connect_timeout=1)
    try:
        connection = await pool.get(spec)
        assert (await connection.run("true")).ok
        openssh_server.freeze_connections()

        with pytest.raises(UnreachableError, match="connection lost: no answer"):
            await connection.run("true")
    finally:
        openssh_server.freeze_connections(False)
        await pool.aclose()

    assert pool.held == []


async def test_more_hosts_than_the_budget_all_run_over_real_ssh(ssh_server: Any) -> None:
    hosts = [f"h{i:02}" for i in range(20)]
    pool = ConnectionPool(SSHTransport(max_handshakes=8), budget=5)

    async def step(name: str, word: str) -> str:
        connection = await pool.get(spec_for(ssh_server, name))
        result = await connection.run(f"echo {word} {name}", timeout=60)
        return result.stdout.strip()

    try:
        for word in ("probe", "act", "verify"):
            answers = await asyncio.gather(*(step(h, word) for h in hosts))
            assert answers == [f"{word} {h}" for h in hosts]
            assert len(pool.held) <= 5
    finally:
        await pool.aclose()

    assert pool.released >= len(hosts) - 5
    assert pool.held == []
