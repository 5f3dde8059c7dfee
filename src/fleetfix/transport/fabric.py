"""The Fabric transport: the same contract on the Fabric/paramiko client stack.

Fabric is synchronous, so every call runs on this transport's own thread pool (the default
executor has a handful of threads; a fleet needs many). Commands are wrapped exactly as the
asyncssh transport wraps them (env exports, remote `timeout`), and Fabric's own AutoAdd host
key policy is replaced by known_hosts verification.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import math
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import fabric
import paramiko
from invoke.exceptions import CommandTimedOut, ThreadException

from fleetfix.errors import HostKeyError, UnreachableError
from fleetfix.results import CommandResult
from fleetfix.transport.base import DEFAULT_COMMAND_TIMEOUT, ConnectionSpec
from fleetfix.transport.remote import (
    CHANNEL_RETRY_DELAYS,
    CLIENT_GRACE,
    check_env,
    kill_command,
    killed_by_timeout,
    proxy_command,
    remote_command,
    split_pid_line,
)
from fleetfix.transport.spec import JumpHost, SSHArgs, parse_ssh_args
from fleetfix.transport.ssh import DEFAULT_MAX_SESSIONS, KILL_TIMEOUT

T = TypeVar("T")
DEFAULT_MAX_WORKERS = 64

_CONNECT_ERRORS: tuple[tuple[type[BaseException], str], ...] = (
    (paramiko.AuthenticationException, "authentication failed as {user} at {where} ({reason})"),
    (ConnectionRefusedError, "connection refused by {where}"),
    (socket.gaierror, "cannot resolve {address}: {reason}"),
    (TimeoutError, "connection to {where} timed out after {timeout:g}s"),
    (paramiko.ssh_exception.NoValidConnectionsError, "cannot connect to {where}: {reason}"),
    (paramiko.SSHException, "{where}: {reason}"),
    (EOFError, "{where} closed the connection"),
    (OSError, "cannot connect to {where}: {reason}"),
)


# paramiko's codes for a refused session channel; OpenSSH uses CONNECT_FAILED for MaxSessions.
_NO_SLOT = frozenset(
    {
        paramiko.common.OPEN_FAILED_CONNECT_FAILED,
        paramiko.common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED,
        paramiko.common.OPEN_FAILED_RESOURCE_SHORTAGE,
    }
)


class _KnownHostsPolicy:
    """A paramiko missing-host-key policy: refuse unknown keys, or record them with accept_new.

    Paramiko refuses a changed key itself (BadHostKeyException) before asking any policy.
    """

    def __init__(self, path: Path, accept_new: bool, lock: threading.Lock) -> None:
        self.path = path
        self.accept_new = accept_new
        self._lock = lock
        self.refused: str | None = None

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        if not self.accept_new:
            self.refused = "unknown"
            raise paramiko.SSHException(f"host key for {hostname} is not in {self.path}")
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as stream:
                stream.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)


def _discard(conn: fabric.Connection) -> None:
    """Close a connection that failed to open (Fabric's close() skips unopened ones)."""
    conn.client.close()
    if conn.gateway is not None and not isinstance(conn.gateway, str):
        _discard(conn.gateway)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _host_key_message(spec: ConnectionSpec, path: Path, refusal: str) -> str:
    where = f"{spec.name} ({spec.address}:{spec.port})"
    if refusal == "unknown":
        return (
            f"host key for {where} is not in known_hosts ({path}); "
            "to trust a new host use --accept-new-host-keys"
        )
    return (
        f"host key for {where} does not match known_hosts ({path}): the host was reinstalled "
        "or someone is in the middle (--accept-new-host-keys only trusts hosts not yet known)"
    )


class FabricConnection:
    """One open Fabric connection; each command runs on a pool thread."""

    def __init__(
        self,
        spec: ConnectionSpec,
        conn: fabric.Connection,
        executor: ThreadPoolExecutor,
        max_sessions: int,
    ) -> None:
        self.spec = spec
        self._conn = conn
        self._executor = executor
        self._sessions = asyncio.Semaphore(max_sessions)

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run `command` through the remote shell; see Connection.run for the contract."""
        wire = remote_command(command, timeout, check_env(self.spec.name, env))
        run = functools.partial(self._run_sync, command, wire, timeout, stdin)
        async with self._sessions:
            return await _in_thread(self._executor, run)

    def _run_sync(
        self, command: str, wire: str, timeout: float | None, stdin: str | None
    ) -> CommandResult:
        started = time.monotonic()
        try:
            result = self._run_with_slot(wire, timeout, stdin)
            client_gave_up = False
        except CommandTimedOut as exc:
            result = exc.result
            client_gave_up = True
        except (paramiko.SSHException, OSError, EOFError, ThreadException) as exc:
            raise UnreachableError(self.spec.name, f"connection lost: {_reason(exc)}") from exc
        elapsed = time.monotonic() - started
        rc = result.exited
        pid, stderr = split_pid_line(result.stderr)
        if client_gave_up or cut_off_by_client(rc, elapsed, timeout):
            self._kill_sync(pid)
            return CommandResult(command, None, result.stdout, stderr, elapsed, True)
        if killed_by_timeout(rc, elapsed, timeout):
            return CommandResult(command, None, result.stdout, stderr, elapsed, True)
        return CommandResult(command, rc, result.stdout, stderr, elapsed)

    def _run_with_slot(self, wire: str, timeout: float | None, stdin: str | None) -> Any:
        """Run, retrying while sshd refuses the session channel (no free MaxSessions slot)."""
        for delay in (*CHANNEL_RETRY_DELAYS, None):
            try:
                return self._once(wire, timeout, stdin)
            except paramiko.ChannelException as exc:
                if delay is None or exc.code not in _NO_SLOT:
                    raise
            except paramiko.SSHException as exc:
                # Concurrent opens race inside paramiko: one thread takes the stored
                # ChannelException, the others get this bare message. Retry while alive.
                if delay is None or "Unable to open channel" not in str(exc) or not self._alive():
                    raise
            time.sleep(delay)  # a pool thread, not the event loop
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _alive(self) -> bool:
        transport = self._conn.transport
        return transport is not None and bool(transport.is_active())

    def _once(self, wire: str, timeout: float | None, stdin: str | None) -> Any:
        return self._conn.run(
            wire,
            hide=True,
            warn=True,
            pty=False,
            encoding="utf-8",
            in_stream=io.StringIO(stdin or ""),
            timeout=_client_deadline(timeout),
        )

    def _kill_sync(self, pid: int | None) -> None:
        """Kill the process group of a command Fabric gave up on (it only closes the channel)."""
        if pid is None:
            return
        with contextlib.suppress(paramiko.SSHException, OSError, EOFError, CommandTimedOut):
            self._conn.run(
                kill_command(pid), hide=True, warn=True, in_stream=False, timeout=KILL_TIMEOUT
            )

    async def close(self) -> None:
        await _in_thread(self._executor, self._conn.close)


_NO_EXIT_STATUS = -1
"""What paramiko reports for a channel closed before the server sent an exit status."""


def _client_deadline(timeout: float | None) -> int | None:
    """Whole seconds Invoke waits before closing the channel on a command still running."""
    return None if timeout is None else math.ceil(timeout + CLIENT_GRACE)


def cut_off_by_client(rc: int | None, elapsed: float, timeout: float | None) -> bool:
    """Whether Invoke's timer closed the channel on a command without raising CommandTimedOut.

    The timer closes the channel and only then counts as expired, so a run that returns in
    between carries no exit status and no CommandTimedOut, though the command was cut off
    (and may still run remotely: the caller kills its process group).
    """
    deadline = _client_deadline(timeout)
    return rc == _NO_EXIT_STATUS and deadline is not None and elapsed >= deadline


async def _in_thread(executor: ThreadPoolExecutor, function: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(executor, function)


class FabricTransport:
    """Opens Fabric connections with known_hosts checking and a handshake limit.

    Arguments mean what they mean for SSHTransport; `max_workers` sizes the thread pool.
    """

    name = "fabric"

    def __init__(
        self,
        max_handshakes: int = 16,
        *,
        accept_new_host_keys: bool = False,
        known_hosts: str | None = None,
        default_user: str | None = None,
        default_keys: tuple[str, ...] = (),
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_workers: int = DEFAULT_MAX_WORKERS,
    ) -> None:
        self.accept_new_host_keys = accept_new_host_keys
        self.known_hosts = known_hosts
        self.default_user = default_user
        self.default_keys = default_keys
        self.max_sessions = max_sessions
        self._handshakes = asyncio.Semaphore(max_handshakes)
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="fleetfix-fabric")
        self._file_lock = threading.Lock()
        self._open: list[FabricConnection] = []

    async def connect(self, spec: ConnectionSpec) -> FabricConnection:
        """Open a connection to `spec`; raises UnreachableError or HostKeyError."""
        try:
            ssh_args = parse_ssh_args(spec.ssh_common_args)
        except ValueError as exc:
            raise UnreachableError(spec.name, f"cannot read ssh args: {exc}") from exc
        async with self._handshakes:
            opener = functools.partial(self._open_sync, spec, ssh_args)
            conn = await _in_thread(self._executor, opener)
        connection = FabricConnection(spec, conn, self._executor, self.max_sessions)
        self._open.append(connection)
        return connection

    async def aclose(self) -> None:
        for connection in self._open:
            await connection.close()
        self._open.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _open_sync(self, spec: ConnectionSpec, ssh_args: SSHArgs) -> fabric.Connection:
        policy = self._policy(spec)
        conn = self._fabric_connection(spec, policy, self._gateway(spec, ssh_args))
        try:
            conn.open()
        except paramiko.BadHostKeyException as exc:
            _discard(conn)
            message = _host_key_message(spec, policy.path, "mismatch")
            raise HostKeyError(spec.name, message) from exc
        except (paramiko.SSHException, OSError, EOFError, ValueError) as exc:
            _discard(conn)
            if policy.refused:
                message = _host_key_message(spec, policy.path, policy.refused)
                raise HostKeyError(spec.name, message) from exc
            raise self._connect_error(spec, exc, conn.user) from exc
        return conn

    def _policy(self, spec: ConnectionSpec) -> _KnownHostsPolicy:
        raw = spec.known_hosts or self.known_hosts or "~/.ssh/known_hosts"
        accept_new = spec.accept_new_host_keys or self.accept_new_host_keys
        return _KnownHostsPolicy(Path(raw).expanduser(), accept_new, self._file_lock)

    def _fabric_connection(
        self, spec: ConnectionSpec, policy: _KnownHostsPolicy, gateway: Any
    ) -> fabric.Connection:
        connect_kwargs: dict[str, Any] = {}
        keys = spec.private_keys or self.default_keys
        if keys:
            connect_kwargs["key_filename"] = [str(Path(key).expanduser()) for key in keys]
        if spec.password:
            connect_kwargs["password"] = spec.password
        conn = fabric.Connection(
            host=spec.address,
            user=spec.user or self.default_user,
            port=spec.port,
            connect_timeout=max(1, math.ceil(spec.connect_timeout)),
            connect_kwargs=connect_kwargs,
            gateway=gateway,
        )
        if policy.path.is_file():
            conn.client.load_host_keys(str(policy.path))
        conn.client.set_missing_host_key_policy(policy)
        return conn

    def _gateway(self, spec: ConnectionSpec, ssh_args: SSHArgs) -> Any:
        """ProxyJump hops as chained Fabric gateway Connections, or a filled-in ProxyCommand."""
        gateway: Any = None
        for hop in (JumpHost.parse(text) for text in ssh_args.proxy_jump):
            hop_spec = ConnectionSpec(
                name=str(hop),
                address=hop.host,
                port=hop.port,
                user=hop.user,
                private_keys=spec.private_keys,
                connect_timeout=spec.connect_timeout,
                known_hosts=spec.known_hosts,
                accept_new_host_keys=spec.accept_new_host_keys,
            )
            gateway = self._fabric_connection(hop_spec, self._policy(hop_spec), gateway)
        if gateway is None and ssh_args.proxy_command:
            return proxy_command(ssh_args.proxy_command, spec, self.default_user)
        return gateway

    @staticmethod
    def _connect_error(
        spec: ConnectionSpec, exc: BaseException, user: str | None
    ) -> UnreachableError:
        template = next(
            (text for types, text in _CONNECT_ERRORS if isinstance(exc, types)),
            "cannot connect to {where}: {reason}",
        )
        message = template.format(
            user=user or "the default user",
            where=f"{spec.address}:{spec.port}",
            address=spec.address,
            timeout=spec.connect_timeout,
            reason=_reason(exc),
        )
        return UnreachableError(spec.name, message)
