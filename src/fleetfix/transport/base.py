"""The transport contract: connect to one host, run commands on it, close it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from fleetfix.results import CommandResult

DEFAULT_COMMAND_TIMEOUT = 300.0
DEFAULT_CONNECT_TIMEOUT = 20.0


@dataclass(frozen=True, slots=True)
class ConnectionSpec:
    """Everything needed to reach one host, resolved from inventory vars and CLI flags."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    private_keys: tuple[str, ...] = ()
    password: str | None = None
    ssh_common_args: str = ""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    known_hosts: str | None = None
    """Path of a known_hosts file; None means the user's default (~/.ssh/known_hosts)."""
    accept_new_host_keys: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)


class Connection(Protocol):
    """An open connection to one host; reused for every command of a run."""

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run `command` through the remote shell and wait for it.

        A command still running at `timeout` is killed on the remote side and a
        CommandResult with `timed_out=True` and `rc=None` is returned (no exception),
        so a hung tool becomes data. Raises UnreachableError if the connection is lost.
        """
        ...

    async def close(self) -> None: ...


class Transport(Protocol):
    """Opens connections; one instance per run, holding any shared limits."""

    name: str

    async def connect(self, spec: ConnectionSpec) -> Connection:
        """Open a connection; raises UnreachableError (or HostKeyError) on failure."""
        ...

    async def aclose(self) -> None:
        """Close every connection this transport opened."""
        ...
