"""An asyncssh server on 127.0.0.1 that runs each command in a real `/bin/sh -c` subprocess.

    async with AsyncSSHServer() as server:
        spec = spec_for(server)          # tests.support: port, user, key, known_hosts

Key authentication only (a generated client key, for `server.user` only); a generated host key;
`direct-tcpip` forwarding to loopback addresses, so it can serve as a ProxyJump hop. Each
command's process group is killed when its channel closes or the client sends a signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import signal
import tempfile
from pathlib import Path
from types import TracebackType

import asyncssh

from tests.support.keys import (
    ServerKeys,
    generate_keypair,
    known_hosts_line,
    write_known_hosts,
)

LOOPBACK_PREFIXES = ("127.", "localhost", "::1")
_READ_SIZE = 65536
_REAP_TIMEOUT = 10.0


class AsyncSSHServer(ServerKeys):
    """The server as an async context manager; see the module docstring."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        host: str = "127.0.0.1",
        user: str | None = None,
        host_key_algorithm: str = "ssh-ed25519",
        encryption_algs: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self._encryption_algs = encryption_algs
        """The ciphers offered (asyncssh's defaults when empty)."""
        self.host = host
        self.user = user or getpass.getuser()
        self._directory = directory
        self._owns_directory = directory is None
        self._host_key_algorithm = host_key_algorithm
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._sessions: set[_ShellSession] = set()
        self._commands_running: set[asyncio.Task[None]] = set()
        self.forwarded: list[tuple[str, int]] = []
        """Every direct-tcpip (ProxyJump) destination this server forwarded to."""
        self.commands: list[str] = []
        """Every command a client ran, in arrival order."""
        self.connections_total = 0
        """Connections accepted so far."""
        self.peak_handshakes = 0
        """The most connections that were ever open but not yet authenticated at once."""
        self._handshaking = 0

    async def __aenter__(self) -> AsyncSSHServer:
        self.workdir = self._directory or Path(tempfile.mkdtemp(prefix="fleetfix-asyncssh-"))
        try:
            await self._start()
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._stop()

    async def _start(self) -> None:
        self.host_key = generate_keypair(self.workdir, "host_key", self._host_key_algorithm)
        self.client_key = generate_keypair(self.workdir, "client_key")
        self.authorized_keys_path.write_text(self.client_key.public_line + "\n", encoding="ascii")
        self._acceptor = await asyncssh.listen(
            self.host,
            0,
            server_factory=lambda: _Server(self),
            server_host_keys=[str(self.host_key_path)],
            encoding=None,
            allow_pty=False,
            agent_forwarding=False,
            x11_forwarding=False,
            **({"encryption_algs": list(self._encryption_algs)} if self._encryption_algs else {}),
        )
        self.port = self._acceptor.get_port()
        self.known_hosts_path = write_known_hosts(
            self.workdir / "known_hosts",
            [known_hosts_line(self.host, self.port, self.host_key.public_line)],
        )

    def authorize(self, public_line: str) -> None:
        """Also accept the client key whose OpenSSH public line this is."""
        with self.authorized_keys_path.open("a", encoding="ascii") as keys:
            keys.write(public_line.strip() + "\n")

    def drop_connections(self) -> None:
        """Close every client connection from the server side (a host going away)."""
        for conn in list(self._connections):
            conn.close()

    async def _stop(self) -> None:
        for session in list(self._sessions):
            session.kill(signal.SIGKILL)
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None
        connections = list(self._connections)
        self.drop_connections()
        for conn in connections:
            await conn.wait_closed()
        # A dropped connection's command is killed but still being reaped: wait for it, so its
        # subprocess transport is closed inside this event loop and not collected after it.
        if self._commands_running:
            await asyncio.wait(self._commands_running, timeout=_REAP_TIMEOUT)
        if self._owns_directory and self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _track(self, conn: asyncssh.SSHServerConnection, alive: bool) -> None:
        if alive:
            self._connections.add(conn)
            self.connections_total += 1
        else:
            self._connections.discard(conn)

    def _handshake(self, delta: int) -> None:
        self._handshaking += delta
        self.peak_handshakes = max(self.peak_handshakes, self._handshaking)

    def _session(self) -> _ShellSession:
        return _ShellSession(self)

    def _command_started(self, task: asyncio.Task[None]) -> None:
        self._commands_running.add(task)
        task.add_done_callback(self._commands_running.discard)


