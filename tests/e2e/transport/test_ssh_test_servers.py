"""The loopback test servers themselves: what they promise every end-to-end test."""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
from pathlib import Path

import asyncssh
import pytest

from fleetfix.transport.ssh import SSHTransport
from tests.support import eventually, process_alive, read_pid, spec_for, wait_until
from tests.support.asyncssh_server import AsyncSSHServer
from tests.support.sshd import OpenSSHServer


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


async def _client(server: AsyncSSHServer) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect(
        "127.0.0.1",
        server.port,
        username=server.user,
        client_keys=[str(server.client_key_path)],
        known_hosts=str(server.known_hosts_path),
    )


async def test_asyncssh_server_known_hosts_trusts_both_patterns(
    asyncssh_server: AsyncSSHServer,
) -> None:
    patterns, algorithm, data = asyncssh_server.known_hosts_path.read_text().split()

    assert patterns.split(",") == ["127.0.0.1", f"[127.0.0.1]:{asyncssh_server.port}"]
    assert [algorithm, data] == asyncssh_server.host_key.public_line.split()[:2]
    assert asyncssh_server.client_key_path.stat().st_mode & 0o077 == 0


async def test_asyncssh_server_passes_exit_status_and_signals(
    asyncssh_server: AsyncSSHServer,
) -> None:
    async with await _client(asyncssh_server) as conn:
        status = await conn.run("exit 7")
        killed = await conn.run("kill -TERM $$")

    assert status.exit_status == 7
    assert killed.exit_signal is not None
    assert killed.exit_signal[0] == "TERM"


async def test_asyncssh_server_kills_the_group_when_the_channel_closes(
    asyncssh_server: AsyncSSHServer, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    async with await _client(asyncssh_server) as conn:
        process = await conn.create_process(f"sleep 600 & echo $! > {pid_file}; wait")
        pid = await read_pid(pid_file)

        process.close()

        assert await eventually(lambda: not process_alive(pid), 10), f"pid {pid} still runs"


async def test_asyncssh_server_forwards_signals_to_the_group(
    asyncssh_server: AsyncSSHServer, tmp_path: Path
) -> None:
    pid_file = tmp_path / "signalled.pid"
    async with await _client(asyncssh_server) as conn:
        process = await conn.create_process(f"echo $$ > {pid_file}; exec sleep 600")
        pid = await read_pid(pid_file)

        process.send_signal("INT")
        await asyncio.wait_for(process.wait_closed(), 10)

        assert process.exit_signal is not None and process.exit_signal[0] == "INT"
        assert not process_alive(pid)


async def test_asyncssh_server_refuses_other_users_and_remote_forwarding(
    asyncssh_server: AsyncSSHServer,
) -> None:
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(
            "127.0.0.1",
            asyncssh_server.port,
            username="fleetfix-nobody",
            client_keys=[str(asyncssh_server.client_key_path)],
            known_hosts=str(asyncssh_server.known_hosts_path),
        )
    async with await _client(asyncssh_server) as conn:
        with pytest.raises(asyncssh.ChannelOpenError):
            await conn.open_connection("192.0.2.1", 22)
    assert asyncssh_server.forwarded == []


async def test_asyncssh_server_stops_listening_and_cleans_up(tmp_path: Path) -> None:
    async with AsyncSSHServer() as server:
        port, workdir = server.port, server.workdir
        assert _port_open(port)

    assert not _port_open(port)
    assert not workdir.exists()


@pytest.mark.sshd
def test_openssh_server_is_stopped_by_pid(tmp_path: Path) -> None:
    with OpenSSHServer(tmp_path / "sshd") as server:
        pid = server.pid
        assert pid is not None and process_alive(pid)
        config = (tmp_path / "sshd" / "sshd_config").read_text()
        assert f"ListenAddress 127.0.0.1:{server.port}" in config
        assert "UsePAM no" in config
        assert _port_open(server.port)

    assert wait_until(lambda: not process_alive(pid), 5)
    assert not _port_open(server.port)


@pytest.mark.sshd
def test_openssh_server_takes_max_startups(tmp_path: Path) -> None:
    with OpenSSHServer(tmp_path / "sshd", max_startups="200") as server:
        config = (tmp_path / "sshd" / "sshd_config").read_text()
        assert "MaxStartups 200" in config
        assert _port_open(server.port)


@pytest.mark.sshd
async def test_shell_start_up_noise_stays_out_of_the_way(
    openssh_server: OpenSSHServer, tmp_path: Path
) -> None:
    # bash sources ~/.bashrc for sshd sessions; real hosts print all sorts of things there.
    (openssh_server.home / ".bashrc").write_text("echo rc-noise-out; echo rc-noise-err >&2\n")
    uses_bash = pwd.getpwuid(os.getuid()).pw_shell.endswith("bash")
    transport = SSHTransport()
    try:
        conn = await transport.connect(spec_for(openssh_server))
        result = await conn.run("echo payload; echo complaint >&2")
        pid_file = tmp_path / "noisy.pid"
        hung = await conn.run(f"echo $$ > {pid_file}; exec sleep 600", timeout=1)
    finally:
        await transport.aclose()

    noise_out, noise_err = ("rc-noise-out\n", "rc-noise-err\n") if uses_bash else ("", "")
    assert result.stdout == f"{noise_out}payload\n"
    assert result.stderr == f"{noise_err}complaint\n"
    assert hung.timed_out
    pid = await read_pid(pid_file)
    assert await eventually(lambda: not process_alive(pid), 15)
