"""The SSH side of the lab: one asyncssh listener per node address, one real shell per exec.

The node is identified by the local address the client connected to. Key authentication only
(the lab's client key, any user name). Each exec request starts the node's sandboxed bash
in its own session; when the channel closes early (client timeout) or a signal request
arrives, every process of that session is signalled, so a hung tool never outlives its caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import asyncssh

from fleetfix.lab.processes import session_pids
from fleetfix.lab.sandbox import (
    SETUP_FAILED,
    Launch,
    launch_data,
    launch_from_data,
    sandbox_setup,
)

LOG = logging.getLogger("fleetfix.lab.ssh")
_READ_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class CommandPlan:
    """What the lab's state says about one exec request, decided when it arrives.

    `abort`: the node is no longer up (drop the connection); `flaky_limit`: drop the connection
    at this many commands on it; `delay`: seconds before the command starts; `launch`: how to
    start it (argv, the whole extra env, the sandbox), or its refusal (exit 126)."""

    launch: Launch = field(default_factory=lambda: Launch((), {}))
    flaky_limit: int | None = None
    delay: float = 0.0
    abort: bool = False

    def to_data(self) -> dict[str, Any]:
        return {
            "launch": launch_data(self.launch),
            "flaky_limit": self.flaky_limit,
            "delay": self.delay,
            "abort": self.abort,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> CommandPlan:
        return cls(
            launch=launch_from_data(data.get("launch") or {}),
            flaky_limit=data.get("flaky_limit"),
            delay=float(data.get("delay", 0.0)),
            abort=bool(data.get("abort", False)),
        )


class SessionHost(Protocol):
    """What SSH connections need from the process that serves them."""

    client_key: asyncssh.SSHKey

    def node_at(self, address: str) -> str | None:
        """The name of the node listening on `address`, or None."""
        ...

    async def plan(self, node: str, command: str, user: str) -> CommandPlan:
        """Count the exec request (scenario events fire on these counts) and say how to run it."""
        ...

    def track_connection(
        self, node: str, conn: asyncssh.SSHServerConnection, add: bool
    ) -> None: ...

    def track_session(self, node: str, session: NodeSession, add: bool) -> None: ...


class NodeServer(asyncssh.SSHServer):
    """One SSH connection to one node."""

    def __init__(self, host: SessionHost) -> None:
        self._host = host
        self._node: str | None = None
        self._conn: asyncssh.SSHServerConnection | None = None
        self.commands = 0

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        sockname = conn.get_extra_info("sockname")
        self._node = self._host.node_at(str(sockname[0])) if sockname else None
        if self._node is None:
            conn.abort()
            return
        self._host.track_connection(self._node, conn, add=True)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._node is not None and self._conn is not None:
            self._host.track_connection(self._node, self._conn, add=False)

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return key.public_data == self._host.client_key.public_data

    def session_requested(self) -> asyncssh.SSHServerSession[bytes] | bool:
        if self._node is None or self._conn is None:
            return False
        return NodeSession(self._host, self._node, self)


class NodeSession(asyncssh.SSHServerSession[bytes]):
    """One exec request: a real bash on the node, output streamed back, exit status reported."""

    def __init__(self, host: SessionHost, node: str, server: NodeServer) -> None:
        self._host = host
        self._node = node
        self._server = server
        self._chan: asyncssh.SSHServerChannel[bytes] | None = None
        self._command: str | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._pending_input: list[bytes] = []
        self._input_closed = False
        self._task: asyncio.Task[None] | None = None
        self._finished = False

    def connection_made(self, chan: Any) -> None:
        assert isinstance(chan, asyncssh.SSHServerChannel)
        self._chan = chan

    def pty_requested(
        self, term_type: str, term_size: tuple[int, int, int, int], term_modes: Mapping[int, int]
    ) -> bool:
        return True  # accepted (ansible -m raw asks for one) but output stays plain pipes

    def shell_requested(self) -> bool:
        return False

    def subsystem_requested(self, subsystem: str) -> bool:
        return False

    def exec_requested(self, command: str) -> bool:
        self._command = command
        return True

    def session_started(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        process = self._process
        if process is None or process.stdin is None:
            self._pending_input.append(data)
        else:
            process.stdin.write(data)

    def eof_received(self) -> bool:
        self._input_closed = True
        process = self._process
        if process is not None and process.stdin is not None:
            process.stdin.close()
        return True

    def signal_received(self, signal_name: str) -> None:
        number = getattr(signal, f"SIG{signal_name}", signal.SIGTERM)
        self.kill(int(number))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._finished:
            self.kill(signal.SIGKILL)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def kill(self, number: int) -> None:
        """Signal every process of this command's session (coreutils `timeout` makes its own
        process group, so the session id is what reliably ties them together; found from the
        command's own process tree, not by reading every process on the machine)."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        for pid in session_pids(process.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, number)

    async def _run(self) -> None:
        assert self._chan is not None
        chan = self._chan
        try:
            await self._execute(chan)
        except asyncio.CancelledError:
            raise
        except OSError as exc:
            LOG.warning("%s: cannot run command: %s", self._node, exc)
            self._exit(chan, 127, f"fleetfix lab: cannot run command: {exc}\n")

    async def _execute(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        user = str(chan.get_extra_info("username") or "root")
        plan = await self._host.plan(self._node, self._command or "", user)
        self._server.commands += 1
        over_limit = plan.flaky_limit is not None and self._server.commands > plan.flaky_limit
        if plan.abort or over_limit:
            chan.get_connection().abort()
            return
        if plan.delay:
            await asyncio.sleep(plan.delay)
        if plan.launch.refusal is not None:
            self._exit(chan, 126, plan.launch.refusal)
            return
        env = {**chan.get_environment(), **plan.launch.env}
        self._host.track_session(self._node, self, add=True)
        try:
            await self._spawn_and_wait(chan, plan.launch, env)
        except subprocess.SubprocessError:  # the sandbox could not be set up: never run bare
            self._exit(chan, 125, SETUP_FAILED)
        finally:
            self._host.track_session(self._node, self, add=False)

    async def _spawn_and_wait(
        self, chan: asyncssh.SSHServerChannel[bytes], started: Launch, env: dict[str, str]
    ) -> None:
        home = Path(env.get("HOME", "/"))
        process = await asyncio.create_subprocess_exec(
            *started.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=home if home.is_dir() else None,
            start_new_session=True,
            preexec_fn=sandbox_setup(started),
        )
        self._process = process
        self._feed_pending(process)
        assert process.stdout is not None and process.stderr is not None
        await asyncio.gather(
            _pump(process.stdout, chan.write),
            _pump(process.stderr, chan.write_stderr),
        )
        returncode = await process.wait()
        self._finished = True
        if returncode < 0:
            name = signal.Signals(-returncode).name.removeprefix("SIG")
            with contextlib.suppress(OSError, asyncssh.Error):
                chan.exit_with_signal(name)
            return
        self._exit(chan, returncode, "")

    def _feed_pending(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        for data in self._pending_input:
            process.stdin.write(data)
        self._pending_input.clear()
        if self._input_closed:
            process.stdin.close()

    def _exit(self, chan: asyncssh.SSHServerChannel[bytes], code: int, message: str) -> None:
        self._finished = True
        with contextlib.suppress(OSError, asyncssh.Error):
            if message:
                chan.write_stderr(message.encode())
            chan.exit(code)


async def _pump(stream: asyncio.StreamReader, write: Callable[[bytes], object]) -> None:
    while True:
        data = await stream.read(_READ_CHUNK)
        if not data:
            return
        with contextlib.suppress(OSError, asyncssh.Error):
            write(data)


async def open_listener(
    host: SessionHost, address: str, port: int, options: asyncssh.SSHServerConnectionOptions
) -> asyncssh.SSHAcceptor:
    """Listen for one node (SO_REUSEADDR so a rebooted node can bind again at once)."""
    return await asyncssh.listen(
        host=address,
        port=port,
        options=options,
        server_factory=lambda: NodeServer(host),
        reuse_address=True,
    )


def server_options(host_key: asyncssh.SSHKey) -> asyncssh.SSHServerConnectionOptions:
    return asyncssh.SSHServerConnectionOptions(
        server_host_keys=[host_key],
        encoding=None,
        line_editor=False,
        allow_scp=False,
        keepalive_interval=0,
        login_timeout=30,
    )
