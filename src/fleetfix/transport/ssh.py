"""The asyncssh transport: one reused SSH connection per host, commands killed at their timeout.

Handshakes are limited by their own semaphore (sshd MaxStartups and bastions drop bursts of
unauthenticated connections), separately from command concurrency, which the engine limits.
Host keys are checked against known_hosts; ProxyJump hops are shared by every host behind them.

AES-GCM is preferred over chacha20-poly1305 (asyncssh builds a chacha20 context per packet) and
UMAC over HMAC for the non-AEAD ciphers; a server offering neither still gets asyncssh's list.
No keepalives by default: a held connection costs nothing while idle, and a dead one is found
when it is next used (the session request gets no answer or the link is already closed; see
docs/benchmarks.md, "SSH: ciphers, keepalives, connection policy, handshakes and forks").
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import asyncssh
from asyncssh.encryption import get_default_encryption_algs, get_encryption_algs
from asyncssh.mac import get_default_mac_algs, get_mac_algs
from asyncssh.public_key import get_default_public_key_algs

from fleetfix.errors import HostKeyError, UnreachableError
from fleetfix.results import CommandResult
from fleetfix.transport.base import DEFAULT_COMMAND_TIMEOUT, ConnectionSpec
from fleetfix.transport.known_hosts import LazyKnownHosts
from fleetfix.transport.pool import ConnectionLostError, StaleConnectionError
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

DEFAULT_MAX_HANDSHAKES = 16
"""Handshakes in flight; see docs/benchmarks.md for the measurements behind it."""
DEFAULT_MAX_SESSIONS = 8
"""Concurrent channels per connection: OpenSSH's default MaxSessions is 10, and sshd frees a
slot a moment after a channel closes, so running right at 10 gets refusals."""

GLOBAL_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
# OpenSSH answers "no more sessions" with OPEN_CONNECT_FAILED; others use the other two codes.
_NO_SLOT = frozenset(
    {
        asyncssh.OPEN_CONNECT_FAILED,
        asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
        asyncssh.OPEN_RESOURCE_SHORTAGE,
    }
)
KILL_TIMEOUT = 5.0
"""Seconds allowed for the second-channel kill of an abandoned command."""
_HANDSHAKE_RETRY_DELAYS = (0.25, 0.5, 1.0)
# sshd's MaxStartups drops surplus unauthenticated connections by resetting them.
_DROPPED = (asyncssh.ConnectionLost, ConnectionResetError, BrokenPipeError)
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
"""Tried before asyncssh's defaults (chacha20 first): AES-NI makes GCM ~5x cheaper per packet."""
PREFERRED_MACS = ("umac-64-etm@openssh.com", "umac-128-etm@openssh.com")
"""For non-AEAD ciphers (aes*-ctr): UMAC is ~2x cheaper than HMAC-SHA2 per packet."""


