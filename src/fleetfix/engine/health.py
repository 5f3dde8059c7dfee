"""At the end of a run: which hosts does it leave unhealthy, and why (for the exit code)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.gpus import gpus_short
from fleetfix.knowledge.health import Level, aer_problems, gpu_health, summarize
from fleetfix.knowledge.remedy import Remedy, from_log

HEALTH_PROBES = frozenset(
    {
        "nvidia_smi",
        "xid",
        "nvlink",
        "ib",
        "kernel_modules",
        "services",
        "nccl_tests",
        "dcgm_diag",
        "topology",
        "pci_gpus",
    }
)
"""Probes whose verdict says whether a node can run jobs. Not slurm_node, gpu_processes or
shm: a busy node or a full /dev/shm is not a broken one."""


def left_unhealthy(ctx: RunContext, *, planned: bool = False) -> dict[str, str]:
    """host -> why, for each host this run leaves failed or with a fault still showing, that
    is not already out of service (drained or down in Slurm, its reason saying why) and that
    the run has not already named (owned, deferred, refused).

    `planned` (--check): only what no plan can change, a health probe that could not be read;
    a fault still showing may be one the real run would fix."""
    left: dict[str, str] = {}
    for host, state in ctx.hosts.items():
        if host in ctx.result.left:
            continue
        stats = ctx.result.stats.get(host)
        if stats is not None and (stats.failed or stats.unreachable):
            verdict = "unreachable" if stats.unreachable else "failed"
            left[host] = f"{verdict}: {state.last_trouble or 'a step failed'}"
            continue
        problems = current_problems(ctx, state, planned=planned)
        if problems and not out_of_service(state.probe_data.get("slurm_node")):
            left[host] = "unhealthy: " + "; ".join(problems)
    return left


def current_problems(ctx: RunContext, state: HostState, *, planned: bool) -> list[str]:
    """The faults the host's last probe reads still show (`planned`: only the health probes
    that could not be read, as in `left_unhealthy`). Worked out once for the facts as they
    stand (the run's end asks for each host twice: what it leaves, and its verdict)."""
    failures = tuple(state.probe_failures.items())
    key = (state.probe_data.version, planned, failures, state.gpus_seen, state.journal_gpus_seen)
    if state.problems_seen is not None and state.problems_seen[0] == key:
        return list(state.problems_seen[1])
    problems = _unreadable(state) if planned else _problems(state)
    short = None if planned else gpus_short(ctx, state)
    if short is not None:
        problems.append(f"nvidia_smi: {short}")
    state.problems_seen = (key, tuple(problems))
    return problems


def _unreadable(state: HostState) -> list[str]:
    """The health probes whose tool answered nothing fleetfix could read."""
    return [
        f"{name}: {state.probe_failures[name]}"
        for name in sorted(HEALTH_PROBES & state.probe_failures.keys())
    ]


def _problems(state: HostState) -> list[str]:
    problems = _unreadable(state)
    data = {name: state.probe_data[name] for name in HEALTH_PROBES & state.probe_data.keys()}
    for name in sorted(data):
        if name == "xid":
            # The log since boot keeps an Xid a GPU reset already cured; only one that calls
            # for a reboot is still a fault in this boot (nvidia-smi tells the rest).
            logged = from_log(data[name], data.get("nvidia_smi"))
            if logged.remedy is not Remedy.NONE:
                problems.append(f"xid: {'; '.join(logged.why)}: needs {logged.remedy.word}")
            # An uncorrected PCIe error stays a fault for the boot: no reset clears the link's
            # record, and the GPU behind it is suspect until a reboot (docs/gpu-procedures.md).
            faults, _ = aer_problems(data[name].get("aer") or {})
            problems.extend(f"xid: {fault}" for fault in faults)
            continue
        if name == "nvidia_smi":
            # The same rules as recover.yml's, Fabric Manager's state included.
            verdict = gpu_health(data[name], data.get("services"))
        else:
            verdict = summarize(name, data[name])
        if verdict.level is Level.BAD:
            problems.append(f"{name}: {verdict.text}")
    return problems


def out_of_service(slurm: Mapping[str, Any] | None) -> bool:
    """Drained, draining or down in Slurm (its reason says why)."""
    return bool(slurm) and any(slurm.get(k) for k in ("drained", "draining", "down"))  # type: ignore[union-attr]
