"""What a run connects through: the transport, how each host is reached, and an embedded lab."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetfix.engine.context import SpecFactory
from fleetfix.events import EventBus
from fleetfix.inventory import Inventory
from fleetfix.transport.base import DEFAULT_CONNECT_TIMEOUT, ConnectionSpec, Transport
from fleetfix.transport.registry import make_transport
from fleetfix.transport.routing import RoutingTransport
from fleetfix.transport.shard_policy import worker_limit
from fleetfix.transport.shards import ShardedTransport, WorkerOptions
from fleetfix.transport.spec import SpecDefaults, build_spec


@dataclass(frozen=True, slots=True)
class Runtime:
    transport: Transport
    spec_factory: SpecFactory


def spec_defaults(args: argparse.Namespace) -> SpecDefaults:
    return SpecDefaults(
        user=args.user,
        private_keys=tuple(args.private_key),
        # None when the command did not resolve it (cli.ansible_options); a test's args.
        connect_timeout=args.connect_timeout or DEFAULT_CONNECT_TIMEOUT,
        known_hosts=args.known_hosts,
        accept_new_host_keys=args.accept_new_host_keys,
    )


def _factory(args: argparse.Namespace, hosts: int) -> Any:
    def create(name: str) -> Transport:
        if name != "ssh":
            return make_transport(name)
        workers, grow_to = shard_plan(args, hosts)
        options = {
            "max_handshakes": args.max_handshakes,
            "accept_new_host_keys": args.accept_new_host_keys,
            "known_hosts": args.known_hosts,
        }
        if grow_to == 0:
            return make_transport("ssh", **options)
        # The handshake limit is the run's: forced workers split it with the main process; a
        # run that grows keeps the whole limit here (it may never start a worker) and gives
        # each worker a share, so up to twice the limit may be in flight once they have.
        share = max(1, -(-args.max_handshakes // (grow_to + 1)))
        local = make_transport(
            "ssh", **{**options, "max_handshakes": share if workers else args.max_handshakes}
        )
        worker_options = WorkerOptions("ssh", {**options, "max_handshakes": share})
        return ShardedTransport(local, worker_options, workers, grow_to=grow_to)

    return create


def shard_plan(args: argparse.Namespace, hosts: int) -> tuple[int, int]:
    """(workers started at once, most workers in all). `--shards N`: N at once; by default
    none at once and up to `worker_limit` when the main process proves saturated. Recording
    new host keys (--accept-new-host-keys) writes one known_hosts file, so it stays in one
    process."""
    if args.accept_new_host_keys:
        return 0, 0
    chosen = getattr(args, "shards", None)
    if chosen is not None:
        return max(0, chosen), max(0, chosen)
    return 0, worker_limit(hosts)


@asynccontextmanager
async def open_runtime(
    args: argparse.Namespace, inventory: Inventory, bus: EventBus, *, hosts: int | None = None
) -> AsyncIterator[Runtime]:
    """The transport and spec factory for one run on `hosts` hosts (default: the whole
    inventory; the shard count follows it); starts (and stops) an embedded lab when the
    inventory names a lab scenario."""
    make_transport(args.transport)  # validates the name early (UsageError with a hint)
    defaults = spec_defaults(args)
    overrides: dict[str, Mapping[str, Any]] = {}
    async with _embedded_lab(inventory, overrides):

        def spec_factory(name: str, host_vars: Mapping[str, Any]) -> ConnectionSpec:
            merged = {**host_vars, **overrides.get(name, {})}
            return build_spec(name, merged, defaults)

        selected = len(inventory.host_names()) if hosts is None else hosts
        transport = RoutingTransport(args.transport, _factory(args, selected))
        yield Runtime(transport=transport, spec_factory=spec_factory)


@asynccontextmanager
async def _embedded_lab(
    inventory: Inventory, overrides: dict[str, Mapping[str, Any]]
) -> AsyncIterator[None]:
    """Start the lab named by `fleetfix_lab_scenario` for this run (and stop it after), or
    attach to the running one `fleetfix_lab_state_dir` names (an inventory from `lab up`)."""
    scenario = _lab_var(inventory, "fleetfix_lab_scenario")
    if scenario is None:
        yield
        return
    state_dir = _lab_var(inventory, "fleetfix_lab_state_dir")
    # Imported only when asked for: the lab is a separate world the engine does not need.
    from fleetfix.lab.embedded import embedded_lab  # noqa: PLC0415

    async with embedded_lab(
        scenario, inventory, state_dir=Path(state_dir) if state_dir else None
    ) as connection_vars:
        overrides.update(connection_vars)
        yield


def _lab_var(inventory: Inventory, name: str) -> str | None:
    """A lab inventory sets its lab vars for all hosts; the first host tells."""
    hosts = inventory.host_names()
    value = inventory.host_vars(hosts[0]).get(name) if hosts else None
    return str(value) if value else None
