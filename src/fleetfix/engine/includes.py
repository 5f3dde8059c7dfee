"""What an include_tasks/include_role brought in on one host, ready for the play runner.

The include step itself ran like any step (its `when` once, its loop per item: engine.kinds
resolved and read the file there); here its verdict becomes the steps to run: per inclusion
(one, or one per loop item that was not skipped) the included steps keyed under the include's
own key and item, so a file included twice, or once per item, journals each step on its own
and `--resume` replays exactly the ones that finished.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fleetfix.engine.context import RunContext
from fleetfix.engine.kinds import INCLUDED_KEY
from fleetfix.engine.role_includes import ROLE_REQUEST_KEY, request_from
from fleetfix.playbook.imports import inherit
from fleetfix.playbook.model import Step
from fleetfix.playbook.roles import in_role
from fleetfix.results import Status, StepResult

_ITEM_NAMES = ("ansible_loop_var", "ansible_index_var")


@dataclass(frozen=True, slots=True)
class Inclusion:
    """One inclusion on one host: its steps, and the variables they see on top (the
    include's vars and the loop item's)."""

    steps: tuple[Step, ...]
    variables: dict[str, Any]


def inclusions(ctx: RunContext, include: Step, result: StepResult) -> list[Inclusion]:
    """The inclusions the include's verdict on this host calls for (none when it was skipped
    or failed)."""
    if result.status not in (Status.OK, Status.CHANGED):
        return []
    if include.loop is None:
        return [_inclusion(ctx, include, f"{include.key}>", {}, result.data)]
    found: list[Inclusion] = []
    control = include.loop_control
    names = (control.loop_var, control.index_var, *_ITEM_NAMES)
    for index, item in enumerate(result.data.get("results") or ()):
        if not isinstance(item, dict) or item.get("skipped") or INCLUDED_KEY not in item:
            continue
        rendered = (item.get("ansible_loop_var"), item.get("ansible_index_var"))  # templated
        item_vars = {n: item[n] for n in (*names, *rendered) if isinstance(n, str) and n in item}
        found.append(_inclusion(ctx, include, f"{include.key}[{index}]>", item_vars, item))
    return found


def _inclusion(
    ctx: RunContext, include: Step, site: str, item_vars: dict[str, Any], data: Any
) -> Inclusion:
    steps = include.args.get("steps")
    if "run_time" in include.args:  # a templated role: engine.role_includes read it
        steps = _run_time_role(ctx, include, data)
    elif steps is None:  # a templated file: engine.kinds read it (the loader keeps it)
        loader = ctx.options.task_loader
        steps = loader(str(data[INCLUDED_KEY])) if loader is not None else ()
        steps = tuple(inherit(step, include.args.get("apply") or {}) for step in steps)
        if include.role is not None:  # a file a role includes is the role's
            steps = tuple(in_role(step, include.role) for step in steps)
    return Inclusion(tuple(under(step, site) for step in steps), {**include.vars, **item_vars})


def _run_time_role(ctx: RunContext, include: Step, data: Any) -> tuple[Step, ...]:
    """The role this host's include_role named (read already, when the include ran: the
    loader keeps it), with the include's apply: keywords."""
    loader = ctx.options.role_loader
    chosen = data.get(ROLE_REQUEST_KEY) if isinstance(data, dict) else None
    if loader is None or not isinstance(chosen, dict):
        return ()
    role = loader(request_from(include, chosen))
    return tuple(inherit(step, include.args.get("apply") or {}) for step in role.steps)


def under(step: Step, site: str) -> Step:
    """The step (and a block's steps, at any depth) keyed under an inclusion's site."""
    return replace(
        step,
        via=site + step.via,
        block=tuple(under(child, site) for child in step.block),
        rescue=tuple(under(child, site) for child in step.rescue),
        always=tuple(under(child, site) for child in step.always),
    )
