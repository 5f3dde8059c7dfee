"""A lab too big for one process's descriptors: SSH front processes, one per slice of nodes.

Every node costs its SSH server a listening socket and, while a client holds it, a connection;
a command adds three pipes. The open-file limit (often 20,000 and not raisable) caps one
process near 2,000 nodes with room for commands, so a bigger lab starts SSH front processes
(lab/front.py), each listening on a contiguous slice of the node addresses. The server keeps
all node state, the control port and the tool emulators; fronts ask it over a loopback link
how to run each command, and it tells them when a node drops or comes back. Seen from SSH,
the tools and `fleetfix lab`, nothing differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import os
import secrets
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetfix.errors import LabError
from fleetfix.lab.front import SHARDS_DIR, TOKEN_ENV, config_path
from fleetfix.lab.link import LINE_LIMIT, Link
from fleetfix.lab.sshserver import CommandPlan

LOG = logging.getLogger("fleetfix.lab")
NODES_PER_PROCESS = 2000
"""At most this many nodes per SSH-serving process, whatever the descriptor limit allows."""
FDS_PER_NODE = 2
"""A listener, plus a connection while a client holds one."""
FD_RESERVE = 2048
"""Descriptors kept for commands in flight (3 pipes each), the control port and log files."""
FRONT_START_TIMEOUT = 120.0
FRONT_STOP_TIMEOUT = 5.0
Planner = Callable[[str, str, str], Awaitable[CommandPlan]]


def nodes_per_process(fd_limit: int, requested: int | None = None) -> int:
    """How many nodes one process may serve: the request, else what the fd limit allows."""
    if requested is not None:
        return max(1, requested)
    return max(1, min(NODES_PER_PROCESS, (fd_limit - FD_RESERVE) // FDS_PER_NODE))


def slices(names: list[str], per_process: int) -> list[list[str]]:
    """Contiguous slices of the node order; one slice (no fronts) when all fit one process."""
    count = max(1, math.ceil(len(names) / per_process))
    size = math.ceil(len(names) / count) if names else 0
    return [names[i * size : (i + 1) * size] for i in range(count)] if count > 1 else [names]


@dataclass(slots=True)
class _Front:
    index: int
    nodes: list[str]
    process: asyncio.subprocess.Process | None = None
    link: Link | None = None
    ready: asyncio.Future[list[str]] | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class ShardSet:
    """The server's side of its SSH fronts: spawn them, route node listen/drop, stop them."""

    def __init__(
        self,
        state_dir: Path,
        port: int,
        node_slices: list[list[str]],
        addresses: Mapping[str, str],
        planner: Planner,
    ) -> None:
        self._state_dir = state_dir
        self._port = port
        self._addresses = dict(addresses)
        self._planner = planner
        self._token = secrets.token_hex(16)
        self._fronts = [_Front(i, nodes) for i, nodes in enumerate(node_slices)]
        self._front_of = {name: front for front in self._fronts for name in front.nodes}
        self._server: asyncio.Server | None = None

    @property
    def pids(self) -> list[int]:
        return [f.process.pid for f in self._fronts if f.process is not None]

    def describe(self) -> list[dict[str, Any]]:
        """Per front: its pid and the nodes it serves (for lab.json and `lab status`)."""
        return [
            {"pid": f.process.pid if f.process else None, "nodes": list(f.nodes)}
            for f in self._fronts
        ]

    async def start(self, listening: set[str]) -> None:
        """Start every front, listening on the nodes in `listening`; returns when all listen."""
        loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, limit=LINE_LIMIT)
        link_port = self._server.sockets[0].getsockname()[1]
        (self._state_dir / SHARDS_DIR).mkdir(exist_ok=True)
        for front in self._fronts:
            front.ready = loop.create_future()
            nodes = {n: self._addresses[n] for n in front.nodes if n in listening}
            config = {"port": self._port, "nodes": nodes}
            config_path(self._state_dir, front.index).write_text(json.dumps(config), "utf-8")
            front.process = await _spawn_front(self._state_dir, front.index, link_port, self._token)
        try:
            await asyncio.wait_for(self._all_ready(), FRONT_START_TIMEOUT)
        except TimeoutError as exc:
            raise LabError(f"lab SSH fronts did not start within {FRONT_START_TIMEOUT:g}s") from exc

    async def _all_ready(self) -> None:
        for front in self._fronts:
            assert front.ready is not None and front.process is not None
            errors = await _ready_or_exit(front.ready, front.process)
            if errors is None:
                raise LabError(f"lab SSH front {front.index} exited during start (see server.log)")
            if errors:
                raise LabError(
                    f"cannot listen on port {self._port} for lab nodes: {errors[0]}",
                    hint="is another lab running? stop it with `fleetfix lab down`, or choose"
                    " another port: `fleetfix lab up --port PORT`, `fleetfix run --lab-port PORT`",
                )

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = json.loads(await asyncio.wait_for(reader.readline(), 30))
            front = self._fronts[int(hello["shard"])]
            if not hmac.compare_digest(str(hello.get("token", "")), self._token):
                raise ValueError("bad token")
        except (TimeoutError, ValueError, KeyError, IndexError, TypeError):
            writer.close()
            return
        front.link = Link(reader, writer, lambda message: self._handle(front, message))
        await front.link.run()
        if front.ready is not None and not front.ready.done():
            front.ready.set_result(["its link closed before it listened"])

    async def _handle(self, front: _Front, message: dict[str, Any]) -> dict[str, Any] | None:
        op = message.get("op")
        if op == "plan":
            node = str(message.get("node", ""))
            if self._front_of.get(node) is not front:
                return {"plan": CommandPlan(abort=True).to_data()}
            plan = await self._planner(node, str(message["command"]), str(message["user"]))
            return {"plan": plan.to_data()}
        if op == "ready" and front.ready is not None and not front.ready.done():
            front.ready.set_result([str(e) for e in message.get("errors", [])])
        return None

    async def listen(self, name: str, address: str) -> None:
        """Node `name` is back: its front listens on `address` again (LabError if it cannot)."""
        link = self._front_of[name].link
        if link is None:
            raise LabError(f"{name}: its SSH front is gone")
        answer = await link.request("listen", node=name, address=address)
        if "error" in answer:
            raise LabError(str(answer["error"]))

    def drop(self, name: str) -> None:
        """Node `name` went down: its front closes the listener, commands and connections."""
        link = self._front_of[name].link
        if link is not None:
            link.send({"op": "drop", "node": name})

    async def counts(self) -> list[dict[str, Any]]:
        found = []
        for front in self._fronts:
            with contextlib.suppress(LabError):
                if front.link is not None:
                    found.append(await front.link.request("counts"))
        return found

    async def aclose(self) -> None:
        """Stop every front: close its link (it exits), SIGKILL one that lingers; reaped."""
        for front in self._fronts:
            if front.link is not None:
                front.link.close()
            if front.process is not None and front.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    front.process.send_signal(signal.SIGTERM)
        for front in self._fronts:
            if front.process is None:
                continue
            try:
                await asyncio.wait_for(front.process.wait(), FRONT_STOP_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    front.process.kill()
                await front.process.wait()
        if self._server is not None:
            self._server.close()


async def _ready_or_exit(
    ready: asyncio.Future[list[str]], process: asyncio.subprocess.Process
) -> list[str] | None:
    """The front's listen errors once it is ready, or None if it exits first."""
    exited: asyncio.Future[int] = asyncio.ensure_future(process.wait())
    waiting: set[asyncio.Future[Any]] = {ready, exited}
    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    exited.cancel()
    return ready.result() if ready.done() else None


async def _spawn_front(
    state_dir: Path, index: int, link_port: int, token: str
) -> asyncio.subprocess.Process:
    argv = [sys.executable, "-m", "fleetfix.lab", "front", "--state-dir", str(state_dir)]
    argv += ["--shard", str(index), "--link-port", str(link_port)]
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        env={**os.environ, TOKEN_ENV: token},
        start_new_session=True,
    )
