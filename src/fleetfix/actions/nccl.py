"""nccl_tests: run all_reduce_perf (and friends) and hold the result to a bandwidth floor.

An active test (it loads every GPU and the fabric): the engine runs it only on a node taken
out of scheduling, drained or in a fleetfix reservation (engine/gates.py; slurm_reserve)."""

from __future__ import annotations

import shlex
from typing import Any

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import busy_reason, choice, duration, number, params_checker, seconds
from fleetfix.actions.pairs import PAIR_MODES, pick_peer
from fleetfix.knowledge.nccl import floor_for
from fleetfix.probes import nccl_tests
from fleetfix.probes.gpu_facts import NvidiaSmiFacts
from fleetfix.probes.nccl_tests import NcclTestsFacts, meets_threshold

PROBE_PARAMS = ("ops", "args", "gpus", "bin_dir")


def min_busbw(ctx: ActionContext, *, multi_node: bool | None = None) -> float | None:
    """The floor: the step's `min_busbw`, else inventory `nccl_min_busbw` (or
    `nccl_min_busbw_multi_node` across nodes), else the table for the GPU model."""
    if multi_node is None:
        multi_node = bool(ctx.params.get("pair") or ctx.params.get("peer"))
    inventory_var = "nccl_min_busbw_multi_node" if multi_node else "nccl_min_busbw"
    for value in (ctx.params.get("min_busbw"), ctx.vars.get(inventory_var)):
        if value is not None:
            return float(value)
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if smi is None or not smi.gpus:
        return None
    return floor_for(smi.gpus[0].name, smi.gpu_count, multi_node=multi_node)


def _plan(ctx: ActionContext) -> ActionPlan:
    busy = busy_reason(ctx)
    if busy is not None:
        return ActionPlan(refused=f"{busy}; nccl-tests would compete with them")
    timeout = seconds(ctx.params.get("timeout"), 900.0)
    peer = _peer(ctx)
    if peer is None and (ctx.params.get("pair") or ctx.params.get("peer")):
        return ActionPlan(notes=("no peer available for a multi-node test: skipped",))
    command = multi_node_command(ctx, peer) if peer else nccl_tests.command(_probe_params(ctx))
    floor = min_busbw(ctx, multi_node=peer is not None)
    where = f"with {peer}" if peer else "on this node"
    note = f"{where}; floor {floor:g} GB/s" if floor is not None else f"{where}; no floor known"
    run = PlannedCommand(command, f"run nccl-tests {where}", timeout=timeout)
    return ActionPlan(commands=(run,), notes=(note,))


def _probe_params(ctx: ActionContext) -> dict[str, Any]:
    return {k: ctx.params[k] for k in PROBE_PARAMS if k in ctx.params}


def _peer(ctx: ActionContext) -> str | None:
    if ctx.params.get("peer"):
        return str(ctx.params["peer"])
    mode = ctx.params.get("pair")
    if not mode:
        return None
    hosts = [str(h) for h in ctx.vars.get("ansible_play_hosts", ())]
    hostvars = ctx.vars.get("hostvars", {})
    prefer = ctx.params.get("prefer_passed")
    return pick_peer(ctx.host, hosts, hostvars, str(mode), str(prefer) if prefer else None)


def multi_node_command(ctx: ActionContext, peer: str) -> str:
    """One all_reduce_perf across this node and `peer`: one rank per GPU, via mpirun."""
    bin_dir = str(ctx.params.get("bin_dir", "")).strip().rstrip("/")
    binary = shlex.quote(f"{bin_dir}/all_reduce_perf" if bin_dir else "all_reduce_perf")
    args = nccl_tests.quoted_args(ctx.params.get("args", nccl_tests.DEFAULT_ARGS))
    me, other = shlex.quote(ctx.host), shlex.quote(peer)
    return (
        "g=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); "
        f"echo {shlex.quote(f'+ {binary} {args} -g 1')}; "
        f"mpirun -np $((2*g)) -H {me}:$g,{other}:$g --bind-to none {binary} {args} -g 1 2>&1"
    )


def _check(ctx: ActionContext) -> str | None:
    facts: NcclTestsFacts | None = ctx.facts.get("nccl_tests")
    if facts is None:
        return "nccl-tests output was not parsed"
    if facts.failed:
        return "nccl-tests failed: " + "; ".join(facts.failures[:2])
    floor = min_busbw(ctx)
    if floor is not None and not meets_threshold(facts, floor):
        return f"avg busbw {facts.avg_busbw} GB/s below the floor {floor:g} GB/s"
    if facts.wrong_total:
        return f"{facts.wrong_total} wrong values (data corruption)"
    return None


ACTIONS = (
    Action(
        name="nccl_tests",
        validate=params_checker(
            {"timeout": duration, "min_busbw": number, "pair": choice(*PAIR_MODES)}
        ),
        summary="run nccl-tests on the node and compare busbw with the floor for its GPU model",
        plan=_plan,
        params={
            "ops": "ops to run (default all_reduce_perf)",
            "args": "arguments for each op (default -b 8 -e 8G -f 2 -g <gpus>)",
            "gpus": "GPUs per process",
            "bin_dir": "where the nccl-tests binaries live",
            "min_busbw": "floor in GB/s (default: inventory nccl_min_busbw, else the model table)",
            "timeout": "how long the test may take (15m)",
            "pair": "multi-node test, peer chosen by topology: same_leaf, other_leaf, other_spine",
            "peer": "multi-node test with this host",
            "prefer_passed": "with pair: skip peers whose result under this register name failed",
            "allow_busy": "run even with GPU processes or Slurm jobs",
        },
        optional=("nvidia_smi", "gpu_processes", "slurm_node"),
        check=_check,
        result_probe="nccl_tests",
        changes_state=False,
        active_test=True,
        repeatable=True,  # a test changes nothing: a resumed run runs it again
    ),
)
