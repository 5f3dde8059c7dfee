"""A triage, end to end: the job from Slurm, its nodes probed read-only, its logs read, the
suspects ranked (suspects.py). Nothing disruptive is sent: every step is a probe.

1. `slurm_job` on one host (`--slurm-host`, else the inventory's first host of the
   `slurm_controller` group, else its first host): scontrol, or sacct for a job slurmctld has
   forgotten. The job's nodes are matched to inventory hosts by name (or short name).
2. Every node of the job, at once: ib_counters, nvidia_smi, xid for the job's window (its start
   to its end, every boot the journal keeps), gpu_processes, ib; then ib_counters again once
   `--counter-wait` seconds have passed since the first read (errors that rise while we look).
3. The job's log files (`--log`), read on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetfix.actions import action_registry
from fleetfix.engine import Engine, RunOptions
from fleetfix.engine.hoststep import ABSENT_KEY
from fleetfix.errors import InputError
from fleetfix.events import EventBus
from fleetfix.inventory import Inventory
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.model import Play, Playbook, Step, StepKind
from fleetfix.probes import probe_registry
from fleetfix.probes.slurm_job import PROBE as SLURM_JOB
from fleetfix.results import RunResult, Status, StepResult
from fleetfix.runtime import Runtime, open_runtime
from fleetfix.topology import Topology
from fleetfix.topology.findings import correlated_failures
from fleetfix.triage.suspects import (
    IB_BEFORE,
    LogSuspect,
    NodeReading,
    Suspect,
    fabric_suspects,
    rank,
    with_switches,
)

PROBES = probe_registry((SLURM_JOB,))
"""The built-in probes and slurm_job, which only a triage runs (it needs a job id)."""
CONTROLLER_GROUP = "slurm_controller"


@dataclass(frozen=True, slots=True)
class Triage:
    """Everything a triage found, for the console and `--json`."""

    job: Mapping[str, Any]
    """The job's facts as data (probes/slurm_job.py)."""
    slurm_host: str
    hosts: tuple[str, ...]
    """The job's nodes that the inventory has, in Slurm's order."""
    missing: tuple[str, ...]
    """The job's nodes the inventory does not have: not probed."""
    readings: Mapping[str, NodeReading]
    suspects: tuple[Suspect, ...]
    logs: tuple[str, ...] = ()
    elapsed: float = 0.0
    unread: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Host -> probe -> why it gave nothing (the triage is blind there)."""


def slurm_host(inventory: Inventory, hosts: Sequence[str], chosen: str | None) -> str:
    if chosen is not None:
        if chosen not in hosts:
            raise InputError(f"--slurm-host {chosen!r} is not in the inventory")
        return chosen
    controllers = (
        inventory.hosts_in(CONTROLLER_GROUP) if CONTROLLER_GROUP in inventory.groups else []
    )
    return controllers[0] if controllers else hosts[0]


def match_nodes(nodes: Sequence[str], hosts: Sequence[str]) -> tuple[list[str], list[str]]:
    """(inventory hosts of the job's nodes, nodes the inventory lacks): a node matches a host
    of its name or whose name before the first dot is its name (`gpu001.example.org`)."""
    by_short = {h.split(".", 1)[0]: h for h in hosts}
    known = set(hosts)
    found: list[str] = []
    missing: list[str] = []
    for node in nodes:
        host = node if node in known else by_short.get(node)
        (found if host is not None else missing).append(host or node)
    return found, missing


def _playbook(steps: Sequence[tuple[str, Mapping[str, Any]]], name: str) -> Playbook:
    return Playbook(
        path=f"<fleetfix triage: {name}>",
        plays=(
            Play(
                name=name,
                hosts="all",
                tasks=tuple(
                    Step(
                        kind=StepKind.PROBE,
                        name=f"{probe}#{i}",
                        args={"name": probe, "params": dict(params)},
                        register=f"triage_{i}",
                        ignore_errors=True,
                    )
                    for i, (probe, params) in enumerate(steps)
                ),
            ),
        ),
    )


@dataclass(frozen=True, slots=True)
class _Session:
    """One runtime (one embedded lab, one set of connections) for every probe of a triage."""

    runtime: Runtime
    bus: EventBus
    args: argparse.Namespace
    inventory: Inventory

    async def probe(
        self, hosts: Sequence[str], steps: Sequence[tuple[str, Mapping[str, Any]]], name: str
    ) -> RunResult:
        engine = Engine(
            inventory=self.inventory,
            transport=self.runtime.transport,
            templar=Templar(),
            spec_factory=self.runtime.spec_factory,
            probes=PROBES,
            actions=action_registry(),
            bus=self.bus,
            options=RunOptions(
                forks=self.args.forks, command_timeout=self.args.timeout, keep_facts=True
            ),
        )
        return await engine.run(_playbook(steps, name), lambda _pattern: list(hosts))


@dataclass(frozen=True, slots=True)
class _Results:
    """A run's results by host, looked up once per host and step (a scan of every result per
    lookup was 9 million comparisons for a 512-node job)."""

    by_step: Mapping[tuple[str, str], StepResult]
    down: Mapping[str, str]
    """Hosts found unreachable -> why."""

    @classmethod
    def of(cls, result: RunResult) -> _Results:
        by_step: dict[tuple[str, str], StepResult] = {}
        down: dict[str, str] = {}
        for r in result.results:
            if r.status is Status.UNREACHABLE:
                down.setdefault(r.host, r.message or "unreachable")
            by_step.setdefault((r.host, r.step), r)
        return cls(by_step, down)

    def facts(self, host: str, step: str) -> tuple[Any, str | None, str | None]:
        """(facts, failure, unreachable) of one host's step."""
        if host in self.down:
            return None, None, self.down[host]
        r = self.by_step.get((host, step))
        if r is None:
            return None, "not run", None
        if r.data.get(ABSENT_KEY):
            return None, None, None
        facts = r.data.get("facts")
        return facts, None if facts is not None else (r.message or "no facts"), None