class _Server(asyncssh.SSHServer):
    """Per-connection policy: key auth for the one user, forwarding to loopback only."""

    def __init__(self, owner: AsyncSSHServer) -> None:
        self._owner = owner
        self._conn: asyncssh.SSHServerConnection | None = None
        self._authenticated = False

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._owner._track(conn, alive=True)
        self._owner._handshake(+1)

    def auth_completed(self) -> None:
        self._authenticated = True
        self._owner._handshake(-1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._owner._track(self._conn, alive=False)
        if not self._authenticated:
            self._owner._handshake(-1)

    def begin_auth(self, username: str) -> bool:
        if self._conn is not None and username == self._owner.user:
            self._conn.set_authorized_keys(str(self._owner.authorized_keys_path))
        # True even for other users: they get no keys, so every method fails as sshd's would.
        return True

    def password_auth_supported(self) -> bool:
        return False

    def session_requested(self) -> _ShellSession:
        return self._owner._session()

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool:
        if not dest_host.startswith(LOOPBACK_PREFIXES):
            return False
        self._owner.forwarded.append((dest_host, dest_port))
        return True


class _ShellSession(asyncssh.SSHServerSession[bytes]):
    """One channel: a `/bin/sh -c` subprocess in its own process group, its pipes relayed."""

    def __init__(self, owner: AsyncSSHServer) -> None:
        self._owner = owner
        self._chan: asyncssh.SSHServerChannel[bytes] | None = None
        self._command: str | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._stdin: list[bytes] = []
        self._stdin_eof = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._early_signals: list[signal.Signals] = []

    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self._chan = chan
        self._owner._sessions.add(self)

    def shell_requested(self) -> bool:
        return True

    def exec_requested(self, command: str) -> bool:
        self._command = command
        self._owner.commands.append(command)
        return True

    def session_started(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._owner._command_started(self._task)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if self._process is None:
            self._stdin.append(data)
        else:
            self._feed(data)

    def eof_received(self) -> bool:
        self._stdin_eof = True
        if self._process is not None:
            self._close_stdin()
        return True  # half-close: the command's output still flows back

    def signal_received(self, signal_name: str) -> None:
        number = getattr(signal, f"SIG{signal_name}", None)
        if not isinstance(number, signal.Signals):
            return
        if self._process is None:
            self._early_signals.append(number)
        else:
            self.kill(number)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.kill(signal.SIGKILL)
        self._writable.set()
        self._owner._sessions.discard(self)

    def kill(self, signal_number: signal.Signals) -> None:
        """Signal the command's whole process group while its leader is not yet reaped."""
        process = self._process
        # After reaping, the group id could in theory be reused by an unrelated process.
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal_number)

    async def _run(self) -> None:
        argv = ["/bin/sh", "-c", self._command] if self._command is not None else ["/bin/sh"]
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                cwd=Path.home(),
            )
        except OSError as exc:
            self._write(f"cannot run /bin/sh: {exc}\n".encode(), asyncssh.EXTENDED_DATA_STDERR)
            self._exit(127)
            return
        self._process = process
        # Signals, or the channel closing, may arrive while the shell is being started.
        for number in self._early_signals:
            self.kill(number)
        if self._closed:
            self.kill(signal.SIGKILL)
        for chunk in self._stdin:
            self._feed(chunk)
        if self._stdin_eof:
            self._close_stdin()
        assert process.stdout is not None and process.stderr is not None
        await asyncio.gather(
            self._relay(process.stdout, None),
            self._relay(process.stderr, asyncssh.EXTENDED_DATA_STDERR),
        )
        self._exit(await process.wait())

    def _feed(self, data: bytes) -> None:
        stdin = self._process.stdin if self._process else None
        if stdin is not None and not stdin.is_closing():
            stdin.write(data)

    def _close_stdin(self) -> None:
        stdin = self._process.stdin if self._process else None
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    async def _relay(self, stream: asyncio.StreamReader, datatype: asyncssh.DataType) -> None:
        while chunk := await stream.read(_READ_SIZE):
            await self._writable.wait()
            self._write(chunk, datatype)

    def _write(self, data: bytes, datatype: asyncssh.DataType) -> None:
        # A client that already closed the channel just loses the rest of the output.
        with contextlib.suppress(OSError):
            if self._chan is not None:
                self._chan.write(data, datatype)

    def _exit(self, returncode: int) -> None:
        if self._chan is None:
            return
        with contextlib.suppress(OSError):
            if returncode < 0:
                self._chan.exit_with_signal(signal.Signals(-returncode).name.removeprefix("SIG"))
            else:
                self._chan.exit(returncode)
