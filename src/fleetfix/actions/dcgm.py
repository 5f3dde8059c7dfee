"""dcgm_diag: DCGM's active diagnostics (`dcgmi diag -r 2|3|4` or a named test), judged per
test and GPU by the dcgm_diag probe's parser.

Level 2 and up run CUDA workloads on every GPU (PCIe, memory, stress, power): an active test.
The engine runs it only on a node out of scheduling (engine/gates.py); the `dcgm_diag` probe
keeps the passive level 1 (deployment checks) and refuses the rest, so no playbook reaches an
active diagnostic around that gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import busy_reason, choice, duration, params_checker, seconds
from fleetfix.probes.dcgm_diag import DcgmDiagFacts, Overall, diag_command, is_passive

DEFAULT_TIMEOUTS = {"2": 900.0, "3": 3600.0, "4": 10800.0}
"""DCGM's own guidance: level 2 takes minutes, 3 up to half an hour, 4 one to two hours."""


def _level(params: Mapping[str, Any]) -> str:
    return str(params.get("level", "2")).strip() or "2"


def _validate(params: Mapping[str, Any]) -> str | None:
    if is_passive(_level(params)):
        return f"level {_level(params)} is passive: read it with the dcgm_diag probe"
    return params_checker({"timeout": duration, "format": choice("json", "table")})(params)


def _plan(ctx: ActionContext) -> ActionPlan:
    busy = busy_reason(ctx)
    if busy is not None:
        return ActionPlan(refused=f"{busy}; dcgmi diag would compete with them")
    level = _level(ctx.params)
    timeout = seconds(ctx.params.get("timeout"), DEFAULT_TIMEOUTS.get(level, 3600.0))
    params = {**ctx.params, "level": level}
    run = PlannedCommand(
        diag_command(params), f"run dcgmi diag -r {level}", timeout=timeout, ignore_rc=True
    )
    return ActionPlan(commands=(run,))


def _check(ctx: ActionContext) -> str | None:
    facts: DcgmDiagFacts | None = ctx.facts.get("dcgm_diag")
    if facts is None:
        return "dcgmi diag output was not parsed"
    if facts.overall is Overall.ERROR:
        return f"dcgmi diag did not run: {facts.runtime_error or 'error'}"
    if facts.overall is Overall.FAIL:
        gpus = ", ".join(str(g) for g in facts.failed_gpus) or "?"
        return f"dcgmi diag failed: {', '.join(facts.failed_tests) or 'errors'} (GPU {gpus})"
    if facts.overall is Overall.INCOMPLETE:
        return "dcgmi diag output is incomplete"
    return None


ACTIONS = (
    Action(
        name="dcgm_diag",
        validate=_validate,
        summary="run DCGM's active diagnostics (dcgmi diag -r 2/3/4) and judge every test",
        plan=_plan,
        params={
            "level": "2 (default), 3, 4, or an active test name (pcie, memory, diagnostic, ...)",
            "gpus": "comma-separated GPU ids for -i (default: all)",
            "format": "json (default) or table",
            "timeout": "how long the run may take (default by level: 15m, 1h, 3h)",
        },
        optional=("gpu_processes", "slurm_node"),
        check=_check,
        result_probe="dcgm_diag",
        changes_state=False,
        active_test=True,
        repeatable=True,  # a test changes nothing: a resumed run runs it again
    ),
)
