"""SSH for a set of lab nodes in one process: their listeners, connections and running commands.

The lab server uses one `NodeHosting` for every node (small labs) or none: then each SSH front
process (lab/front.py) has one for its slice. Either way the node state lives in the server
process; `plan` is how a command asks it what to do (a direct call, or a request over the
front's link).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

import asyncssh

from fleetfix.errors import LabError
from fleetfix.lab.processes import become_subreaper, reap_orphans
from fleetfix.lab.sshserver import CommandPlan, NodeSession, open_listener

LOG = logging.getLogger("fleetfix.lab")
Planner = Callable[[str, str, str], Awaitable[CommandPlan]]
REAP_INTERVAL = 2.0
"""Seconds between collecting exited orphans of node commands (see processes.py)."""


class NodeHosting:
    """Listeners, connections and sessions of the nodes this process serves (a SessionHost)."""

    def __init__(
        self,
        client_key: asyncssh.SSHKey,
        options: asyncssh.SSHServerConnectionOptions,
        port: int,
        planner: Planner,
    ) -> None:
        self.client_key = client_key
        self.port = port
        self._options = options
        self._planner = planner
        self._addresses: dict[str, str] = {}
        self._listeners: dict[str, asyncssh.SSHAcceptor] = {}
        self._connections: dict[str, set[asyncssh.SSHServerConnection]] = {}
        self._sessions: dict[str, set[NodeSession]] = {}
        self._reaper: asyncio.TimerHandle | None = None

    def start_reaping(self) -> None:
        """Adopt orphaned command processes (so a session kill finds them) and reap them."""
        if become_subreaper():
            self._schedule_reap()

    def _schedule_reap(self) -> None:
        reap_orphans()
        loop = asyncio.get_running_loop()
        self._reaper = loop.call_later(REAP_INTERVAL, self._schedule_reap)

    async def listen(self, name: str, address: str) -> None:
        """Accept connections for node `name` on `address` (LabError if the port is taken)."""
        try:
            acceptor = await open_listener(self, address, self.port, self._options)
        except OSError as exc:
            raise LabError(f"{name} ({address}:{self.port}): {exc.strerror or exc}") from exc
        self._addresses[address] = name
        self._listeners[name] = acceptor

    async def listen_all(self, nodes: dict[str, str]) -> list[str]:
        """Listen for every node (name -> address); returns the errors, if any."""
        results = await asyncio.gather(
            *(self.listen(name, address) for name, address in nodes.items()),
            return_exceptions=True,
        )
        return [str(r) for r in results if isinstance(r, BaseException)]

    def drop(self, name: str) -> None:
        """The node went down: close its listener, kill its commands, drop its connections."""
        acceptor = self._listeners.pop(name, None)
        if acceptor is not None:
            acceptor.close()
        self._addresses = {a: n for a, n in self._addresses.items() if n != name}
        for session in list(self._sessions.get(name, ())):
            session.kill(signal.SIGKILL)
        for conn in list(self._connections.get(name, ())):
            conn.abort()

    def close(self) -> None:
        """Stop serving: every listener, command and connection."""
        if self._reaper is not None:
            self._reaper.cancel()
        for name in list(self._listeners):
            self.drop(name)
        for name in list(self._sessions) + list(self._connections):
            self.drop(name)

    def counts(self) -> tuple[int, int, int]:
        """Listeners, open connections and running commands."""
        return (
            len(self._listeners),
            sum(len(c) for c in self._connections.values()),
            sum(len(s) for s in self._sessions.values()),
        )

    # -- SessionHost -----------------------------------------------------------------------

    def node_at(self, address: str) -> str | None:
        return self._addresses.get(address)

    async def plan(self, node: str, command: str, user: str) -> CommandPlan:
        return await self._planner(node, command, user)

    def track_connection(self, node: str, conn: asyncssh.SSHServerConnection, add: bool) -> None:
        group = self._connections.setdefault(node, set())
        (group.add if add else group.discard)(conn)

    def track_session(self, node: str, session: NodeSession, add: bool) -> None:
        group = self._sessions.setdefault(node, set())
        (group.add if add else group.discard)(session)
