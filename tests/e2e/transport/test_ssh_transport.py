"""SSHTransport against real servers (asyncssh and OpenSSH): commands, env, timeouts, failures."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import HostKeyError, TransportError, UnreachableError
from fleetfix.transport.remote import CLIENT_GRACE
from fleetfix.transport.ssh import SSHConnection, SSHTransport
from tests.support import eventually, free_port, process_alive, read_pid, spec_for
from tests.support.keys import generate_keypair
from tests.support.sshd import OpenSSHServer

MEBIBYTE = 1024 * 1024


@pytest.fixture
async def transport() -> AsyncIterator[SSHTransport]:
    ssh = SSHTransport()
    try:
        yield ssh
    finally:
        await ssh.aclose()


@pytest.fixture
async def conn(transport: SSHTransport, ssh_server: Any) -> SSHConnection:
    return await transport.connect(spec_for(ssh_server))


async def test_run_returns_stdout_stderr_and_exit_status(conn: SSHConnection) -> None:
    result = await conn.run("echo out; echo err >&2; exit 3")

    assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.timed_out
    assert not result.ok
    assert result.command == "echo out; echo err >&2; exit 3"
    assert result.duration > 0


async def test_commands_use_sh_semantics(conn: SSHConnection) -> None:
    result = await conn.run("for x in a b; do printf '%s-' \"$x\"; done; [ 1 = 1 ] && echo yes")

    assert result.stdout == "a-b-yes\n"
    assert result.ok


async def test_env_is_exported_even_without_accept_env(conn: SSHConnection) -> None:
    tricky = 'it\'s "quoted" $HOME `date` ; exit 9'
    env = {"FLEETFIX_TRICKY": tricky, "FLEETFIX_OTHER": "2"}

    result = await conn.run('printf "%s|%s" "$FLEETFIX_TRICKY" "$FLEETFIX_OTHER"', env=env)

    assert result.stdout == f"{tricky}|2"
    assert result.rc == 0


async def test_invalid_env_name_is_refused_before_running(conn: SSHConnection) -> None:
    with pytest.raises(TransportError, match="invalid environment variable name"):
        await conn.run("true", env={"BAD; rm -rf /": "x"})


async def test_stdin_is_fed_then_closed(conn: SSHConnection) -> None:
    fed = await conn.run("cat; echo done", stdin="line one\nline two\n")
    # Without stdin the command must see EOF at once, not hang until its timeout.
    empty = await conn.run("cat; echo done", timeout=20)

    assert fed.stdout == "line one\nline two\ndone\n"
    assert empty.stdout == "done\n"
    assert empty.duration < 10


async def test_one_mebibyte_on_both_streams(conn: SSHConnection) -> None:
    command = f"head -c {MEBIBYTE} /dev/zero | tr '\\0' x; head -c {MEBIBYTE} /dev/zero >&2"

    result = await conn.run(command, timeout=60)

    assert result.rc == 0
    assert len(result.stdout) == MEBIBYTE
    assert set(result.stdout) == {"x"}
    assert len(result.stderr) == MEBIBYTE


async def test_many_concurrent_commands_share_one_connection(conn: SSHConnection) -> None:
    # 40 commands > OpenSSH's MaxSessions (10): the transport must queue, not fail.
    started = time.monotonic()

    results = await asyncio.gather(*(conn.run(f"sleep 0.3; echo {i}") for i in range(40)))

    elapsed = time.monotonic() - started
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(40)]
    assert all(r.ok for r in results)
    assert elapsed < 40 * 0.3 * 0.75, f"commands did not overlap ({elapsed:.1f}s)"


async def test_hung_command_is_killed_on_the_remote_side(
    conn: SSHConnection, tmp_path: Path
) -> None:
    pid_file = tmp_path / "hung.pid"

    result = await conn.run(f"echo started; echo $$ > {pid_file}; exec sleep 600", timeout=1)

    assert result.timed_out
    assert result.rc is None
    assert "started" in result.stdout
    assert result.duration < 1 + CLIENT_GRACE + 6  # near the timeout, not the 600s sleep
    pid = await read_pid(pid_file)
    assert await eventually(lambda: not process_alive(pid), 15), f"pid {pid} still runs"


async def test_command_ignoring_sigterm_is_killed(conn: SSHConnection, tmp_path: Path) -> None:
    pid_file = tmp_path / "stubborn.pid"
    command = f"trap '' TERM; echo $$ > {pid_file}; while :; do sleep 0.2; done"

    result = await conn.run(command, timeout=1)

    assert result.timed_out
    pid = await read_pid(pid_file)
    assert await eventually(lambda: not process_alive(pid), 15), f"pid {pid} still runs"


async def test_background_children_of_a_hung_command_are_killed(
    conn: SSHConnection, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"

    result = await conn.run(f"sleep 600 & echo $! > {pid_file}; wait", timeout=1)

    assert result.timed_out
    pid = await read_pid(pid_file)
    assert await eventually(lambda: not process_alive(pid), 15), f"pid {pid} still runs"


async def test_exit_124_before_the_deadline_is_a_plain_failure(conn: SSHConnection) -> None:
    result = await conn.run("exit 124", timeout=30)

    assert (result.rc, result.timed_out) == (124, False)


async def test_no_timeout_runs_to_completion(conn: SSHConnection) -> None:
    result = await conn.run("sleep 0.2; echo finished", timeout=None)

    assert (result.rc, result.stdout) == (0, "finished\n")


async def test_connection_is_usable_after_a_timeout(conn: SSHConnection) -> None:
    hung = await conn.run("sleep 600", timeout=1)
    after = await conn.run("echo still here")

    assert hung.timed_out
    assert after.stdout == "still here\n"


async def test_cancelled_run_kills_the_remote_command(conn: SSHConnection, tmp_path: Path) -> None:
    pid_file = tmp_path / "cancelled.pid"
    task = asyncio.ensure_future(conn.run(f"echo $$ > {pid_file}; exec sleep 600", timeout=600))
    pid = await read_pid(pid_file)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await eventually(lambda: not process_alive(pid), 15), f"pid {pid} still runs"


async def test_lost_connection_raises_unreachable(
    conn: SSHConnection, ssh_server: Any, tmp_path: Path
) -> None:
    pid_file = tmp_path / "running.pid"
    running = asyncio.ensure_future(conn.run(f"echo $$ > {pid_file}; sleep 30", timeout=60))
    await read_pid(pid_file)

    ssh_server.drop_connections()

    with pytest.raises(UnreachableError, match="connection lost"):
        await asyncio.wait_for(running, 20)
    with pytest.raises(UnreachableError, match="target: connection lost"):
        await conn.run("true")


async def test_closed_port_is_unreachable(transport: SSHTransport, ssh_server: Any) -> None:
    spec = spec_for(ssh_server, "gpu404", port=free_port())

    with pytest.raises(UnreachableError, match="connection refused") as caught:
        await transport.connect(spec)

    assert not isinstance(caught.value, HostKeyError)
    assert caught.value.host == "gpu404"


async def test_wrong_key_is_refused(
    transport: SSHTransport, ssh_server: Any, tmp_path: Path
) -> None:
    stranger = generate_keypair(tmp_path / "stranger", "id")
    spec = spec_for(ssh_server, private_keys=(str(stranger.private_path),))

    with pytest.raises(UnreachableError, match="authentication failed") as caught:
        await transport.connect(spec)

    assert not isinstance(caught.value, HostKeyError)


async def test_unknown_user_is_refused(transport: SSHTransport, ssh_server: Any) -> None:
    spec = spec_for(ssh_server, user="fleetfix-no-such-user")

    with pytest.raises(UnreachableError, match="authentication failed as fleetfix-no-such-user"):
        await transport.connect(spec)


async def test_missing_key_file_is_unreachable_with_reason(
    transport: SSHTransport, ssh_server: Any, tmp_path: Path
) -> None:
    spec = spec_for(ssh_server, private_keys=(str(tmp_path / "absent_key"),))

    with pytest.raises(UnreachableError, match=r"absent_key|No such file"):
        await transport.connect(spec)


async def test_silent_server_times_out(transport: SSHTransport, ssh_server: Any) -> None:
    with socket.socket() as silent:
        # Listening but never answering: the TCP handshake completes, the SSH one never does.
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        spec = replace(spec_for(ssh_server), port=silent.getsockname()[1], connect_timeout=1)
        started = time.monotonic()

        with pytest.raises(UnreachableError, match="timed out after 1s"):
            await transport.connect(spec)

    assert time.monotonic() - started < 8


async def test_aclose_closes_every_connection(ssh_server: Any) -> None:
    transport = SSHTransport()
    first = await transport.connect(spec_for(ssh_server, "a"))
    second = await transport.connect(spec_for(ssh_server, "b"))

    await transport.aclose()

    for conn in (first, second):
        with pytest.raises(UnreachableError):
            await conn.run("true")


@pytest.mark.sshd
async def test_keepalive_detects_a_silently_hung_host(
    openssh_server: OpenSSHServer, tmp_path: Path
) -> None:
    transport = SSHTransport(keepalive_interval=0.5)
    pid: int | None = None
    try:
        conn = await transport.connect(spec_for(openssh_server))
        pid_file = tmp_path / "waiting.pid"
        running = asyncio.ensure_future(conn.run(f"echo $$ > {pid_file}; sleep 30", timeout=60))
        pid = await read_pid(pid_file)
        started = time.monotonic()

        openssh_server.freeze_connections()
        with pytest.raises(UnreachableError, match="connection lost"):
            await asyncio.wait_for(running, 20)

        assert time.monotonic() - started < 10
    finally:
        openssh_server.freeze_connections(False)
        await transport.aclose()
        # Orphaned when its sshd gave up on us; it is ours, so end its group now.
        with contextlib.suppress(ProcessLookupError):
            if pid is not None:
                os.killpg(os.getpgid(pid), signal.SIGKILL)


@pytest.mark.sshd
async def test_server_allowing_fewer_sessions_still_runs_everything(tmp_path: Path) -> None:
    with OpenSSHServer(tmp_path / "sshd", extra_config=("MaxSessions 2",)) as server:
        transport = SSHTransport()
        try:
            conn = await transport.connect(spec_for(server))
            results = await asyncio.gather(*(conn.run(f"sleep 0.2; echo {i}") for i in range(6)))
        finally:
            await transport.aclose()

    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
