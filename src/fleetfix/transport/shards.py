"""Host shards: the SSH connections of a run, and the parsing of probe output, spread over
worker processes, so the controller uses every core of its machine.

    transport = ShardedTransport(options, workers=3)      # the main process is shard 0
    conn = await transport.connect(spec)                  # placed on the least-loaded shard
    result = await conn.run_probe(command, probe, timeout=60)   # result.parsed: facts

Only the SSH work moves: handshakes, ciphers, channels, and the pure parse (`Probe.read`) of what
a command printed. The engine, every gate, the event stream and the journal stay in the main
process, so the write-ahead intent of a disruptive action is still committed before its
command is handed to a shard, and one journal sees every event in order.

A worker is `python -m fleetfix.transport.shard_worker`, talking length-prefixed pickles on its
stdin and stdout (a private pipe between two processes of one run, never a socket). A host
stays on the shard that opened its connection. The main process is a shard too, weighted
lighter because it also runs the engine; the first connection waits for the workers to start
(about 0.3 s), so every host is placed by the same rule. Workers
ignore SIGINT and SIGTERM: the controller handles those and cancels in-flight commands
through the protocol (the worker kills them on the host); a worker whose controller died sees
end of file and exits at once, dropping its connections as the controller's death would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import copyreg
import itertools
import logging
import os
import pickle
import struct
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.errors import HostKeyError, TransportError, UnreachableError
from fleetfix.probes.base import Probe
from fleetfix.results import CommandResult
from fleetfix.transport.base import DEFAULT_COMMAND_TIMEOUT, Connection, ConnectionSpec, Transport
from fleetfix.transport.pool import ConnectionLostError, StaleConnectionError

LOG = logging.getLogger(__name__)

WORKER_MODULE = "fleetfix.transport.shard_worker"
LOCAL_WEIGHT = 2
"""The main process runs the engine too, so it takes half as many hosts as a worker."""
CANCEL_GRACE = 15.0
"""How long a cancelled command may take to be killed on its host by the worker."""
START_TIMEOUT = 10.0
"""How long the first connection waits for the workers to start before going without them."""
MAX_AUTO_WORKERS = 8
AUTO_MIN_HOSTS = 64
"""Below this many hosts a run is too short for worker start-up to pay off."""

_HEADER = struct.Struct(">I")
_ERRORS: dict[str, type[TransportError]] = {  # the most specific first
    "hostkey": HostKeyError,
    "stale": StaleConnectionError,
    "lost": ConnectionLostError,
    "unreachable": UnreachableError,
    "transport": TransportError,
}


def auto_workers(hosts: int, cpus: int | None = None) -> int:
    """Worker processes for a run by default: one per usable core beyond the first, none when
    the controller has one core or the run is small."""
    usable = cpus if cpus is not None else len(os.sched_getaffinity(0))
    if hosts < AUTO_MIN_HOSTS:
        return 0
    return max(0, min(usable - 1, MAX_AUTO_WORKERS))


# -- the wire ------------------------------------------------------------------------------


def _mapping_proxy(proxy: types.MappingProxyType[Any, Any]) -> tuple[Any, tuple[Any, ...]]:
    return read_only, (dict(proxy),)


def read_only(mapping: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    return types.MappingProxyType(mapping)


# Facts and specs freeze their mappings in read-only proxies; they cross as the same.
copyreg.pickle(types.MappingProxyType, _mapping_proxy)


def frame(message: object) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next message; None at end of file (the other side is gone)."""
    try:
        header = await reader.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        return pickle.loads(await reader.readexactly(size))
    except asyncio.IncompleteReadError:
        return None


