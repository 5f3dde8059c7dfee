"""An SSH front process of a sharded lab: `python -m fleetfix.lab front ...`.

It serves SSH for one slice of the nodes (listeners, connections, the sandboxed commands) and
keeps no node state: each exec request asks the lab server over the link how to run it
(counting it, firing scenario events), and the server tells it when a node goes down
(`drop`) or comes back (`listen`). It exits when the link closes, so it never outlives the
server, even one killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import asyncssh

from fleetfix.errors import LabError
from fleetfix.lab.hosting import NodeHosting
from fleetfix.lab.link import LINE_LIMIT, Link
from fleetfix.lab.sshserver import CommandPlan, server_options

LOG = logging.getLogger("fleetfix.lab.front")
TOKEN_ENV = "FLEETFIX_LAB_LINK_TOKEN"
SHARDS_DIR = "shards"


def config_path(state_dir: Path, shard: int) -> Path:
    """Where the server writes what front `shard` serves: port and node addresses."""
    return state_dir / SHARDS_DIR / f"{shard}.json"


class Front:
    """One front process: its hosting, its link to the server, and how it stops."""

    def __init__(self, state_dir: Path, shard: int) -> None:
        config: dict[str, Any] = json.loads(config_path(state_dir, shard).read_text("utf-8"))
        self.shard = shard
        self.nodes: dict[str, str] = dict(config["nodes"])
        host_key = asyncssh.read_private_key(str(state_dir / "host_key"))
        client_key = asyncssh.read_public_key(str(state_dir / "client_key.pub"))
        self.hosting = NodeHosting(
            client_key, server_options(host_key), int(config["port"]), self._plan
        )
        self.link: Link | None = None
        self.stopped = asyncio.Event()

    async def run(self, link_port: int, token: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", link_port, limit=LINE_LIMIT)
        hello = {"op": "hello", "token": token, "shard": self.shard, "pid": os.getpid()}
        writer.write(json.dumps(hello).encode() + b"\n")
        self.link = Link(reader, writer, self._handle)
        reading = asyncio.get_running_loop().create_task(self.link.run())
        self.hosting.start_reaping()
        errors = await self.hosting.listen_all(self.nodes)
        self.link.send({"op": "ready", "shard": self.shard, "errors": errors[:5]})
        closed = asyncio.get_running_loop().create_task(self.link.closed.wait())
        await asyncio.wait([closed, reading], return_when=asyncio.FIRST_COMPLETED)
        closed.cancel()

    async def _plan(self, node: str, command: str, user: str) -> CommandPlan:
        assert self.link is not None
        try:
            answer = await self.link.request("plan", node=node, command=command, user=user)
        except LabError:
            return CommandPlan(abort=True)  # the server is going away
        return CommandPlan.from_data(answer.get("plan") or {"abort": True})

    async def _handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        op = message.get("op")
        if op == "listen":
            await self.hosting.listen(str(message["node"]), str(message["address"]))
            return {"ok": True}
        if op == "drop":
            self.hosting.drop(str(message["node"]))
            return None
        if op == "counts":
            listeners, connections, sessions = self.hosting.counts()
            return {"listeners": listeners, "connections": connections, "sessions": sessions}
        raise LabError(f"unknown front request {op!r}")


async def serve_front(state_dir: Path, shard: int, link_port: int) -> None:
    """Serve until the link closes or SIGTERM; then kill every command and connection."""
    token = os.environ.pop(TOKEN_ENV, "")
    front = Front(state_dir, shard)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(number, lambda: main.cancel() if main else None)
    try:
        await front.run(link_port, token)
    except asyncio.CancelledError:
        pass
    finally:
        front.hosting.close()
        if front.link is not None:
            front.link.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)  # let aborted connections and killed commands wind down
