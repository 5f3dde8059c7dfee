"""Connections that drop under a command (issue 19): a read-only one is run again on a fresh
connection, any other is not; a host whose connections keep dropping needs a human. Against a
real asyncssh server on 127.0.0.1 that closes its connections under a running command."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleetfix.transport.pool import GAVE_UP, ConnectionLostError, ConnectionPool, Retry
from fleetfix.transport.ssh import SSHTransport
from tests.support import eventually, spec_for
from tests.support.asyncssh_server import AsyncSSHServer

pytestmark = pytest.mark.timeout(60)

QUICK = (0.01, 0.02, 0.04)


@pytest.fixture
async def server() -> AsyncIterator[AsyncSSHServer]:
    async with AsyncSSHServer() as running:
        yield running


def _marking(log: Path) -> str:
    """Logs each start, then answers `ok` once it started before (it hangs the first time)."""
    quoted = shlex.quote(str(log))
    return f"echo run >> {quoted}; [ $(wc -l < {quoted}) -gt 1 ] && echo ok || sleep 30"


def _starts(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


async def _drop_when(server: AsyncSSHServer, log: Path, starts: int) -> None:
    """Close every connection from the server's side once the command started `starts` times."""
    assert await eventually(lambda: _starts(log) >= starts, 10)
    server.drop_connections()


async def test_a_read_only_command_runs_again_on_a_fresh_connection(
    server: AsyncSSHServer, tmp_path: Path
) -> None:
    log = tmp_path / "starts"
    pool = ConnectionPool(SSHTransport())
    heard: list[tuple[str, int, float, str]] = []
    retry = Retry(
        QUICK, lambda host, tries, delay, exc: heard.append((host, tries, delay, exc.message))
    )
    try:
        dropper = asyncio.create_task(_drop_when(server, log, 1))
        done = await pool.run(spec_for(server), _marking(log), timeout=20, env=None, retry=retry)
        await dropper
    finally:
        await pool.aclose()
    assert done.ok and done.stdout == "ok\n"
    assert _starts(log) == 2
    assert pool.opened == 2  # the dropped one was replaced
    assert [(h, t, d) for h, t, d, _ in heard] == [("target", 1, 0.01)]
    assert heard[0][3].startswith("connection lost")


async def test_a_command_that_changes_the_node_is_not_sent_again(
    server: AsyncSSHServer, tmp_path: Path
) -> None:
    log = tmp_path / "starts"
    pool = ConnectionPool(SSHTransport())
    try:
        dropper = asyncio.create_task(_drop_when(server, log, 1))
        with pytest.raises(ConnectionLostError) as lost:
            await pool.run(spec_for(server), _marking(log), timeout=20, env=None)
        await dropper
        assert _starts(log) == 1
        # The next command gets a fresh connection, as before.
        again = await pool.run(spec_for(server), "echo next", timeout=20, env=None)
    finally:
        await pool.aclose()
    assert lost.value.message.startswith("connection lost")
    assert GAVE_UP not in lost.value.message
    assert again.stdout == "next\n"


async def test_a_host_whose_connections_keep_dropping_needs_a_human(
    server: AsyncSSHServer, tmp_path: Path
) -> None:
    log = tmp_path / "starts"
    command = f"echo run >> {shlex.quote(str(log))}; sleep 30"
    pool = ConnectionPool(SSHTransport())
    heard: list[int] = []
    retry = Retry(QUICK, lambda _h, tries, _d, _e: heard.append(tries))

    async def drop_every_try() -> None:
        for starts in range(1, len(QUICK) + 2):
            await _drop_when(server, log, starts)

    try:
        dropper = asyncio.create_task(drop_every_try())
        with pytest.raises(ConnectionLostError) as lost:
            await pool.run(spec_for(server), command, timeout=20, env=None, retry=retry)
        await dropper
    finally:
        await pool.aclose()
    assert _starts(log) == len(QUICK) + 1
    assert heard == [1, 2, 3]
    assert lost.value.message.endswith(f"(on 4 connections in a row); {GAVE_UP}")
