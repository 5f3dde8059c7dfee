"""LocalTransport: /bin/sh -c on the controller, process groups killed at the timeout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleetfix.transport.base import ConnectionSpec
from fleetfix.transport.local import LocalConnection, LocalTransport
from tests.support import eventually, process_alive, read_pid

MEBIBYTE = 1024 * 1024


@pytest.fixture
async def conn() -> AsyncIterator[LocalConnection]:
    transport = LocalTransport(kill_grace=1.0)
    try:
        yield await transport.connect(ConnectionSpec(name="controller", address="localhost"))
    finally:
        await transport.aclose()


async def test_run_returns_output_and_status(conn: LocalConnection) -> None:
    result = await conn.run("echo out; echo err >&2; exit 4")

    assert (result.rc, result.stdout, result.stderr) == (4, "out\n", "err\n")
    assert not result.timed_out
    assert result.command == "echo out; echo err >&2; exit 4"


async def test_env_adds_to_the_controller_environment(conn: LocalConnection) -> None:
    result = await conn.run('echo "$FLEETFIX_X|${PATH:+path}"', env={"FLEETFIX_X": "a 'b'"})

    assert result.stdout == "a 'b'|path\n"


async def test_stdin_is_fed_and_closed(conn: LocalConnection) -> None:
    fed = await conn.run("cat", stdin="hello\n")
    empty = await conn.run("cat; echo eof", timeout=10)

    assert fed.stdout == "hello\n"
    assert empty.stdout == "eof\n"


async def test_command_that_ignores_stdin_is_fine(conn: LocalConnection) -> None:
    result = await conn.run("exit 0", stdin="x" * MEBIBYTE)

    assert result.rc == 0


async def test_large_output_on_both_streams(conn: LocalConnection) -> None:
    command = f"head -c {MEBIBYTE} /dev/zero | tr '\\0' y; head -c {MEBIBYTE} /dev/zero >&2"

    result = await conn.run(command)

    assert len(result.stdout) == MEBIBYTE
    assert len(result.stderr) == MEBIBYTE


async def test_timeout_kills_the_whole_group(conn: LocalConnection, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()

    result = await conn.run(f"echo partial; sleep 600 & echo $! > {pid_file}; wait", timeout=1)

    assert result.timed_out
    assert result.rc is None
    assert result.stdout == "partial\n"
    assert time.monotonic() - started < 8  # 1s timeout + kill grace, not the 600s sleep
    pid = await read_pid(pid_file)
    assert await eventually(lambda: not process_alive(pid), 5)


async def test_sigterm_ignoring_command_gets_sigkill(conn: LocalConnection, tmp_path: Path) -> None:
    pid_file = tmp_path / "stubborn.pid"

    result = await conn.run(
        f"trap '' TERM; echo $$ > {pid_file}; while :; do sleep 0.1; done", timeout=1
    )

    assert result.timed_out
    pid = await read_pid(pid_file)
    assert await eventually(lambda: not process_alive(pid), 5)


async def test_escaped_process_holding_the_pipes_does_not_hang_the_run(
    conn: LocalConnection, tmp_path: Path
) -> None:
    pid_file = tmp_path / "escaped.pid"
    command = f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 30'; echo launched"
    started = time.monotonic()

    try:
        result = await conn.run(command, timeout=1)
    finally:
        # It left our process group on purpose; end it here, by PID, as we started it.
        pid = await read_pid(pid_file)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    assert result.timed_out
    assert time.monotonic() - started < 10  # timeout + two kill graces, not 30s


async def test_cancellation_kills_the_group(conn: LocalConnection, tmp_path: Path) -> None:
    pid_file = tmp_path / "cancelled.pid"
    task = asyncio.ensure_future(conn.run(f"echo $$ > {pid_file}; exec sleep 600"))
    pid = await read_pid(pid_file)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await eventually(lambda: not process_alive(pid), 5)


async def test_commands_run_concurrently(conn: LocalConnection) -> None:
    started = time.monotonic()

    results = await asyncio.gather(*(conn.run(f"sleep 1; echo {i}") for i in range(10)))

    assert [r.stdout for r in results] == [f"{i}\n" for i in range(10)]
    assert time.monotonic() - started < 6  # one after the other would take 10s


async def test_aclose_kills_running_commands(tmp_path: Path) -> None:
    transport = LocalTransport()
    conn = await transport.connect(ConnectionSpec(name="controller", address="localhost"))
    pid_file = tmp_path / "running.pid"
    task = asyncio.ensure_future(conn.run(f"echo $$ > {pid_file}; exec sleep 600", timeout=None))
    pid = await read_pid(pid_file)

    await transport.aclose()
    result = await asyncio.wait_for(task, 10)

    assert result.rc == -9
    assert not process_alive(pid)
