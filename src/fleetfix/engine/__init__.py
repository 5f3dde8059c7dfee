"""The engine: run a playbook's plays over an inventory through a transport, emitting events."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetfix.actions.base import Action
from fleetfix.engine import adopt, cap_slots, verdict
from fleetfix.engine.context import (
    Connections,
    HostSource,
    RunContext,
    RunOptions,
    SpecFactory,
    Templating,
)
from fleetfix.engine.health import left_unhealthy
from fleetfix.engine.node_lease import node_leases, stop_renewing
from fleetfix.engine.play import run_play
from fleetfix.engine.playkeys import rendered_play
from fleetfix.engine.runhosts import LiveGroups, play_hosts
from fleetfix.engine.safety import Safety
from fleetfix.events import EventBus, RunFinished, RunStarted
from fleetfix.inventory.model import Inventory
from fleetfix.inventory.vars_dirs import load_vars_directory
from fleetfix.playbook.model import Playbook
from fleetfix.plugins import Registry
from fleetfix.probes.base import Probe
from fleetfix.results import RunResult
from fleetfix.topology import Topology
from fleetfix.topology.caps import DomainCap
from fleetfix.topology.snapshot import host_places
from fleetfix.transport.base import Transport
from fleetfix.verdicts import LeftKind

__all__ = ["Engine", "RunOptions", "run_playbook"]

HostSelector = Callable[[str], list[str]]
"""A play's `hosts:` pattern -> the hosts it runs on (inventory pattern + --limit applied)."""


@dataclass(slots=True)
class Engine:
    """The parts a run is made of; `run` executes one playbook with them."""

    inventory: HostSource
    transport: Transport
    templar: Templating
    spec_factory: SpecFactory
    probes: Registry[Probe[Any]]
    actions: Registry[Action]
    bus: EventBus
    options: RunOptions
    topology: Topology | None = None
    fleet_topology: Topology | None = None
    """Every inventory host's domains (a cap counts hosts beyond --limit); None: `topology`."""

    async def run(self, playbook: Playbook, select: HostSelector) -> RunResult:
        return await run_playbook(self, playbook, select)


async def run_playbook(engine: Engine, playbook: Playbook, select: HostSelector) -> RunResult:
    """Run every play in order. Ctrl-C (cancellation) stops cleanly with `interrupted` set."""
    playbook_dir = str(Path(playbook.path).resolve().parent)
    leases = node_leases(engine.options)
    ctx = RunContext(
        inventory=with_playbook_vars(engine.inventory, playbook_dir),
        transport=engine.transport,
        templar=engine.templar,
        bus=engine.bus,
        options=engine.options,
        spec_factory=engine.spec_factory,
        probes=engine.probes,
        actions=engine.actions,
        connections=Connections(engine.transport),
        safety=_safety(engine),
        forks=asyncio.Semaphore(max(1, engine.options.forks)),
        node_leases=leases,
    )
    groups = _groups(ctx.inventory)
    extra_vars = ctx.options.extra_vars
    rendered = [
        rendered_play(ctx.templar, p, extra_vars, playbook_dir, groups) for p in playbook.plays
    ]
    plays = [(play, select(play.hosts)) for play in rendered]
    every_host = tuple(dict.fromkeys(h for _, hosts in plays for h in hosts))
    started = RunStarted(
        run_id=ctx.options.run_id,
        playbook=playbook.path,
        hosts=every_host,
        check=ctx.options.check,
        topology=host_places(engine.topology, every_host),
    )
    ctx.bus.emit(started)
    for host, holder in sorted(ctx.options.leased.items()):
        ctx.result.leased[host] = holder
        verdict.left(ctx, host, LeftKind.LEASED, f"left out: leased by {holder}")
    renewal = asyncio.create_task(leases.renewing(ctx)) if leases is not None else None
    try:
        await _adopt(ctx, every_host, playbook_dir, read=False)
        for play, selected in plays:
            hosts = selected
            if ctx.runtime_hosts.changed:  # add_host/group_by ran: select again, as Ansible
                hosts = play_hosts(ctx, play.hosts, select)
            if not await run_play(ctx, play, hosts, playbook_dir, LiveGroups(ctx)):
                break
        else:
            await _adopt(ctx, every_host, playbook_dir, read=True)
    except asyncio.CancelledError:
        ctx.result.interrupted = True
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
    finally:
        await stop_renewing(renewal)
        if leases is not None:  # also on Ctrl-C: a lease left behind blocks other runs
            await asyncio.shield(leases.release(ctx))
        await asyncio.shield(cap_slots.release_slots(ctx))
        await asyncio.shield(ctx.connections.close_all())
    if not ctx.result.interrupted:
        for host, reason in left_unhealthy(ctx, planned=ctx.options.check).items():
            ctx.result.left[host] = reason
            verdict.left(ctx, host, LeftKind.UNHEALTHY, reason)
    verdict.judge_rest(ctx, (*every_host, *ctx.hosts))
    ctx.bus.emit(RunFinished(result=ctx.result))
    return ctx.result


async def _adopt(ctx: RunContext, hosts: tuple[str, ...], playbook_dir: str, *, read: bool) -> None:
    """Settle what dead runs left drained among this run's hosts (engine/adopt.py)."""
    left_by = adopt.candidates(ctx, hosts, read=read)
    if left_by:
        adopted = sorted(left_by)
        await run_play(ctx, adopt.adoption_play(left_by), adopted, playbook_dir, LiveGroups(ctx))
        adopt.settle(ctx, adopted)


def _groups(inventory: HostSource) -> dict[str, list[str]]:
    """`groups`: every group's hosts (an implicit localhost is in none)."""
    return {g: inventory.hosts_in(g) for g in inventory.group_names()}


def with_playbook_vars(inventory: HostSource, playbook_dir: str) -> HostSource:
    """The inventory with the group_vars/ and host_vars/ next to the playbook, as Ansible reads
    them (the loader checked every file in them before anything ran)."""
    if not isinstance(inventory, Inventory):
        return inventory
    if any(d.path == os.path.realpath(playbook_dir) for d in inventory.vars_dirs):
        return inventory  # the inventory's own directory: already read
    directory = load_vars_directory(playbook_dir, inventory.group_names(), inventory.host_names())
    if not directory.group_vars and not directory.host_vars:
        return inventory
    return inventory.with_vars_directory(directory)


def _safety(engine: Engine) -> Safety:
    """Topology caps and holds for this run, and the fleet-wide repair budget: kept in the
    journal across runs and controllers when there is one, else counted in this run."""
    options = engine.options
    memory, budget = options.memory, options.repair_budget
    reserve = None
    if memory is not None:

        def reserve(host: str, domains: Sequence[DomainCap]) -> str | None:
            return memory.take_out(host, "disruptive", budget, domains)

    return Safety(
        engine.topology,
        engine.bus,
        override_holds=options.override_holds,
        reserve=reserve,
        budget=budget,
        fleet=engine.fleet_topology,
    )
