"""The lab server's loopback control port: shim requests from nodes and control requests.

Two protocols share the port. A shim sends NUL-terminated fields (`FFLAB1 token node user
tool argc args...`) and gets shell code back. A control client (`fleetfix lab status`, tests)
sends one JSON line `{"token": ..., "op": "truth"}` and gets one JSON line back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fleetfix.lab.shims import MAGIC, frame_reply, render_reply
from fleetfix.lab.tools.base import ToolReply

LOG = logging.getLogger("fleetfix.lab.tools")
READ_TIMEOUT = 30.0
MAX_ARGS = 4096


class ToolHost(Protocol):
    """What the control port needs from the lab server."""

    token: str

    def run_tool(self, node: str, user: str, tool: str, argv: list[str]) -> ToolReply: ...

    def after_reply(self, node: str, reply: ToolReply) -> None: ...

    async def control(self, request: dict[str, Any]) -> dict[str, Any]: ...


def client_handler(
    host: ToolHost, open_writers: set[asyncio.StreamWriter]
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """The per-connection coroutine; `open_writers` lets the server close hung calls at exit."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        open_writers.add(writer)
        try:
            first = await asyncio.wait_for(reader.readexactly(1), READ_TIMEOUT)
            if first == b"{":
                await _control(host, first, reader, writer)
            else:
                await _shim(host, first, reader, writer)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            open_writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return handle


async def _field(reader: asyncio.StreamReader) -> str:
    data = await asyncio.wait_for(reader.readuntil(b"\0"), READ_TIMEOUT)
    return data[:-1].decode("utf-8", errors="surrogateescape")


async def _shim(
    host: ToolHost, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    magic = first.decode("latin-1") + await _field(reader)
    token, node, user, tool, count = [await _field(reader) for _ in range(5)]
    if magic != MAGIC or not hmac.compare_digest(token, host.token):
        refusal = render_reply("", f"{tool}: refused by the fleetfix lab server\n", 126)
        writer.write(frame_reply(refusal))
        return
    argc = int(count)
    if not 0 <= argc <= MAX_ARGS:
        raise ValueError("bad argument count")
    argv = [await _field(reader) for _ in range(argc)]
    reply = host.run_tool(node, user, tool, argv)
    if reply.hang:
        await reader.read()  # the caller's process is killed eventually; its socket closes
        return
    if reply.delay:
        await asyncio.sleep(reply.delay)
    writer.write(frame_reply(render_reply(reply.stdout, reply.stderr, reply.rc, reply.script)))
    await writer.drain()
    host.after_reply(node, reply)


async def _control(
    host: ToolHost, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    line = first + await asyncio.wait_for(reader.readline(), READ_TIMEOUT)
    try:
        request = json.loads(line)
    except ValueError:
        response: dict[str, Any] = {"ok": False, "error": "bad request"}
    else:
        if not isinstance(request, dict) or not hmac.compare_digest(
            str(request.get("token", "")), host.token
        ):
            response = {"ok": False, "error": "bad token"}
        else:
            response = await host.control(request)
    writer.write(json.dumps(response).encode() + b"\n")
    await writer.drain()
