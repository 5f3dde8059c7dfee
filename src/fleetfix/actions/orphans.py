"""kill_orphans: end the GPU processes no Slurm job owns any more (a crashed job's left-overs).

A job that dies can leave processes behind that still hold GPU memory; the next job then fails
to allocate its NCCL buffers or hangs at init. The `gpu_processes` probe says whose each GPU
process is (its Slurm job, from its cgroup) and which jobs Slurm has on the node; its
`orphan_pids` are the ones to end (probes/gpu_processes.py `orphans`): never a process of a job
Slurm still has, never NVIDIA's daemons. Nothing is done when either ps or squeue did not
answer: unknown is never read as "no job".

The command checks each PID again on the node right before each signal: the same PID with
another start time (ps `lstart`) is a new process that took the number, and is left alone.
SIGTERM, up to `wait` (10 s) for them to exit, SIGKILL for the survivors. The `verify` probe
then reads the compute apps again: the orphans' GPU memory must be free. What each orphan was
(PID, user, job, GPU, memory, command line) is printed by the command and kept in the plan's
`before`, both journaled with the step.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence

from fleetfix.actions.base import (
    Action,
    ActionContext,
    ActionPlan,
    PlannedCommand,
    planned_before,
    remembered,
)
from fleetfix.actions.gates import duration, params_checker, seconds
from fleetfix.probes.gpu_processes import GpuProcessesFacts, HeldProcess
from fleetfix.probes.slurm_node import SlurmNodeFacts

DEFAULT_WAIT = 10.0
KILL_WAIT = 5
"""Seconds the command waits for SIGKILL to take (a process stuck in the kernel never goes)."""
PIDS_KEY = "orphan_pids"
EVIDENCE_KEY = "orphans"


def _plan(ctx: ActionContext) -> ActionPlan:
    facts: GpuProcessesFacts = ctx.facts["gpu_processes"]
    unknown = _unknown(facts) or _disagrees(facts, ctx.facts.get("slurm_node"))
    if unknown is not None:
        return ActionPlan(refused=f"{unknown}: no process is known to be an orphan")
    orphans = _orphans(facts)
    if not orphans:
        jobs = ", ".join(str(job) for job in facts.slurm_jobs) or "none"
        return ActionPlan(notes=(f"no orphan GPU processes (Slurm jobs on the node: {jobs})",))
    wait = seconds(ctx.params.get("wait"), DEFAULT_WAIT)
    evidence = tuple(_evidence(rows, facts.slurm_jobs) for rows in orphans.values())
    pids = ",".join(str(pid) for pid in orphans)
    targets = ",".join(f"{pid}@{rows[0].started}" for pid, rows in orphans.items())
    command = PlannedCommand(
        kill_script(
            [(pid, rows[0].started or "") for pid, rows in orphans.items()], wait, evidence
        ),
        f"end {len(orphans)} orphan GPU process(es): SIGTERM, {wait:g}s, SIGKILL ({pids})",
        timeout=wait + KILL_WAIT + 60,
    )
    return ActionPlan(
        commands=(command,),
        notes=evidence,
        before={PIDS_KEY: targets, EVIDENCE_KEY: " | ".join(evidence)},
    )


def _unknown(facts: GpuProcessesFacts) -> str | None:
    """Why the facts cannot tell an orphan from a job's process, or None."""
    if facts.owners_ok is None or facts.slurm_jobs_ok is None:
        return "the gpu_processes facts say nothing of owners (an older probe output?)"
    said = "; ".join(facts.errors)
    if not facts.owners_ok:
        return f"cannot tell whose the GPU processes are (ps: {said or 'no answer'})"
    if not facts.slurm_jobs_ok:
        return f"cannot tell which jobs Slurm has on the node (squeue: {said or 'no answer'})"
    if facts.query_ok is False:
        return f"cannot list the GPUs' compute processes ({said or 'nvidia-smi failed'})"
    return None


def _disagrees(facts: GpuProcessesFacts, slurm: SlurmNodeFacts | None) -> str | None:
    """squeue listed no job while Slurm's node record says jobs hold the node: squeue was
    asked for another name (the node's Slurm name is not its short hostname) and every job
    process would look like an orphan."""
    if slurm is None or facts.slurm_jobs or not slurm.has_jobs:
        return None
    return (
        f"Slurm says jobs hold {slurm.name} ({slurm.state}) but squeue listed none for it"
        " (is its Slurm name not its short hostname? the gpu_processes param `node` names it)"
    )


def _orphans(facts: GpuProcessesFacts) -> dict[int, list[HeldProcess]]:
    """Each orphan's rows (one per GPU it uses), by PID."""
    found: dict[int, list[HeldProcess]] = {}
    for process in facts.processes:
        if process.pid in facts.orphan_pids and process.started:
            found.setdefault(process.pid, []).append(process)
    return found


