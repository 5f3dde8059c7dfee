"""A host shard's worker process: `python -m fleetfix.transport.shard_worker`.

It serves the requests of fleetfix.transport.shards (which documents the protocol): it opens
SSH connections with its own transport, runs commands on them, and parses a probe's output
where it arrives, so the controller's main process receives facts instead of doing the parse.
Requests arrive as length-prefixed pickles on stdin; answers leave on the original stdout,
which is kept private (anything printed goes to stderr, never into the protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fleetfix.errors import TransportError
from fleetfix.probes import probe_registry
from fleetfix.probes.base import Probe, verdict
from fleetfix.results import CommandResult, excerpt
from fleetfix.transport.base import Connection, Transport
from fleetfix.transport.registry import make_transport
from fleetfix.transport.shards import error_message, frame, read_frame


def parse_where_run(
    probe: Probe[Any] | None, result: CommandResult, params: Mapping[str, Any] | None = None
) -> CommandResult:
    """The result with the probe's verdict (read with the step's `params`) attached, when
    there is output to judge. Parsed into facts, the output goes back as the journal's
    excerpt of it (head and tail, with its true length), not whole: the facts are what the
    controller uses, and 138 KB of XML per host would cost more to pickle than to parse."""
    if probe is None or result.timed_out or not result.stdout.strip():
        return result
    parsed = verdict(probe, result.stdout, params or {})
    stdout = result.stdout if parsed.error is not None else excerpt(result.stdout)
    return replace(result, stdout=stdout, parsed=parsed)


class Worker:
    """The requests of one controller, answered on `out`."""

    def __init__(self, out: asyncio.WriteTransport) -> None:
        self._out = out
        self._transport: Transport | None = None
        self._connections: dict[int, Connection] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._probes = {p.name: p for p in probe_registry()}

    def answer(self, request_id: int, *answer: Any) -> None:
        try:
            data = frame((request_id, *answer))
        except Exception as exc:  # an answer that cannot cross must still end the request
            result = answer[-1]
            if isinstance(result, CommandResult) and result.parsed is not None:
                # Facts that cannot cross: the controller parses the output itself.
                data = frame((request_id, "ok", replace(result, parsed=None)))
            else:
                data = frame((request_id, "err", "transport", "?", f"shard worker: {exc!r}"))
        self._out.write(data)

    async def serve(self, reader: asyncio.StreamReader) -> None:
        while (message := await read_frame(reader)) is not None:
            request_id, op, *args = message
            if op == "cancel":
                task = self._tasks.get(args[0])
                if task is not None:
                    task.cancel()
                continue
            if op == "init":
                self._transport = make_transport(args[0], **args[1])
                self.answer(request_id, "ok", None)
                continue
            if op == "shutdown":
                await self._shutdown()
                self.answer(request_id, "ok", None)
                continue
            task = asyncio.get_running_loop().create_task(self._handle(request_id, op, args))
            self._tasks[request_id] = task
            task.add_done_callback(functools.partial(self._forget, request_id))
        # The controller is gone: leave at once; its connections drop as its own would have.
        os._exit(0)

    def _forget(self, request_id: int, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(request_id, None)

    async def _handle(self, request_id: int, op: str, args: list[Any]) -> None:
        try:
            value = await self._do(request_id, op, args)
        except TransportError as exc:
            self.answer(request_id, "err", *error_message(exc))
        except asyncio.CancelledError:
            self.answer(request_id, "err", "unreachable", "?", "cancelled by the controller")
        except Exception as exc:  # a bug here must not hang the controller's request
            self.answer(request_id, "err", "transport", "?", f"shard worker error: {exc!r}")
        else:
            self.answer(request_id, "ok", value)

    async def _do(self, request_id: int, op: str, args: list[Any]) -> Any:
        assert self._transport is not None, "init comes first"
        if op == "connect":
            self._connections[request_id] = await self._transport.connect(args[0])
            return request_id
        if op == "run":
            conn_id, command, timeout, env, stdin, probe_call = args
            result = await self._connections[conn_id].run(
                command, timeout=timeout, env=env, stdin=stdin
            )
            name, params = probe_call or ("", {})
            return parse_where_run(self._probes.get(name), result, params)
        if op == "close":
            connection = self._connections.pop(args[0], None)
            if connection is not None:
                await connection.close()
            return None
        raise ValueError(f"unknown request {op!r}")

    async def _shutdown(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._connections.clear()
        if self._transport is not None:
            await self._transport.aclose()


async def _main() -> None:
    # The protocol owns the original stdout; anything printed goes to stderr instead.
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, protocol_out)
    await Worker(out).serve(reader)


def main() -> None:
    # Ctrl-C and SIGTERM are the controller's to handle: it cancels through the protocol.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    asyncio.run(_main())


if __name__ == "__main__":
    main()
