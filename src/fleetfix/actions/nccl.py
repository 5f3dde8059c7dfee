"""nccl_tests: run all_reduce_perf (and friends) and hold the result to a bandwidth floor."""

from __future__ import annotations

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import busy_reason, duration, number, params_checker, seconds
from fleetfix.knowledge.nccl import floor_for
from fleetfix.probes import nccl_tests
from fleetfix.probes.gpu_facts import NvidiaSmiFacts
from fleetfix.probes.nccl_tests import NcclTestsFacts, meets_threshold

PROBE_PARAMS = ("ops", "args", "gpus", "bin_dir")


def min_busbw(ctx: ActionContext) -> float | None:
    """The floor: the step's `min_busbw`, else inventory `nccl_min_busbw`, else the model table."""
    for value in (ctx.params.get("min_busbw"), ctx.vars.get("nccl_min_busbw")):
        if value is not None:
            return float(value)
    smi: NvidiaSmiFacts | None = ctx.facts.get("nvidia_smi")
    if smi is None or not smi.gpus:
        return None
    return floor_for(smi.gpus[0].name, smi.gpu_count)


def _plan(ctx: ActionContext) -> ActionPlan:
    busy = busy_reason(ctx)
    if busy is not None:
        return ActionPlan(refused=f"{busy}; nccl-tests would compete with them")
    params = {k: ctx.params[k] for k in PROBE_PARAMS if k in ctx.params}
    timeout = seconds(ctx.params.get("timeout"), 900.0)
    command = nccl_tests.command(params)
    floor = min_busbw(ctx)
    note = f"floor {floor:g} GB/s" if floor is not None else "no bandwidth floor known"
    run = PlannedCommand(command, "run nccl-tests", timeout=timeout)
    return ActionPlan(commands=(run,), notes=(note,))


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
        validate=params_checker({"timeout": duration, "min_busbw": number}),
        summary="run nccl-tests on the node and compare busbw with the floor for its GPU model",
        plan=_plan,
        params={
            "ops": "ops to run (default all_reduce_perf)",
            "args": "arguments for each op (default -b 8 -e 8G -f 2 -g <gpus>)",
            "gpus": "GPUs per process",
            "bin_dir": "where the nccl-tests binaries live",
            "min_busbw": "floor in GB/s (default: inventory nccl_min_busbw, else the model table)",
            "timeout": "how long the test may take (15m)",
            "allow_busy": "run even with GPU processes or Slurm jobs",
        },
        optional=("nvidia_smi", "gpu_processes", "slurm_node"),
        check=_check,
        result_probe="nccl_tests",
    ),
)
