"""Running the health check on this node: probes under deadlines, the verdict, the drain.

Every command runs through one Connection (the local transport: no SSH, no journal, no lease)
with its own timeout, cut to what is left of the whole check's budget, so a hung nvidia-smi
becomes a finding ("nvidia-smi hung") and the check still ends well inside Slurm's patience.
Probes run concurrently: the slowest one sets the time, not their sum.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetfix.errors import UnreachableError
from fleetfix.healthcheck.decide import (
    Finding,
    HealthOutcome,
    Observation,
    Owner,
    drain_command,
    drain_reason,
    expected_gpus,
    findings,
    owner,
)
from fleetfix.probes import probe_registry
from fleetfix.probes.base import Probe, verdict
from fleetfix.results import CommandResult
from fleetfix.transport.base import Connection

NODE_ENV = "SLURMD_NODENAME"
_TOOL = {"nvidia_smi": "nvidia-smi", "xid": "the kernel log", "ib": "ibstat"}


@dataclass(frozen=True, slots=True)
class Limits:
    """Seconds. The defaults end a check in at most ~35 s: probes concurrently (20), then the
    drain (10), plus kill grace; Slurm kills a health check that runs 60 s."""

    budget: float = 45.0
    probe_timeout: float = 20.0
    drain_timeout: float = 10.0
    name_timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class Settings:
    checks: tuple[str, ...]
    expected_gpus: int | None = None
    node: str | None = None
    dry_run: bool = False
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, slots=True)
class Report:
    """The check's result: the outcome (its exit code) and the one line it prints."""

    node: str
    outcome: HealthOutcome
    line: str
    findings: tuple[Finding, ...] = ()
    drain_reason: str | None = None
    elapsed: float = 0.0


class _Clock:
    def __init__(self, budget: float) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + budget

    def within(self, timeout: float) -> float:
        """`timeout`, cut to what is left of the budget (never below a second)."""
        return max(1.0, min(timeout, self.deadline - time.monotonic()))

    def elapsed(self) -> float:
        return time.monotonic() - self.started


async def healthcheck(connection: Connection, settings: Settings) -> Report:
    """Check this node and, when unhealthy and not a dry run, drain it in Slurm."""
    clock = _Clock(settings.limits.budget)
    node = await _node_name(connection, settings, clock)
    names = (*settings.checks, "slurm_node")
    observed = await _observe(connection, names, node, settings.limits, clock)
    slurm = observed["slurm_node"].data
    expected = expected_gpus(settings.expected_gpus, slurm)
    found = findings(observed, settings.checks, expected)
    if not found:
        line = f"{node}: healthy ({_healthy_summary(observed, expected)})"
        return Report(node, HealthOutcome.HEALTHY, line, elapsed=clock.elapsed())
    report = await _act(connection, node, found, observed["slurm_node"], (settings, clock))
    return Report(
        node,
        report[0],
        f"{node}: UNHEALTHY: {found[0].problem}{_more(found)}; {report[1]}",
        tuple(found),
        drain_reason(found),
        clock.elapsed(),
    )


async def _node_name(connection: Connection, settings: Settings, clock: _Clock) -> str:
    """--node, else $SLURMD_NODENAME, else `hostname -s` (run like every other command)."""
    explicit = settings.node or os.environ.get(NODE_ENV)
    if explicit:
        return explicit
    result = await _run(connection, "hostname -s", clock.within(settings.limits.name_timeout))
    name = result.stdout.strip() if result.ok else ""
    if not name:
        raise UnreachableError("localhost", f"cannot tell this node's name: {result.stderr!r}")
    return name


async def _observe(
    connection: Connection,
    names: tuple[str, ...],
    node: str,
    limits: Limits,
    clock: _Clock,
) -> dict[str, Observation]:
    registry = probe_registry()
    timeout = clock.within(limits.probe_timeout)
    probes = [registry.get(name) for name in names]
    results = await asyncio.gather(
        *(_probe(connection, probe, {"node": node}, timeout) for probe in probes)
    )
    return {probe.name: result for probe, result in zip(probes, results, strict=True)}


async def _probe(
    connection: Connection, probe: Probe[Any], node_params: Mapping[str, Any], timeout: float
) -> Observation:
    """One probe's verdict; a hung or failed tool is a failure, never empty facts."""
    params = node_params if probe.name == "slurm_node" else {}
    result = await _run(connection, probe.command(params), timeout)
    tool = _TOOL.get(probe.name, probe.name)
    if result.timed_out:
        return Observation(probe.name, None, f"{tool} hung (no answer in {timeout:.0f}s)")
    if result.rc != 0 and not result.stdout.strip():
        detail = (result.stderr.strip().splitlines() or [""])[-1][:120]
        return Observation(probe.name, None, f"{tool} failed (rc={result.rc}): {detail}")
    parsed = verdict(probe, result.stdout, params)
    if parsed.error is not None:
        return Observation(probe.name, None, f"cannot read {tool}: {parsed.error[:120]}")
    return Observation(probe.name, parsed.data)


async def _run(connection: Connection, command: str, timeout: float) -> CommandResult:
    try:
        return await connection.run(command, timeout=timeout)
    except UnreachableError as exc:
        return CommandResult(command, None, "", str(exc))


async def _act(
    connection: Connection,
    node: str,
    found: list[Finding],
    slurm: Observation,
    run: tuple[Settings, _Clock],
) -> tuple[HealthOutcome, str]:
    """Drain the node unless it is a dry run or the node is out of service already."""
    settings, clock = run
    held_by = owner(slurm.data)
    state = (slurm.data or {}).get("state")
    if held_by is Owner.FLEETFIX:
        return HealthOutcome.DRAINED, f"already {state} by fleetfix"
    if held_by is Owner.SOMEONE_ELSE:
        reason = (slurm.data or {}).get("reason")
        return HealthOutcome.LEFT_ALONE, f"{state} by someone else ({reason}): left alone"
    if held_by is Owner.UNKNOWN:
        return HealthOutcome.NOT_DRAINED, f"not drained: Slurm state unknown ({slurm.failure})"
    command = drain_command(node, drain_reason(found))
    if settings.dry_run:
        return HealthOutcome.DRY_RUN, f"dry run: would run {command}"
    result = await _run(connection, command, clock.within(settings.limits.drain_timeout))
    if not result.ok:
        said = (result.stderr.strip() or result.stdout.strip() or "no answer")[:160]
        return HealthOutcome.NOT_DRAINED, f"drain failed (rc={result.rc}): {said}"
    return HealthOutcome.DRAINED, "drained"


def _more(found: list[Finding]) -> str:
    if len(found) < 2:
        return ""
    return f" (+{len(found) - 1} more: {'; '.join(f.problem for f in found[1:3])})"


def _healthy_summary(observed: Mapping[str, Observation], expected: int | None) -> str:
    parts = []
    smi = observed.get("nvidia_smi")
    if smi is not None and smi.data is not None:
        count = smi.data.get("gpu_count")
        parts.append(f"{count}/{expected} GPUs" if expected is not None else f"{count} GPUs")
    if "xid" in observed:
        parts.append("no Xid needing action")
    if "ib" in observed:
        parts.append("IB ports active")
    return ", ".join(parts) or "no checks"
