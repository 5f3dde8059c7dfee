"""Looking again at parked hosts: is each one's wait over, still on, or past its deadline?"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fleetfix.engine.context import RunContext
from fleetfix.engine.kinds import leave
from fleetfix.engine.parking import Parked
from fleetfix.engine.verification import action_context
from fleetfix.errors import FleetfixError
from fleetfix.verdicts import LeftKind

REVISIT_POLL = 3.0
"""Seconds between two looks at the parked hosts once the play's batches are done."""


async def look_again(ctx: RunContext) -> list[str]:
    """Look once at every parked host (one read of its action's verify probes each, at once):
    those whose wait is over come back, in the order they were parked, to run the play again;
    those still waiting past their deadline are deferred; the rest stay parked."""
    parked = list(ctx.parking.waiting.values())
    waits = await asyncio.gather(*(_still_waiting(ctx, p) for p in parked))
    ready: list[str] = []
    now = time.time()
    for park, waiting in zip(parked, waits, strict=True):
        if waiting is None:
            ready.append(park.host)
        elif now >= park.until:
            defer(park)
        else:
            continue
        del ctx.parking.waiting[park.host]
    return ready


async def _still_waiting(ctx: RunContext, parked: Parked) -> str | None:
    """What the host still waits for, as its action's check says on fresh verify probes; None
    once the check passes, or when a probe cannot be read (the play, run again, decides then:
    its gates refuse what they cannot read)."""
    hs = parked.hs
    action = ctx.actions.get(parked.action)
    if action.check is None:
        return None
    facts: dict[str, Any] = {}
    async with ctx.forks:
        for name in action.verify:
            try:
                probed = await hs.probe(name, {})
            except FleetfixError:  # unreachable: the play's own steps say so
                return None
            if probed.failed or probed.skipped:
                return None
            facts[name] = hs.state.probe_facts[name]
    params = hs.render(dict(hs.step.args.get("params") or {}))
    return action.check(action_context(hs, params, facts))


def defer(parked: Parked) -> None:
    """The wait is over and the host is still busy: deferred, as an action's `defer_rc`
    defers it (its place under the caps freed; the next run finishes the work)."""
    leave(parked.hs, LeftKind.DEFERRED, parked.deferred())


def defer_all(ctx: RunContext, why: str) -> None:
    """The play stops with hosts still parked (a safety stop, end_play): each is deferred now,
    saying so."""
    for parked in list(ctx.parking.waiting.values()):
        leave(parked.hs, LeftKind.DEFERRED, parked.deferred(why))
    ctx.parking.waiting.clear()
