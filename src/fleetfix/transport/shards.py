"""Host shards: the SSH connections of a run, and the parsing of probe output, spread over
worker processes when one process is not enough.

    transport = ShardedTransport(options, grow_to=3)       # the main process is shard 0
    conn = await transport.connect(spec)                  # placed on the least-loaded shard
    result = await conn.run_probe(command, probe, timeout=60)   # result.parsed: facts

One process is the default and usually enough: the controller spends about 15 ms of CPU per
host, so one core keeps up with more new hosts per second than SSH handshakes to a fleet allow,
and every worker is a fresh interpreter (0.3-0.45 s of CPU, ~57 MB) whose results cost a pickle
each way. So a run starts with none, and `Saturation` watches the main process: when its share
of one core or its event loop's lag says it is the bottleneck for two windows in a row while
new hosts are still arriving, one worker starts, up to `grow_to` (`worker_limit`: the usable
cores beyond the first and a memory budget). `--shards N` starts N at once instead. Either way
no connection waits for a worker: the first hosts are served here while workers start, and a
worker takes new hosts once it is ready (a host stays on the shard that opened it).

Only the SSH work moves: handshakes, ciphers, channels, and the pure parse (`Probe.read`) of what
a command printed. The engine, every gate, the event stream and the journal stay in the main
process, so the write-ahead intent of a disruptive action is still committed before its
command is handed to a shard, and one journal sees every event in order. A worker answers a
parsed probe with its typed facts and an excerpt of the output (the journal's), not the whole
138 KB of XML (shard_worker.py).

A worker is `python -m fleetfix.transport.shard_worker`, talking length-prefixed pickles on its
stdin and stdout (a private pipe between two processes of one run, never a socket). Workers
ignore SIGINT and SIGTERM: the controller handles those and cancels in-flight commands
through the protocol (the worker kills them on the host); a worker whose controller died sees
end of file and exits at once, dropping its connections as the controller's death would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import copyreg
import io
import itertools
import logging
import pickle
import struct
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.errors import HostKeyError, TransportError, UnreachableError
from fleetfix.plain import field_names
from fleetfix.probes.base import Probe
from fleetfix.results import CommandResult
from fleetfix.transport.base import DEFAULT_COMMAND_TIMEOUT, Connection, ConnectionSpec, Transport
from fleetfix.transport.pool import ConnectionLostError, StaleConnectionError
from fleetfix.transport.shard_policy import WINDOW, Saturation

LOG = logging.getLogger(__name__)

WORKER_MODULE = "fleetfix.transport.shard_worker"
LOCAL_WEIGHT = 2
"""The main process runs the engine too, so it takes half as many hosts as a worker."""
CANCEL_GRACE = 15.0
"""How long a cancelled command may take to be killed on its host by the worker."""
_HEADER = struct.Struct(">I")
_ERRORS: dict[str, type[TransportError]] = {  # the most specific first
    "hostkey": HostKeyError,
    "stale": StaleConnectionError,
    "lost": ConnectionLostError,
    "unreachable": UnreachableError,
    "transport": TransportError,
}


# -- the wire ------------------------------------------------------------------------------


def _mapping_proxy(proxy: types.MappingProxyType[Any, Any]) -> tuple[Any, tuple[Any, ...]]:
    return read_only, (dict(proxy),)


def read_only(mapping: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    return types.MappingProxyType(mapping)


# Facts and specs freeze their mappings in read-only proxies; they cross as the same.
copyreg.pickle(types.MappingProxyType, _mapping_proxy)


def restore(cls: type, values: tuple[Any, ...]) -> Any:
    """A dataclass from its field values, as `frame` sent it (the values are already the
    object's own: no validation runs again)."""
    names = field_names(cls)
    assert names is not None, cls
    made: Any = object.__new__(cls)
    for name, value in zip(names, values, strict=True):
        object.__setattr__(made, name, value)
    return made


class _Pickler(pickle.Pickler):
    """Dataclasses (facts) cross as (class, field values): a slotted frozen dataclass's own
    pickling calls `dataclasses.fields()` for every object restored (~25,700 per 300 hosts);
    this reads each class's field names once (plain.field_names)."""

    def reducer_override(self, obj: Any) -> Any:
        names = field_names(type(obj))
        if names is None:
            return NotImplemented
        return restore, (type(obj), tuple(getattr(obj, name) for name in names))


def frame(message: object) -> bytes:
    buffer = io.BytesIO()
    buffer.write(b"\0" * _HEADER.size)
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    size = buffer.tell() - _HEADER.size
    buffer.seek(0)
    buffer.write(_HEADER.pack(size))
    return buffer.getvalue()


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

    def __init__(
        self,
        local: Transport,
        worker_options: WorkerOptions,
        workers: int = 0,
        *,
        grow_to: int = 0,
        saturation: Saturation | None = None,
        window: float = WINDOW,
    ) -> None:
        """`workers` start at the first connection; then, up to `grow_to` in all, one more
        each time `saturation` says the main process is the bottleneck."""
        self._local = local
        self._worker_options = worker_options
        self._wanted = workers
        self._grow_to = max(grow_to, workers)
        self._saturation = saturation or Saturation()
        self._window = window
        self._workers: list[_Worker] = []
        self._local_count = 0
        self._connects = 0
        self._starts: list[asyncio.Task[None]] = []
        self._watch: asyncio.Task[None] | None = None
        self._starting = 0
        self._closed = False

    @property
    def workers(self) -> list[_Worker]:
        return list(self._workers)

    async def started(self) -> None:
        """Wait until the workers being started have started (or failed to)."""
        while pending := [t for t in self._starts if not t.done()]:
            await asyncio.wait(pending)

    async def connect(self, spec: ConnectionSpec) -> Connection:
        if self._connects == 0:
            self._begin()
        self._connects += 1
        worker = self._pick()
        if worker is None:
            connection = await self._local.connect(spec)
            self._local_count += 1
            return _LocalShardConnection(connection, self)
        return await worker.connect(spec)

    def _begin(self) -> None:
        """At the first connection: start the wanted workers and the watch for more, neither
        awaited (the first hosts are served here meanwhile)."""
        for _ in range(self._wanted):
            self._spawn()
        if self._grow_to > self._wanted:
            self._saturation.start()
            self._watch = asyncio.get_running_loop().create_task(self._grow())

    def _spawn(self) -> None:
        number = len(self._workers) + self._starting
        self._starting += 1
        self._starts.append(asyncio.get_running_loop().create_task(self._start(number)))

    async def _grow(self) -> None:
        """One more worker each time the main process stays saturated while hosts arrive."""
        seen = self._connects
        while not self._closed and len(self._workers) + self._starting < self._grow_to:
            await asyncio.sleep(self._window)
            arriving, seen = self._connects > seen, self._connects
            if self._saturation.sample(self._window, arriving):
                LOG.info("the controller is saturated: starting host shard worker")
                self._spawn()

    def _pick(self) -> _Worker | None:
        best: _Worker | None = None
        load = self._local_count * LOCAL_WEIGHT
        for worker in self._workers:
            if worker.ready and worker.connections < load:
                best, load = worker, worker.connections
        return best

    def _local_closed(self) -> None:
        self._local_count -= 1

    async def _start(self, number: int) -> None:
        try:
            worker = await _Worker.start(number, self._worker_options)
        except Exception as exc:  # the hosts it would have taken stay with the other shards
            LOG.warning("a host shard worker did not start: %s", exc)
            self._grow_to = len(self._workers)  # nor will another
            return
        finally:
            self._starting -= 1
        if self._closed:
            await worker.stop()
        else:
            self._workers.append(worker)

    async def aclose(self) -> None:
        self._closed = True
        if self._watch is not None:
            self._watch.cancel()
        await asyncio.gather(*self._starts, return_exceptions=True)
        if self._watch is not None:
            await asyncio.gather(self._watch, return_exceptions=True)
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
