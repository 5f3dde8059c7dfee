"""The link between the lab server and one SSH front process: JSON lines both ways, on loopback.

Either side may send a request (`{"id": 7, "op": "plan", ...}`) and gets the answer
(`{"reply": 7, ...}`) on the same stream, in any order; a request without an id expects none.
The link ends when either side closes it; outstanding requests then fail with LabError.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fleetfix.errors import LabError

LOG = logging.getLogger("fleetfix.lab")
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
LINE_LIMIT = 1 << 24


class Link:
    """One end of a front link; `run()` reads until the other side goes away."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()

    def send(self, message: dict[str, Any]) -> None:
        """Send without waiting for an answer (ignored once the link is closed)."""
        if self.closed.is_set():
            return
        self._writer.write(json.dumps(message).encode() + b"\n")

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send a request and wait for its answer (LabError if the link closes first)."""
        if self.closed.is_set():
            raise LabError(f"lab front link is closed ({op})")
        number = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = future
        self.send({**fields, "op": op, "id": number})
        try:
            return await future
        finally:
            self._waiting.pop(number, None)

    async def run(self) -> None:
        try:
            while line := await self._reader.readline():
                self._dispatch(json.loads(line))
        except (ConnectionError, ValueError, asyncio.LimitOverrunError) as exc:
            LOG.warning("lab front link broke: %s", exc)
        finally:
            self.close()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "reply" in message:
            future = self._waiting.get(int(message["reply"]))
            if future is not None and not future.done():
                future.set_result(message)
            return
        task = asyncio.get_running_loop().create_task(self._answer(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, message: dict[str, Any]) -> None:
        try:
            answer = await self._handler(message)
        except LabError as exc:
            answer = {"error": exc.render()}
        if "id" in message:
            self.send({**(answer or {}), "reply": message["id"]})

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(LabError("lab front link closed"))
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(RuntimeError):
            self._writer.close()
