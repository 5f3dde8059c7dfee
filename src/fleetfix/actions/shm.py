"""clean_shm: remove stale NCCL segments from /dev/shm that nobody holds open."""

from __future__ import annotations

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import duration, params_checker, quote_all, seconds
from fleetfix.probes.shm import NCCL_PATTERNS, ShmFacts, stale_files

DEFAULT_AGE = 3600.0


def _patterns(ctx: ActionContext) -> tuple[str, ...]:
    raw = ctx.params.get("patterns")
    if raw is None:
        return tuple(NCCL_PATTERNS)
    return (str(raw),) if isinstance(raw, str) else tuple(str(p) for p in raw)


def _stale(ctx: ActionContext, facts: ShmFacts) -> list[str]:
    age = seconds(ctx.params.get("older_than"), DEFAULT_AGE)
    return [f.path for f in stale_files(facts, age, _patterns(ctx))]


def _plan(ctx: ActionContext) -> ActionPlan:
    facts: ShmFacts = ctx.facts["shm"]
    if not facts.open_scan_complete:
        return ActionPlan(refused="cannot tell which files are open (not root?); nothing removed")
    stale = _stale(ctx, facts)
    if not stale:
        return ActionPlan(notes=(f"no stale files ({facts.file_count} in {facts.mount})",))
    freed = sum(f.size_bytes for f in facts.files if f.path in stale)
    command = f"rm -f -- {quote_all(stale)}"
    note = f"{len(stale)} stale files, {freed} bytes"
    return ActionPlan(commands=(PlannedCommand(command, f"remove {note}"),), notes=(note,))


def _check(ctx: ActionContext) -> str | None:
    facts = ctx.facts.get("shm")
    if facts is None:
        return "shm probe gave no facts"
    left = _stale(ctx, facts)
    return f"{len(left)} stale files still present: {left[:3]}" if left else None


ACTIONS = (
    Action(
        name="clean_shm",
        repeatable=True,
        validate=params_checker({"older_than": duration}),
        summary="remove /dev/shm NCCL segments no process holds open and older than a threshold",
        plan=_plan,
        params={
            "older_than": "minimum age (default 1h)",
            "patterns": "glob(s) of file names to consider (default NCCL's)",
        },
        requires=("shm",),
        verify=("shm",),
        check=_check,
    ),
)