def node_steps(job: Mapping[str, Any], counters: bool) -> list[tuple[str, dict[str, Any]]]:
    """The probes of each node of the job, in order: the InfiniBand counters first (their
    second read comes after the others and the wait), the kernel log for the job's window
    (its start to its end, or to now for a running job)."""
    window: dict[str, Any] = {}
    if job.get("start"):
        window["since"] = str(job["start"]).replace(" ", "T")[:19]
        if job.get("end") and str(job.get("state")) != "RUNNING":
            window["until"] = str(job["end"]).replace(" ", "T")[:19]
    first: list[tuple[str, dict[str, Any]]] = [("ib_counters", {})] if counters else []
    return [*first, ("nvidia_smi", {}), ("xid", window), ("gpu_processes", {}), ("ib", {})]


async def triage(
    args: argparse.Namespace,
    inventory: Inventory,
    job_id: str,
    logs: Sequence[LogSuspect] = (),
    log_names: Sequence[str] = (),
) -> Triage:
    """Find the job, probe its nodes, rank the suspects (with `logs`' accusations)."""
    started = time.monotonic()
    everyone = inventory.select("all")
    if not everyone:
        raise InputError("the inventory has no hosts")
    where = slurm_host(inventory, everyone, args.slurm_host)
    # The whole fleet's topology (a topology file names every host), read before anything
    # connects: a bad file is an input error, not a failure after the probes ran.
    chart = Path(args.topology_file) if args.topology_file else None
    topology = Topology.from_hosts({h: inventory.host_vars(h) for h in everyone}, chart)
    bus = EventBus()
    async with open_runtime(args, inventory, bus) as runtime:
        session = _Session(runtime, bus, args, inventory)
        found = await session.probe([where], [("slurm_job", {"job": job_id})], "job")
        job, failure, down = _Results.of(found).facts(where, "slurm_job#0")
        if down is not None:
            raise InputError(f"Slurm host {where} unreachable: {down}")
        if job is None:
            raise InputError(f"job {job_id}: {failure}")
        hosts, missing = match_nodes(job.get("nodes") or (), everyone)
        counters = "ib_counters" in PROBES.names()
        steps = node_steps(job, counters)
        readings: dict[str, NodeReading] = {}
        if hosts:
            began = time.monotonic()
            result = await session.probe(hosts, steps, "job nodes")
            results = _Results.of(result)
            readings = {host: _reading(results, host, steps) for host in hosts}
            if counters:
                await asyncio.sleep(max(0.0, args.counter_wait - (time.monotonic() - began)))
                again = await session.probe(hosts, [("ib_counters", {})], "counters again")
                seen = _Results.of(again)
                readings = {host: _second_read(readings[host], seen, host) for host in hosts}
    suspects = rank(readings, logs)
    domains = [
        (f"{f.kind} {f.domain}", f.failed, f.message)
        for f in correlated_failures(topology, fabric_suspects(suspects), set(hosts))
    ]
    unread = {
        h: dict(r.failures) for h, r in readings.items() if r.failures and r.unreachable is None
    }
    return Triage(
        job=job,
        slurm_host=where,
        hosts=tuple(hosts),
        missing=tuple(missing),
        readings=readings,
        suspects=tuple(with_switches(suspects, domains)),
        logs=tuple(log_names),
        elapsed=time.monotonic() - started,
        unread=unread,
    )


def _reading(results: _Results, host: str, steps: Sequence[tuple[str, Any]]) -> NodeReading:
    probes: dict[str, Any] = {}
    failures: dict[str, str] = {}
    unreachable = None
    for i, (probe, _) in enumerate(steps):
        facts, failed, down = results.facts(host, f"{probe}#{i}")
        unreachable = unreachable or down
        name = IB_BEFORE if probe == "ib_counters" else probe
        probes[name] = facts
        if failed is not None:
            failures[name] = failed
    return NodeReading(probes, failures, unreachable)


def _second_read(reading: NodeReading, again: _Results, host: str) -> NodeReading:
    """The reading with the counters' second read (`ib_counters`) beside the first."""
    if reading.unreachable is not None:
        return reading
    facts, failed, down = again.facts(host, "ib_counters#0")
    failures = dict(reading.failures)
    if failed is not None:
        failures["ib_counters"] = failed
    return NodeReading(
        {**reading.probes, "ib_counters": facts}, failures, reading.unreachable or down
    )


def read_logs(paths: Sequence[str]) -> dict[str, str]:
    """The job's log files by name; an unreadable one is an input error naming it."""
    texts: dict[str, str] = {}
    for name in paths:
        try:
            texts[name] = Path(name).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"--log {name}: {exc.strerror or exc}") from exc
    return texts
