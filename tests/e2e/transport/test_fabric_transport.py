"""FabricTransport against real OpenSSH: commands, timeouts that kill, failures, host keys."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleetfix.errors import HostKeyError, UnreachableError
from fleetfix.transport.base import Connection
from fleetfix.transport.fabric import FabricTransport
from tests.support import eventually, free_port, process_alive, read_pid, spec_for
from tests.support.asyncssh_server import AsyncSSHServer
from tests.support.keys import generate_keypair, known_hosts_line, write_known_hosts
from tests.support.sshd import OpenSSHServer

pytestmark = pytest.mark.sshd


@pytest.fixture
async def transport() -> AsyncIterator[FabricTransport]:
    fabric = FabricTransport()
    try:
        yield fabric
    finally:
        await fabric.aclose()


@pytest.fixture
async def conn(transport: FabricTransport, openssh_server: OpenSSHServer) -> Connection:
    return await transport.connect(spec_for(openssh_server, "gpu001"))


async def test_run_returns_output_and_status(conn: Connection) -> None:
    result = await conn.run("echo out; echo err >&2; exit 5")

    assert (result.rc, result.stdout, result.stderr) == (5, "out\n", "err\n")
    assert not result.timed_out


async def test_env_and_stdin(conn: Connection) -> None:
    result = await conn.run('echo "$GREETING"; cat', env={"GREETING": "it's me"}, stdin="fed\n")

    assert result.stdout == "it's me\nfed\n"
    assert result.rc == 0


async def test_concurrent_commands_on_one_connection(conn: Connection) -> None:
    results = await asyncio.gather(*(conn.run(f"echo {i}") for i in range(12)))

    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]


async def test_hung_command_is_killed_at_timeout(conn: Connection, tmp_path: Path) -> None:
    pid_file = tmp_path / "hung.pid"

    result = await conn.run(f"echo $$ > {pid_file}; exec sleep 600", timeout=1)

    assert result.timed_out
    assert result.rc is None
    assert "fleetfix-pid" not in result.stderr
    pid = await read_pid(pid_file)
    assert await eventually(lambda: not process_alive(pid), 15), f"pid {pid} still runs"


async def test_term_ignoring_command_is_killed(conn: Connection, tmp_path: Path) -> None:
    pid_file = tmp_path / "stubborn.pid"

    result = await conn.run(
        f"trap '' TERM; echo $$ > {pid_file}; while :; do sleep 0.2; done", timeout=1
    )

    assert result.timed_out
    pid = await read_pid(pid_file)
    assert await eventually(lambda: not process_alive(pid), 15), f"pid {pid} still runs"


async def test_closed_port_is_unreachable(
    transport: FabricTransport, openssh_server: OpenSSHServer
) -> None:
    spec = spec_for(openssh_server, "gpu404", port=free_port())

    with pytest.raises(UnreachableError, match=r"gpu404: (connection refused|cannot connect)"):
        await transport.connect(spec)


async def test_wrong_key_is_refused(
    transport: FabricTransport, openssh_server: OpenSSHServer, tmp_path: Path
) -> None:
    stranger = generate_keypair(tmp_path / "stranger", "id")
    spec = spec_for(openssh_server, private_keys=(str(stranger.private_path),))

    with pytest.raises(UnreachableError, match="authentication failed") as caught:
        await transport.connect(spec)

    assert not isinstance(caught.value, HostKeyError)


async def test_changed_host_key_is_refused(
    transport: FabricTransport, openssh_server: OpenSSHServer, tmp_path: Path
) -> None:
    other = generate_keypair(tmp_path / "other", "host")
    known_hosts = write_known_hosts(
        tmp_path / "known_hosts",
        [known_hosts_line("127.0.0.1", openssh_server.port, other.public_line)],
    )
    spec = spec_for(openssh_server, "gpu002", known_hosts=str(known_hosts))

    accepting = FabricTransport(accept_new_host_keys=True)
    try:
        with pytest.raises(HostKeyError, match=r"gpu002 \(127\.0\.0\.1:\d+\) does not match"):
            await accepting.connect(spec)
    finally:
        await accepting.aclose()


async def test_unknown_host_key_refused_then_accepted_with_accept_new(
    transport: FabricTransport, openssh_server: OpenSSHServer, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    spec = spec_for(openssh_server, "gpu003", known_hosts=str(known_hosts))

    with pytest.raises(HostKeyError, match="is not in known_hosts"):
        await transport.connect(spec)
    accepting = FabricTransport(accept_new_host_keys=True)
    try:
        conn = await accepting.connect(spec)
        assert (await conn.run("echo hello")).stdout == "hello\n"
    finally:
        await accepting.aclose()

    recorded = known_hosts.read_text().split()
    assert recorded[0] == f"[127.0.0.1]:{openssh_server.port}"
    assert recorded[2] == openssh_server.host_key.public_line.split()[1]
    again = await transport.connect(spec)
    assert (await again.run("true")).ok


async def test_proxy_jump_through_asyncssh(
    transport: FabricTransport,
    openssh_server: OpenSSHServer,
    asyncssh_server: AsyncSSHServer,
    tmp_path: Path,
) -> None:
    known_hosts = write_known_hosts(
        tmp_path / "known_hosts",
        [
            *openssh_server.known_hosts_path.read_text().splitlines(),
            *asyncssh_server.known_hosts_path.read_text().splitlines(),
        ],
    )
    # One key for both: paramiko re-requests the auth service per key, which asyncssh refuses.
    asyncssh_server.authorize(openssh_server.client_key.public_line)
    jump = f"{asyncssh_server.user}@127.0.0.1:{asyncssh_server.port}"
    spec = spec_for(
        openssh_server,
        "gpu004",
        known_hosts=str(known_hosts),
        ssh_common_args=f"-o ProxyJump={jump}",
    )

    conn = await transport.connect(spec)

    assert (await conn.run("echo jumped")).stdout == "jumped\n"
    assert asyncssh_server.forwarded == [("127.0.0.1", openssh_server.port)]


async def test_refused_sessions_are_retried_until_a_slot_frees(tmp_path: Path) -> None:
    """sshd allows 2 sessions; 8 commands at once must all run, waiting for slots."""
    with OpenSSHServer(tmp_path / "sshd", extra_config=("MaxSessions 2",)) as server:
        transport = FabricTransport(max_sessions=8)
        try:
            conn = await transport.connect(spec_for(server))
            results = await asyncio.gather(*(conn.run(f"sleep 0.3; echo {i}") for i in range(8)))
        finally:
            await transport.aclose()
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