class _KnownHostsFile:
    """One known_hosts file (plus the system-wide one), read once per transport; a host's own
    lines are parsed when it is first matched (LazyKnownHosts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._hosts = LazyKnownHosts()
        for source in (path, GLOBAL_KNOWN_HOSTS):
            if source.is_file():
                self._hosts.load_lazily(source.read_text(encoding="utf-8", errors="replace"))

    def trusted(self, host: str, addr: str, port: int | None) -> tuple[set[asyncssh.SSHKey], bool]:
        """The keys trusted for this host, and whether the file knows the host at all."""
        match = self._hosts.match(host, addr, _nondefault(port))
        keys, ca_keys, x509_certs, x509_subjects = match[0], match[1], match[3], match[5]
        return set(keys), bool(keys or ca_keys or x509_certs or x509_subjects)

    def add(self, host: str, port: int | None, key: asyncssh.SSHKey) -> None:
        """Append `key` for `host` (as OpenSSH writes it) and trust it from now on."""
        pattern = host if _nondefault(port) is None else f"[{host}]:{port}"
        algorithm, data = key.export_public_key("openssh").decode("ascii").split()[:2]
        line = f"{pattern} {algorithm} {data}\n"
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(line)
        self._hosts.load(line)

    @property
    def hosts(self) -> asyncssh.SSHKnownHosts:
        return self._hosts


def _nondefault(port: int | None) -> int | None:
    return port if port and port != 22 else None


class _HostKeyCheck:
    """Decides one connection's host key and remembers why it refused one."""

    def __init__(self, known: _KnownHostsFile, accept_new: bool) -> None:
        self.known = known
        self.accept_new = accept_new
        self.refusal: str | None = None

    def validate(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        trusted, known = self.known.trusted(host, addr, port)
        if key in trusted:
            # Another connection to the same address recorded this key after ours started.
            return True
        if known:
            self.refusal = "mismatch"
            return False
        if not self.accept_new:
            self.refusal = "unknown"
            return False
        try:
            self.known.add(host, port, key)
        except OSError as exc:
            self.refusal = f"could not be recorded: {exc.strerror or exc}"
            return False
        return True

    def explain(self, exc: BaseException, spec: ConnectionSpec) -> bool:
        """Whether a failed connect was about the host key; sets `refusal` if asyncssh decided."""
        if self.refusal is not None:
            return True
        if isinstance(exc, asyncssh.HostKeyNotVerifiable):
            self.refusal = f"was refused: {_reason(exc)}"
            return True
        # asyncssh offers only the key types known_hosts lists for a host, so a host whose key
        # type changed fails key exchange before we are asked: that is a mismatch too.
        kex_refused = isinstance(exc, asyncssh.KeyExchangeFailed) and "host key" in str(exc).lower()
        if kex_refused and self.known.trusted(spec.address, spec.address, spec.port)[1]:
            self.refusal = "mismatch"
            return True
        return False

    def message(self, spec: ConnectionSpec) -> str:
        where = f"{spec.name} ({spec.address}:{spec.port})"
        path = self.known.path
        if self.refusal == "unknown":
            return (
                f"host key for {where} is not in known_hosts ({path}); "
                "to trust a new host use --accept-new-host-keys"
            )
        if self.refusal == "mismatch":
            target = spec.address if spec.port == 22 else f"[{spec.address}]:{spec.port}"
            return (
                f"host key for {where} does not match known_hosts ({path}): the host was "
                f"reinstalled or someone is in the middle; if it was reinstalled, run "
                f"`ssh-keygen -R '{target}' -f {path}` (--accept-new-host-keys only trusts "
                "hosts not yet known)"
            )
        return f"host key for {where} {self.refusal}"


class _LinkState:
    """Why a connection closed, as told by asyncssh's connection_lost callback."""

    def __init__(self) -> None:
        self.lost_reason: str | None = None

    def lost(self, exc: Exception | None) -> None:
        self.lost_reason = _reason(exc) if exc else "closed"


class _Client(asyncssh.SSHClient):
    def __init__(self, check: _HostKeyCheck, link: _LinkState) -> None:
        self._check = check
        self._link = link

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        return self._check.validate(host, addr, port, key)

    def connection_lost(self, exc: Exception | None) -> None:
        self._link.lost(exc)


def _reason(exc: BaseException) -> str:
    """A one-line reason from an asyncssh or OS exception."""
    if isinstance(exc, asyncssh.DisconnectError | asyncssh.ChannelOpenError):
        return exc.reason or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_ConnectErrorRule = tuple[type[BaseException] | tuple[type[BaseException], ...], str]
_CONNECT_ERRORS: tuple[_ConnectErrorRule, ...] = (
    (asyncssh.PermissionDenied, "authentication failed as {user} at {where} ({reason})"),
    (ConnectionRefusedError, "connection refused by {where}"),
    (socket.gaierror, "cannot resolve {address}: {reason}"),
    (TimeoutError, "connection to {where} timed out after {timeout:g}s"),
    ((asyncssh.KeyImportError, asyncssh.KeyEncryptionError), "cannot load a private key: {reason}"),
    (asyncssh.ChannelOpenError, "cannot open a tunnel to {where}: {reason}"),
    (asyncssh.DisconnectError, "{where} closed the connection: {reason}"),
    (OSError, "cannot connect to {where}: {reason}"),
)


def connect_error(spec: ConnectionSpec, exc: BaseException, user: str | None) -> UnreachableError:
    """The UnreachableError for a failed connect, with a one-line reason."""
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


class SSHConnection:
    """An open asyncssh connection to one host; commands share it, each on its own channel."""

    def __init__(
        self,
        spec: ConnectionSpec,
        conn: asyncssh.SSHClientConnection,
        link: _LinkState,
        max_sessions: int,
        on_close: Callable[[SSHConnection], None],
    ) -> None:
        self.spec = spec
        self._conn = conn
        self._link = link
        self._sessions = asyncio.Semaphore(max_sessions)
        self._on_close = on_close

    @property
    def closed(self) -> bool:
        """Whether the link is known to be gone (asyncssh saw it close); free to ask."""
        return self._conn.is_closed()

    @property
    def fds(self) -> int:
        """File descriptors this connection holds: a socket, or a proxy command's pipes."""
        return 3 if self._conn.get_extra_info("proxy_command") else 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """asyncssh's extra info for this connection (send_cipher, send_mac, ...)."""
        return self._conn.get_extra_info(name, default)

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
        async with self._sessions:
            started = asyncio.get_running_loop().time()
            remote = _RemoteProcess(await self._open(wire))
            try:
                return await self._wait(remote, command, timeout, started, stdin)
            except asyncio.CancelledError:
                # Ctrl-C: kill the command rather than leave it to its remote timeout. Best
                # effort: the run closes every connection as it stops, maybe under this kill's
                # new channel, and asyncssh then fails in ways of its own (AttributeError,
                # AssertionError); none of them may replace the cancellation.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._kill(remote))
                raise

    async def _open(self, wire: str) -> asyncssh.SSHClientProcess[str]:
        """A session running `wire`. Raises StaleConnectionError when the link was already gone
        (nothing of this command was sent), ConnectionLostError when it drops under the command
        or the session request gets no answer within connect_timeout (a silently dead link:
        without keepalives this is how one shows), UnreachableError when the host refuses a
        session on a link that stays up."""
        for delay in (*CHANNEL_RETRY_DELAYS, None):
            if self._conn.is_closed():
                raise self._stale()
            try:
                async with asyncio.timeout(self.spec.connect_timeout):
                    return await self._conn.create_process(wire, encoding="utf-8", errors="replace")
            except TimeoutError as exc:
                self._conn.abort()
                silence = f"no answer to a session request in {self.spec.connect_timeout:g}s"
                raise ConnectionLostError(self.spec.name, f"connection lost: {silence}") from exc
            except asyncssh.ChannelOpenError as exc:
                # sshd frees a MaxSessions slot a moment after the channel closes, and
                # servers may allow fewer sessions than we do: wait for a slot, briefly.
                if delay is None or exc.code not in _NO_SLOT or self._conn.is_closed():
                    raise self._lost(exc) from exc
            except (asyncssh.Error, OSError) as exc:
                raise self._lost(exc) from exc
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _wait(
        self,
        remote: _RemoteProcess,
        command: str,
        timeout: float | None,
        started: float,
        stdin: str | None,
    ) -> CommandResult:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else timeout + CLIENT_GRACE
        try:
            remote.send_input(stdin)
            async with asyncio.timeout(deadline):
                stdout, stderr = await remote.communicate()
        except TimeoutError:
            await self._kill(remote)
            stdout, stderr = remote.partial_output()
            return CommandResult(command, None, stdout, stderr, loop.time() - started, True)
        except (asyncssh.Error, OSError) as exc:
            raise self._lost(exc) from exc
        elapsed = loop.time() - started
        rc = remote.process.returncode
        if rc is None:
            raise self._lost(None)
        if killed_by_timeout(rc, elapsed, timeout):
            return CommandResult(command, None, stdout, stderr, elapsed, True)
        return CommandResult(command, rc, stdout, stderr, elapsed)

    async def _kill(self, remote: _RemoteProcess) -> None:
        """Kill a command we stop waiting for: by channel signal, and by PID on a new channel."""
        remote.abandon()
        if remote.pid is None or self._conn.is_closed():
            return
        with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
            async with asyncio.timeout(KILL_TIMEOUT):
                await self._conn.run(kill_command(remote.pid), check=False)

    def _lost(self, exc: BaseException | None) -> UnreachableError:
        """The error for a command the connection could not carry: ConnectionLostError when the
        link (or the command's channel) went away under it, UnreachableError when the host
        refused a session on a link that stays up."""
        if self._conn.is_closed() or exc is None or self._link.lost_reason:
            reason = self._link.lost_reason or (_reason(exc) if exc else "channel closed")
            return ConnectionLostError(self.spec.name, f"connection lost: {reason}")
        return UnreachableError(self.spec.name, f"cannot open a session: {_reason(exc)}")

    def _stale(self) -> StaleConnectionError:
        """The error for a link found closed before this command sent anything."""
        reason = self._link.lost_reason or "closed"
        return StaleConnectionError(self.spec.name, f"connection lost: {reason}")

    async def close(self) -> None:
        self._on_close(self)
        self._conn.close()
        await self._conn.wait_closed()


class _RemoteProcess:
    """One remote command: its channel, the PID it announced, stderr read before that line."""

    def __init__(self, process: asyncssh.SSHClientProcess[str]) -> None:
        self.process = process
        self.pid: int | None = None
        self._stderr_head = ""

    def send_input(self, stdin: str | None) -> None:
        if stdin:
            self.process.stdin.write(stdin)
        self.process.stdin.write_eof()

    async def communicate(self) -> tuple[str, str]:
        await self._read_pid()
        stdout, stderr = await self.process.communicate()
        return stdout, self._stderr_head + stderr

    async def _read_pid(self) -> None:
        # Shell start-up files may print to stderr before the PID line; keep what they say.
        while line := await self.process.stderr.readline():
            pid, rest = split_pid_line(line)
            if pid is not None:
                self.pid = pid
                return
            self._stderr_head += rest

    def partial_output(self) -> tuple[str, str]:
        stdout, stderr = self.process.collect_output()
        if self.pid is None:
            self.pid, stderr = split_pid_line(stderr)
        return stdout, self._stderr_head + stderr

    def abandon(self) -> None:
        """Signal the command (OpenSSH honours it for non-root users), then drop its channel."""
        with contextlib.suppress(asyncssh.Error, OSError):
            self.process.send_signal("KILL")
        self.process.close()


class SSHTransport:
    """Opens asyncssh connections; holds the handshake limit, known_hosts and shared jump hosts.

    Args:
        max_handshakes: SSH handshakes (connect through authentication) in flight at once.
        keepalive_interval: seconds without traffic before a keepalive (3 unanswered ones drop
            the connection); 0, the default, sends none: a dead link is found at its next use.
        accept_new_host_keys: trust and record unknown host keys (changed ones stay refused).
        known_hosts: known_hosts file used when a spec names none (default ~/.ssh/known_hosts).
        default_user: user for specs that name none (else ~/.ssh/config, else the local user).
        default_keys: private key files for specs that name none (else config, agent, ~/.ssh).
        max_sessions: concurrent commands per connection (below sshd's MaxSessions).
    """

    name = "ssh"

    def __init__(
        self,
        max_handshakes: int = DEFAULT_MAX_HANDSHAKES,
        *,
        keepalive_interval: float = 0,
        accept_new_host_keys: bool = False,
        known_hosts: str | None = None,
        default_user: str | None = None,
        default_keys: tuple[str, ...] = (),
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        self.max_handshakes = max_handshakes
        self.keepalive_interval = keepalive_interval
        self.accept_new_host_keys = accept_new_host_keys
        self.known_hosts = known_hosts
        self.default_user = default_user
        self.default_keys = default_keys
        self.max_sessions = max_sessions
        self._handshakes = asyncio.Semaphore(max_handshakes)
        self._known: dict[Path, _KnownHostsFile] = {}
        self._keypairs: dict[tuple[str, ...], list[asyncssh.SSHKeyPair]] = {}
        self._jumps: dict[tuple[object, ...], asyncio.Task[asyncssh.SSHClientConnection]] = {}
        self._open: set[SSHConnection] = set()

    async def connect(self, spec: ConnectionSpec) -> SSHConnection:
        """Open a connection to `spec`; raises UnreachableError or HostKeyError."""
        ssh_args = self._ssh_args(spec)
        route: dict[str, Any] = {}
        if ssh_args.proxy_jump:
            route["tunnel"] = await self._tunnel(spec, ssh_args)
        elif ssh_args.proxy_command:
            route["proxy_command"] = proxy_command(ssh_args.proxy_command, spec, self.default_user)
        link = _LinkState()
        conn = await self._handshake(spec, link, spec.user or self.default_user, route)
        connection = SSHConnection(spec, conn, link, self.max_sessions, self._open.discard)
        self._open.add(connection)
        return connection

    async def aclose(self) -> None:
        """Close every connection, then the jump hosts they went through."""
        for connection in list(self._open):
            await connection.close()
        jumps = list(self._jumps.values())
        self._jumps.clear()
        pending = [task for task in jumps if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in jumps:
            if not task.cancelled() and task.exception() is None:
                task.result().close()
                await task.result().wait_closed()

    def _ssh_args(self, spec: ConnectionSpec) -> SSHArgs:
        try:
            return parse_ssh_args(spec.ssh_common_args)
        except ValueError as exc:
            raise UnreachableError(spec.name, f"cannot read ssh args: {exc}") from exc

    def _known_hosts(self, spec: ConnectionSpec) -> _KnownHostsFile:
        raw = spec.known_hosts or self.known_hosts or "~/.ssh/known_hosts"
        path = Path(raw).expanduser()
        if path not in self._known:
            try:
                self._known[path] = _KnownHostsFile(path)
            except (OSError, ValueError) as exc:
                raise UnreachableError(spec.name, f"cannot read {path}: {_reason(exc)}") from exc
        return self._known[path]

    async def _handshake(
        self, spec: ConnectionSpec, link: _LinkState, user: str | None, route: dict[str, Any]
    ) -> asyncssh.SSHClientConnection:
        """Connect and authenticate to `spec` with its credentials and the host key policy."""
        check = _HostKeyCheck(
            self._known_hosts(spec), spec.accept_new_host_keys or self.accept_new_host_keys
        )
        options = self._options(spec, check, link, user) | route
        async with self._handshakes:
            for delay in _HANDSHAKE_RETRY_DELAYS:
                with contextlib.suppress(_Dropped):
                    return await self._connect_once(spec, options, check, user, retry=True)
                await asyncio.sleep(delay)
            return await self._connect_once(spec, options, check, user, retry=False)

    async def _connect_once(
        self,
        spec: ConnectionSpec,
        options: dict[str, Any],
        check: _HostKeyCheck,
        user: str | None,
        *,
        retry: bool,
    ) -> asyncssh.SSHClientConnection:
        try:
            return await asyncssh.connect(spec.address, spec.port, **options)
        except _DROPPED as exc:
            if retry and check.refusal is None:
                raise _Dropped from exc
            raise connect_error(spec, exc, user) from exc
        except (asyncssh.Error, OSError, ValueError) as exc:
            if check.explain(exc, spec):
                raise HostKeyError(spec.name, check.message(spec)) from exc
            raise connect_error(spec, exc, user) from exc

    def _options(
        self, spec: ConnectionSpec, check: _HostKeyCheck, link: _LinkState, user: str | None
    ) -> dict[str, Any]:
        options: dict[str, Any] = {
            "known_hosts": check.known.hosts,
            "client_factory": lambda: _Client(check, link),
            "connect_timeout": spec.connect_timeout,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": 3,
            "encryption_algs": preferred_algs(PREFERRED_CIPHERS, _CIPHERS),
            "mac_algs": preferred_algs(PREFERRED_MACS, _MACS),
        }
        if user:
            options["username"] = user
        keys = self._client_keys(spec)
        if keys is not None:
            options["client_keys"] = keys
        if spec.password:
            options["password"] = spec.password
        trusted, _known = check.known.trusted(spec.address, spec.address, spec.port)
        if trusted:
            options["server_host_key_algs"] = preferred_host_key_algs(trusted)
        return options

    def _client_keys(self, spec: ConnectionSpec) -> list[asyncssh.SSHKeyPair] | None:
        """The spec's key files, loaded once per transport (not once per host)."""
        paths = tuple(str(Path(key).expanduser()) for key in spec.private_keys or self.default_keys)
        if not paths:
            return None  # asyncssh's defaults: ~/.ssh/config IdentityFile, agent, ~/.ssh/id_*
        if paths not in self._keypairs:
            try:
                self._keypairs[paths] = list(asyncssh.load_keypairs(list(paths)))
            except (OSError, ValueError) as exc:
                message = f"cannot load a private key: {_reason(exc)}"
                raise UnreachableError(spec.name, message) from exc
        return self._keypairs[paths]

    async def _tunnel(
        self, spec: ConnectionSpec, ssh_args: SSHArgs
    ) -> asyncssh.SSHClientConnection:
        """The connection to the last ProxyJump hop, shared by every host behind the same hops."""
        try:
            hops = tuple(JumpHost.parse(hop) for hop in ssh_args.proxy_jump)
        except ValueError as exc:
            raise UnreachableError(spec.name, str(exc)) from exc
        try:
            return await self._jump(spec, hops)
        except UnreachableError as exc:
            raise type(exc)(spec.name, f"via jump host {exc.host}: {exc.message}") from exc

    async def _jump(
        self, spec: ConnectionSpec, hops: tuple[JumpHost, ...]
    ) -> asyncssh.SSHClientConnection:
        key = (hops, spec.known_hosts, spec.private_keys, spec.accept_new_host_keys)
        task = self._jumps.get(key)
        if task is None or _jump_unusable(task):
            task = asyncio.ensure_future(self._open_jump(spec, hops))
            self._jumps[key] = task
        # shield: one host giving up must not cancel the hop other hosts are waiting for.
        return await asyncio.shield(task)

    async def _open_jump(
        self, spec: ConnectionSpec, hops: tuple[JumpHost, ...]
    ) -> asyncssh.SSHClientConnection:
        route: dict[str, Any] = {}
        if len(hops) > 1:
            route["tunnel"] = await self._jump(spec, hops[:-1])
        hop = hops[-1]
        return await self._handshake(_hop_spec(spec, hop), _LinkState(), hop.user, route)


class _Dropped(Exception):
    """The server dropped a connection before the handshake finished; worth another try."""


def preferred_host_key_algs(trusted: set[asyncssh.SSHKey]) -> list[str]:
    """Host key algorithms, the types known_hosts holds for the host first.

    asyncssh would offer only the known types, so a host whose key type changed fails key
    exchange (OpenSSH even resets the connection) instead of being reported as a changed key.
    """
    known = [algorithm for key in trusted for algorithm in key.sig_algorithms]
    ordered = dict.fromkeys([*known, *get_default_public_key_algs()])
    return [algorithm.decode("ascii") for algorithm in ordered]


def preferred_algs(preferred: tuple[str, ...], algorithms: _Algorithms) -> list[str]:
    """`preferred` (those this asyncssh supports) first, then asyncssh's defaults."""
    available, defaults = algorithms
    wanted = [name.encode("ascii") for name in preferred]
    ordered = dict.fromkeys([*(a for a in wanted if a in available), *defaults])
    return [algorithm.decode("ascii") for algorithm in ordered]


_Algorithms = tuple[list[bytes], list[bytes]]
_CIPHERS: _Algorithms = (get_encryption_algs(), get_default_encryption_algs())
_MACS: _Algorithms = (get_mac_algs(), get_default_mac_algs())


def _hop_spec(spec: ConnectionSpec, hop: JumpHost) -> ConnectionSpec:
    """`spec`'s credentials and host key policy aimed at a jump host, named after it."""
    return ConnectionSpec(
        name=str(hop),
        address=hop.host,
        port=hop.port,
        private_keys=spec.private_keys,
        connect_timeout=spec.connect_timeout,
        known_hosts=spec.known_hosts,
        accept_new_host_keys=spec.accept_new_host_keys,
    )


def _jump_unusable(task: asyncio.Task[asyncssh.SSHClientConnection]) -> bool:
    """A finished jump attempt that failed, or whose connection has since closed."""
    if not task.done():
        return False
    if task.cancelled() or task.exception() is not None:
        return True
    return task.result().is_closed()