def probe_call(probe: Probe[Any]) -> tuple[str, dict[str, Any]] | None:
    """What a request says about the probe to parse with: its name and its bound parameters;
    None (the worker does not parse) when the parameters cannot cross as a pickle."""
    params = dict(probe.bound)
    try:
        pickle.dumps(params, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an odd rendered value: the controller parses it instead
        return None
    return probe.name, params


def error_message(exc: TransportError) -> tuple[str, str, str]:
    kind = next(k for k, cls in _ERRORS.items() if isinstance(exc, cls))
    return kind, exc.host, exc.message


def rebuild_error(kind: str, host: str, message: str) -> TransportError:
    return _ERRORS.get(kind, TransportError)(host, message)


# -- the main process's side -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """What each worker needs to build its own SSH transport."""

    transport: str
    options: Mapping[str, Any]


class ShardedTransport:
    """A transport whose connections live on the least-loaded shard (see the module doc)."""

    name = "ssh"

    def __init__(self, local: Transport, worker_options: WorkerOptions, workers: int) -> None:
        self._local = local
        self._worker_options = worker_options
        self._wanted = workers
        self._workers: list[_Worker] = []
        self._local_count = 0
        self._starting: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def workers(self) -> list[_Worker]:
        return list(self._workers)

    async def connect(self, spec: ConnectionSpec) -> Connection:
        if self._starting is None and self._wanted > 0:
            self._starting = asyncio.get_running_loop().create_task(self._start())
        if self._starting is not None and not self._starting.done():
            # Placement waits once for the workers (a fraction of a second), so the first
            # hosts are spread like the rest; a worker that cannot start leaves its share here.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._starting), START_TIMEOUT)
        worker = self._pick()
        if worker is None:
            connection = await self._local.connect(spec)
            self._local_count += 1
            return _LocalShardConnection(connection, self)
        return await worker.connect(spec)

    def _pick(self) -> _Worker | None:
        ready = [w for w in self._workers if w.ready]
        best: _Worker | None = None
        load = self._local_count * LOCAL_WEIGHT
        for worker in ready:
            if worker.connections < load:
                best, load = worker, worker.connections
        return best

    def _local_closed(self) -> None:
        self._local_count -= 1

    async def _start(self) -> None:
        started = await asyncio.gather(
            *(_Worker.start(n, self._worker_options) for n in range(self._wanted)),
            return_exceptions=True,
        )
        for result in started:
            if isinstance(result, BaseException):
                LOG.warning("a host shard worker did not start: %s", result)
            elif self._closed:
                await result.stop()
            else:
                self._workers.append(result)

    async def aclose(self) -> None:
        self._closed = True
        if self._starting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
        await asyncio.gather(*(w.stop() for w in self._workers), return_exceptions=True)
        self._workers.clear()
        await self._local.aclose()


class _LocalShardConnection:
    """A connection on the main process's own shard (counted, so the load stays balanced)."""

    def __init__(self, connection: Connection, owner: ShardedTransport) -> None:
        self._connection = connection
        self._owner: ShardedTransport | None = owner

    @property
    def closed(self) -> bool:
        return bool(getattr(self._connection, "closed", False))

    @property
    def fds(self) -> int:
        return int(getattr(self._connection, "fds", 1))

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        return await self._connection.run(command, timeout=timeout, env=env, stdin=stdin)

    async def close(self) -> None:
        if self._owner is not None:
            self._owner._local_closed()
            self._owner = None
        await self._connection.close()


class _Worker:
    """One worker process and the requests in flight on it."""

    def __init__(self, number: int, process: asyncio.subprocess.Process) -> None:
        self.number = number
        self.process = process
        self.connections = 0
        self.ready = False
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._reader_task: asyncio.Task[None] | None = None
        self._dead: str | None = None

    @classmethod
    async def start(cls, number: int, options: WorkerOptions) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            WORKER_MODULE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        worker = cls(number, process)
        worker._reader_task = asyncio.get_running_loop().create_task(worker._read())
        await worker.request(("init", options.transport, dict(options.options)))
        worker.ready = True
        return worker

    async def connect(self, spec: ConnectionSpec) -> _WorkerConnection:
        self.connections += 1
        try:
            conn_id = await self.request(("connect", spec), host=spec.name)
        except BaseException:
            self.connections -= 1
            raise
        return _WorkerConnection(self, conn_id, spec.name)

    def send(self, message: tuple[Any, ...]) -> int:
        request_id = next(self._ids)
        assert self.process.stdin is not None
        self.process.stdin.write(frame((request_id, *message)))
        return request_id

    async def request(self, message: tuple[Any, ...], *, host: str = "") -> Any:
        """Send one request and wait for its answer; a dead worker is an unreachable host."""
        if self._dead is not None:
            raise UnreachableError(host or "?", self._dead)
        try:
            request_id = self.send(message)
        except (OSError, RuntimeError) as exc:  # the pipe broke before the reader saw EOF
            raise UnreachableError(host or "?", f"host shard worker {self.number}: {exc}") from exc
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            return await self._answer(future, request_id)
        finally:
            self._pending.pop(request_id, None)

    async def _answer(self, future: asyncio.Future[Any], request_id: int) -> Any:
        try:
            status, *value = await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done() or self._dead is not None:
                raise
            # Ctrl-C: the worker kills the command on its host; wait for that, then give up.
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                self.send(("cancel", request_id))
                await asyncio.wait_for(asyncio.shield(future), CANCEL_GRACE)
            raise
        if status == "ok":
            return value[0]
        raise rebuild_error(*value)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while (message := await read_frame(self.process.stdout)) is not None:
            request_id, *answer = message
            future = self._pending.get(request_id)
            if future is not None and not future.done():
                future.set_result(tuple(answer))
        self._fail_all(f"host shard worker {self.number} (pid {self.process.pid}) died")

    def _fail_all(self, reason: str) -> None:
        self._dead = reason
        self.ready = False
        for request_id, future in list(self._pending.items()):
            if not future.done():
                future.set_result(("err", "unreachable", "?", reason))
            self._pending.pop(request_id, None)

    async def stop(self) -> None:
        """Close the worker's connections cleanly, then let it exit."""
        if self._dead is None:
            with contextlib.suppress(TransportError):
                await asyncio.wait_for(self.request(("shutdown",)), CANCEL_GRACE)
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), CANCEL_GRACE)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        if self._reader_task is not None:
            await self._reader_task


class _WorkerConnection:
    """A host's connection held by a worker process."""

    fds = 0
    """Its socket is the worker's: it costs the main process no file descriptor."""

    def __init__(self, worker: _Worker, conn_id: int, host: str) -> None:
        self._worker = worker
        self._id = conn_id
        self._host = host
        self._closed = False

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        return await self._request(command, timeout, env, stdin, None)

    async def run_probe(
        self,
        command: str,
        probe: Probe[Any],
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run a probe's command; the worker parses stdout with the built-in probe of that
        name and the probe's bound parameters, so `parsed` comes back with the result (none
        when the parameters cannot cross: the controller then parses)."""
        return await self._request(command, timeout, env, None, probe_call(probe))

    async def _request(
        self,
        command: str,
        timeout: float | None,
        env: Mapping[str, str] | None,
        stdin: str | None,
        probe: tuple[str, dict[str, Any]] | None,
    ) -> CommandResult:
        message = ("run", self._id, command, timeout, dict(env) if env else None, stdin, probe)
        result: CommandResult = await self._worker.request(message, host=self._host)
        return result

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._worker.connections -= 1
        with contextlib.suppress(TransportError):
            await self._worker.request(("close", self._id), host=self._host)
