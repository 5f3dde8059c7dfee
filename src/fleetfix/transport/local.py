"""The local transport: run commands on the controller with `/bin/sh -c`, one process group each.

At a command's timeout the whole group gets SIGTERM, then SIGKILL after a grace period, so a
hung tool and everything it started are gone and the run gets a timed-out result, not a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping

from fleetfix.errors import UnreachableError
from fleetfix.results import CommandResult
from fleetfix.transport.base import DEFAULT_COMMAND_TIMEOUT, ConnectionSpec

SHELL = "/bin/sh"
DEFAULT_KILL_GRACE = 2.0
REAP_TIMEOUT = 5.0
"""How long to wait for a SIGKILLed command to be reaped (the kernel needs no more)."""
_STDOUT, _STDERR = 1, 2


class _Collector(asyncio.SubprocessProtocol):
    """Keeps a command's output as it arrives (so a timeout still has it); knows when it ended."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.output = {_STDOUT: bytearray(), _STDERR: bytearray()}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.drained: asyncio.Future[None] = loop.create_future()
        self._open_pipes = {_STDOUT, _STDERR}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.output[fd].extend(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open_pipes.discard(fd)
        if not self._open_pipes and not self.drained.done():
            self.drained.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    async def finished(self, timeout: float | None) -> bool:
        """Whether the command exited and closed its output within `timeout` seconds."""
        ends = {self.exited, self.drained}
        _done, pending = await asyncio.wait(ends, timeout=timeout)
        return not pending

    def text(self, fd: int) -> str:
        return self.output[fd].decode("utf-8", errors="replace")


class LocalConnection:
    """Runs commands on this machine; `spec` only names the host in results and errors."""

    def __init__(self, spec: ConnectionSpec, kill_grace: float) -> None:
        self.spec = spec
        self._kill_grace = kill_grace
        self._running: set[asyncio.SubprocessTransport] = set()

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run `command` with `/bin/sh -c`; see Connection.run for the contract."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        transport, collector = await self._spawn(command, env)
        self._running.add(transport)
        finished = False
        try:
            _feed(transport, stdin)
            finished = await collector.finished(timeout)
            if not finished:
                await self._stop(transport, collector)
        finally:
            if not finished:
                # Timed out, or cancelled (Ctrl-C): leave nothing behind, and wait for the
                # kill to be reaped so no unreaped child outlives this call.
                _signal_group(transport, signal.SIGKILL)
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(collector.exited), REAP_TIMEOUT)
            transport.close()
            self._running.discard(transport)
        return CommandResult(
            command=command,
            rc=transport.get_returncode() if finished else None,
            stdout=collector.text(_STDOUT),
            stderr=collector.text(_STDERR),
            duration=loop.time() - started,
            timed_out=not finished,
        )

    async def _spawn(
        self, command: str, env: Mapping[str, str] | None
    ) -> tuple[asyncio.SubprocessTransport, _Collector]:
        loop = asyncio.get_running_loop()
        try:
            return await loop.subprocess_exec(
                lambda: _Collector(loop),
                SHELL,
                "-c",
                command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env={**os.environ, **env} if env else None,
            )
        except OSError as exc:
            message = f"cannot start {SHELL}: {exc.strerror or exc}"
            raise UnreachableError(self.spec.name, message) from exc

    async def _stop(self, transport: asyncio.SubprocessTransport, collector: _Collector) -> None:
        """SIGTERM the group, then SIGKILL; a process that left the group may keep our pipes."""
        for signal_number in (signal.SIGTERM, signal.SIGKILL):
            _signal_group(transport, signal_number)
            if await collector.finished(self._kill_grace):
                return

    async def close(self) -> None:
        """Kill whatever this connection still runs."""
        for transport in list(self._running):
            _signal_group(transport, signal.SIGKILL)


def _feed(transport: asyncio.SubprocessTransport, stdin: str | None) -> None:
    """Write `stdin` and close the pipe; a command that never reads it is no error."""
    pipe = transport.get_pipe_transport(0)
    if not isinstance(pipe, asyncio.WriteTransport):
        return
    if stdin:
        pipe.write(stdin.encode("utf-8"))
    pipe.close()


def _signal_group(transport: asyncio.SubprocessTransport, signal_number: int) -> None:
    # The group id is the shell's pid (start_new_session); it outlives the shell while any
    # member is alive, and the kernel does not hand out a pid still used as a group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(transport.get_pid(), signal_number)


class LocalTransport:
    """Hands out LocalConnections; `kill_grace` is the SIGTERM-to-SIGKILL wait at a timeout."""

    name = "local"

    def __init__(self, kill_grace: float = DEFAULT_KILL_GRACE) -> None:
        self.kill_grace = kill_grace
        self._open: list[LocalConnection] = []

    async def connect(self, spec: ConnectionSpec) -> LocalConnection:
        connection = LocalConnection(spec, self.kill_grace)
        self._open.append(connection)
        return connection

    async def aclose(self) -> None:
        for connection in self._open:
            await connection.close()
        self._open.clear()
