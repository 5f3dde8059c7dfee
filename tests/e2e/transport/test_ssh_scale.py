"""200 hosts at once through SSHTransport's handshake limit, against one server."""

from __future__ import annotations

import asyncio

import pytest

from fleetfix.transport.ssh import SSHTransport
from tests.support import spec_for
from tests.support.asyncssh_server import AsyncSSHServer
from tests.support.sshd import OpenSSHServer

HOSTS = [f"h{i:03}" for i in range(1, 201)]


async def _fan_out(transport: SSHTransport, server: AsyncSSHServer | OpenSSHServer) -> list[str]:
    async def one(name: str) -> str:
        conn = await transport.connect(spec_for(server, name))
        result = await conn.run(f"echo {name}", timeout=60)
        assert result.ok, result
        return result.stdout.strip()

    return list(await asyncio.gather(*(one(name) for name in HOSTS)))


@pytest.mark.sshd
@pytest.mark.slow
async def test_200_hosts_through_default_max_startups_of_sshd(
    openssh_server: OpenSSHServer,
) -> None:
    # sshd's default MaxStartups 10:30:100 drops connections beyond 10 unauthenticated ones;
    # a handshake limit of 8 is what makes 200 simultaneous hosts all succeed.
    transport = SSHTransport(max_handshakes=8)
    try:
        answers = await _fan_out(transport, openssh_server)
    finally:
        await transport.aclose()

    assert answers == HOSTS


@pytest.mark.slow
async def test_200_hosts_never_exceed_the_handshake_limit(
    asyncssh_server: AsyncSSHServer,
) -> None:
    transport = SSHTransport(max_handshakes=8)
    try:
        answers = await _fan_out(transport, asyncssh_server)
    finally:
        await transport.aclose()

    assert answers == HOSTS
    assert asyncssh_server.connections_total == 200
    assert 1 <= asyncssh_server.peak_handshakes <= 8
