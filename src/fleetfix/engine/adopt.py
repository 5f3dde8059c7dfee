"""Runs adopt what abandoned runs left: a node a fleetfix run drained and never settled.

A controller killed after it drained (and perhaps rebooted) a node leaves it drained with a
`fleetfix:` reason that no playbook step will ever act on: the fault may be gone (the reboot
fixed it), so the next run's playbook says "nothing to do" and moves on, while the node stays
out of service, counted against the repair budget and its rack's cap. So a run settles every
host it covers that an abandoned run left: one this journal knows that stopped in the middle
(never finished, or interrupted) and whose controller is gone. Before its plays it takes the
journal's out-of-service rows of such runs; after them, the drain reasons it read that name
one (`(run ID)`) and are not final (RMA, a human's next step, "not returned to service",
"pending"). A run that finished left its drains on purpose (maintenance, an RMA), and a run
another journal recorded cannot be judged here: neither is adopted. The host is validated and
returned to service by `slurm_resume` (every GPU back, the fault gone; it takes the node's
lease first), or left drained with the reason that says why; either way its state is settled
and it no longer counts against the repair budget.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fleetfix.engine.context import RunContext
from fleetfix.errors import SourcePosition
from fleetfix.playbook.model import Play, Step, StepKind

FINAL_REASON = re.compile(
    r"fleetfix: .*(needs (RMA|a human)|RMA candidate|not returned to service|pending)"
)
"""A fleetfix drain reason a human acts on (or that waits for jobs): never adopted."""
PLACE = "<fleetfix: adopt what dead runs left>"
SLURM = "fleetfix_adopt_slurm"
"""The registered name of the adoption's fresh Slurm read (not a name a playbook uses)."""


def candidates(ctx: RunContext, hosts: Sequence[str], *, read: bool) -> dict[str, str]:
    """Hosts of this run an abandoned run left drained -> that run. Before the plays (`read`
    False): from the journal's out-of-service rows, so a node a dead run stranded is back (or
    settled) before this run's own repairs ask for room under the budget and the caps. After
    them (`read` True): from the Slurm reasons the run read (a node whose row is gone)."""
    memory = ctx.options.memory
    found: dict[str, str] = {}
    if not read:
        if memory is not None:
            found.update(memory.stranded(hosts))
        return {h: run for h, run in found.items() if _settleable(ctx, h)}
    gone: dict[str, bool] = {}
    for host in hosts:
        facts = ctx.host_state(host).probe_facts.get("slurm_node")
        run = _left_by(ctx, facts, gone)
        if run is not None:
            found[host] = run
    return {h: run for h, run in found.items() if _settleable(ctx, h)}


def _left_by(ctx: RunContext, facts: Any, gone: dict[str, bool]) -> str | None:
    if facts is None or not getattr(facts, "reason_is_fleetfix", False):
        return None
    if not (facts.drained or facts.down or facts.draining):
        return None
    if FINAL_REASON.search(facts.reason or ""):
        return None
    run: str | None = getattr(facts, "fleetfix_run", None)
    memory = ctx.options.memory
    if run is None or run == ctx.options.run_id or memory is None:
        return None  # a drain a finished run meant, or one no journal here can tell about
    if run not in gone:
        gone[run] = memory.abandoned(run)
    return run if gone[run] else None


def _settleable(ctx: RunContext, host: str) -> bool:
    """Not a host this run already decided about: failed, unreachable, left, or still out."""
    state = ctx.host_state(host)
    return not (
        state.failed
        or state.unreachable
        or host in ctx.result.left
        or host in ctx.result.leased
        or host in ctx.safety.out
    )


def adoption_play(left_by: dict[str, str]) -> Play:
    """One play: read Slurm fresh, then `slurm_resume` unless the reason is now a final one."""
    runs = ", ".join(sorted(set(left_by.values())))
    read = Step(
        kind=StepKind.PROBE,
        name="adopt: read the Slurm node a dead run left drained",
        args={"name": "slurm_node", "params": {}},
        position=SourcePosition(PLACE, 1),
        register=SLURM,
    )
    resume = Step(
        kind=StepKind.ACTION,
        name=f"adopt: validate and return to service what {runs} left",
        args={"name": "slurm_resume", "params": {}},
        position=SourcePosition(PLACE, 2),
        ignore_errors=True,  # a node that does not validate stays drained, saying why; the
        # run's own plays still work on it (it is not a failed host)
        when=(
            f"{SLURM}.facts.reason_is_fleetfix | default(false)",
            f"not ({SLURM}.facts.reason | default('') or '') is search('{FINAL_REASON.pattern}')",
        ),
    )
    return Play(name="settle nodes dead runs left drained", hosts="all", tasks=(read, resume))


def settle(ctx: RunContext, hosts: Sequence[str]) -> None:
    """The adopted hosts are settled (back in service, or drained with the reason that says
    why): off the repair budget. A disruptive action this run takes on one counts again."""
    memory = ctx.options.memory
    if memory is None:
        return
    for host in hosts:
        state = ctx.host_state(host)
        if not (state.failed or state.unreachable):
            memory.settled(host)