def _evidence(rows: list[HeldProcess], jobs: Sequence[int]) -> str:
    first = rows[0]
    if first.job_id is not None:
        job = f"job {first.job_id} (not on the node any more)"
    else:
        job = "no job" + ("" if jobs else ", none on the node")
    held = ", ".join(
        f"{row.used_memory_mib if row.used_memory_mib is not None else '?'} MiB on "
        f"{row.gpu_bus_id or row.gpu_uuid or 'a GPU'}"
        for row in rows
        if "query" in row.sources
    )
    return (
        f"pid {first.pid} user {first.user or '?'} {job} started {first.started}: "
        f"{held or 'no GPU memory listed'}: {first.command_line or first.name or '?'}"
    )


def kill_script(targets: Sequence[tuple[int, str]], wait: float, evidence: Sequence[str]) -> str:
    """The command: each (PID, start time) signalled only while ps still shows that start time
    for it; SIGTERM, up to `wait` seconds, SIGKILL; exit 1 if one outlives SIGKILL."""
    cases = " ".join(f"{pid}) echo {shlex.quote(started)};;" for pid, started in targets)
    pids = " ".join(str(pid) for pid, _ in targets)
    said = " ".join(f"echo {shlex.quote('orphan ' + line)};" for line in evidence)
    return " ".join(
        (
            f"st() {{ case $1 in {cases} esac; }};",
            # A zombie (state Z) holds nothing any more: it counts as gone.
            'now() { LC_ALL=C ps -o stat=,lstart= -p "$1" 2>/dev/null'
            " | sed -n 's/^ *[^Z ][^ ]*  *//p' | sed 's/ *$//'; };",
            'same() { [ "$(now "$1")" = "$(st "$1")" ]; };',
            'alive() { l=; for p in $1; do same $p && l="$l $p"; done; echo $l; };',
            'upto() { e=$(($(date +%s) + $2)); l=$(alive "$1");',
            'while [ -n "$l" ] && [ "$(date +%s)" -lt "$e" ]; do sleep 1; l=$(alive "$l"); done;',
            "echo $l; };",
            said,
            "t=;",
            f"for p in {pids}; do",
            'if [ -z "$(now $p)" ]; then echo "pid $p: already gone";',
            'elif ! same $p; then echo "pid $p: started $(now $p), not $(st $p): another process'
            ' now, left alone";',
            'elif kill -TERM $p; then echo "pid $p: SIGTERM"; t="$t $p"; fi; done;',
            f'left=$(upto "$t" {math.ceil(wait)});',
            'for p in $left; do same $p && kill -KILL $p && echo "pid $p: SIGKILL after'
            f' {wait:g}s"; done;',
            f'stuck=$(upto "$left" {KILL_WAIT});',
            '[ -z "$stuck" ] || { echo "still running after SIGKILL: $stuck (stuck in the'
            ' kernel?)" >&2; exit 1; };',
            'echo "orphans ended:$t"',
        )
    )


def _check(ctx: ActionContext) -> str | None:
    """The orphans are gone (no process with the same PID and start time is listed) and their
    GPU memory with them. A PID listed without a start time (ps no longer saw it) still holds
    its GPU memory as far as the driver says."""
    facts: GpuProcessesFacts | None = ctx.facts.get("gpu_processes")
    if facts is None:
        return "gpu_processes gave no facts"
    # this attempt's plan, or, settling an interrupted one, what that attempt journaled
    items = planned_before(ctx, PIDS_KEY) or remembered(ctx, PIDS_KEY)
    planned = dict(_target(item) for item in items)
    still = sorted(
        {
            process.pid
            for process in facts.processes
            if process.pid in planned and process.started in (None, planned[process.pid])
        }
    )
    if not still:
        return None
    held = sum(p.used_memory_mib or 0 for p in facts.processes if p.pid in still)
    return f"orphan process(es) still on the GPUs: {still} ({held} MiB held)"


def _target(item: str) -> tuple[int, str]:
    """One `PID@start` of the plan's `before` (ps lstart has no commas)."""
    pid, _, started = item.partition("@")
    return int(pid), started


ACTIONS = (
    Action(
        name="kill_orphans",
        validate=params_checker({"wait": duration}),
        summary="end GPU processes no Slurm job on the node owns (a crashed job's left-overs):"
        " SIGTERM, wait, SIGKILL; never a running job's process",
        plan=_plan,
        params={"wait": f"how long SIGTERM has before SIGKILL (default {DEFAULT_WAIT:g}s)"},
        requires=("gpu_processes",),
        optional=("slurm_node",),
        verify=("gpu_processes",),
        check=_check,
    ),
)
