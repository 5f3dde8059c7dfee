"""Helpers for tests that talk to real SSH servers: specs, ports, processes, polling.

The servers themselves live in `tests.support.asyncssh_server` (AsyncSSHServer) and
`tests.support.sshd` (OpenSSHServer); both expose the attributes `SSHTestServer` lists.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from fleetfix.transport.base import ConnectionSpec

POLL_INTERVAL = 0.02


class SSHTestServer(Protocol):
    """What AsyncSSHServer and OpenSSHServer both offer."""

    host: str
    port: int
    user: str

    @property
    def host_key_path(self) -> Path: ...

    @property
    def client_key_path(self) -> Path: ...

    @property
    def known_hosts_path(self) -> Path: ...


def spec_for(server: SSHTestServer, name: str = "target", **changes: Any) -> ConnectionSpec:
    """A ConnectionSpec that reaches `server` with its client key and known_hosts file."""
    spec = ConnectionSpec(
        name=name,
        address=server.host,
        port=server.port,
        user=server.user,
        private_keys=(str(server.client_key_path),),
        known_hosts=str(server.known_hosts_path),
        connect_timeout=15.0,
    )
    return replace(spec, **changes)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (closed again before returning)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def process_alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (an unreaped corpse counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat[stat.rfind(")") + 2 :].split()[0]
    return state not in ("Z", "X")


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll `condition` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)


async def eventually(condition: Callable[[], bool | Awaitable[bool]], timeout: float) -> bool:
    """The async `wait_until`: poll without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = condition()
        if outcome if isinstance(outcome, bool) else await outcome:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_INTERVAL)


async def read_pid(path: Path, timeout: float = 10.0) -> int:
    """The PID a remote command wrote to `path`, waiting for the file to be complete."""

    def written() -> bool:
        return path.is_file() and path.read_text().strip().isdigit()

    if not await eventually(written, timeout):
        raise AssertionError(f"no PID written to {path} within {timeout}s")
    return int(path.read_text().strip())
