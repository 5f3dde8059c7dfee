"""Settling an action an interrupted run started: re-verify it, never repeat it blindly.

The intent record is journaled before the first command leaves, so after a crash fleetfix
knows every action that may have run. On `--resume`:

- a reboot is judged by the boot id it journaled: changed (or the host is away) means it
  happened, so wait for the host and verify; the old boot id still there `resume_grace` seconds
  after the intent means it never left the controller: the intent is marked undelivered (it
  does not count against max_attempts) and the action runs as in a clean run;
- an action that declares its params may simply be applied again (`Action.settle` RERUN: a
  unit's start, stop, enable or mask) runs again, as a new attempt;
- any other action is re-verified; if the fault is gone it counts as done. If not, a
  repeatable action (a drain: its plan reads the node's state) runs again; any other one fails
  with the reason, and is not repeated: it may have run, and a human should look.

An action whose connection dropped under one of its commands, in this run, is in the same
doubt and is judged by the same evidence (`judge`), with one difference: it is never run again
in this run, on a link that drops; what the evidence cannot settle needs a human.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.actions.base import Action, Settle
from fleetfix.engine.hoststep import HostStep, Outcome
from fleetfix.engine.reboot import back_with_new_boot, was_delivered
from fleetfix.engine.verification import (
    VERIFIED_KEY,
    Handlers,
    action_context,
    verified,
    verify,
)
from fleetfix.events import ActionTaken
from fleetfix.results import CommandResult, OpenIntent
from fleetfix.transport.pool import GAVE_UP


@dataclass(frozen=True, slots=True)
class Judged:
    """What the evidence says of an action that may have run: its outcome, or None when it
    provably never ran or a repeatable action's fault is still there, with `why`."""

    outcome: Outcome | None
    why: str = ""


@dataclass(frozen=True, slots=True)
class _Doubt:
    """Why an action may have run, in the words of its outcome."""

    verified: str
    unverified: str
    waiting: str


_INTERRUPTED = _Doubt(
    "{action}: started by the interrupted run; verified, not repeated",
    "{action}: started by the interrupted run and not repeated (it may have run): "
    "verification failed: {problem}",
    "reboot (resumed)",
)
_LOST = _Doubt(
    "{action}: connection lost during it; verified, not repeated",
    "connection lost during {action}; not repeated: " + GAVE_UP + " (verification failed: "
    "{problem})",
    "reboot (connection lost)",
)


async def settle(
    hs: HostStep,
    action: Action,
    params: Mapping[str, Any],
    handlers: Handlers,
    intent: OpenIntent,
) -> Outcome | None:
    """The outcome of an interrupted action, or None when it is to run (again): it provably
    never ran, or the action declares that these params may simply be applied again
    (`Action.settle`: RERUN)."""
    if action.settle is not None and action.settle(params) is Settle.RERUN:
        _forget(hs, intent)  # a new attempt; the interrupted one no longer counts
        return None
    judged = await judge(
        hs, action, params, handlers, evidence=intent.evidence, at=intent.at, doubt=_INTERRUPTED
    )
    if judged.outcome is None:
        _forget(hs, intent)  # it runs again as a new attempt; the old row must not count twice
        return None
    return _finish(hs, action, judged.outcome)


async def lost_during(
    hs: HostStep,
    action: Action,
    params: Mapping[str, Any],
    handlers: Handlers,
    *,
    evidence: Mapping[str, str],
    at: float,
) -> Outcome:
    """The outcome of an action whose connection dropped under one of its commands in this
    run (`at`: when it started): judged by evidence, never run again; verified when it was
    (VERIFIED_KEY set), else failed, needing a human."""
    judged = await judge(hs, action, params, handlers, evidence=evidence, at=at, doubt=_LOST)
    outcome = judged.outcome
    if outcome is None:
        message = f"connection lost during {action.name}; not repeated: {GAVE_UP} ({judged.why})"
        return Outcome(failed=True, changed=action.changes_state, message=message)
    if not outcome.failed:
        outcome.data[VERIFIED_KEY] = verified(hs, action)
    return outcome


async def judge(
    hs: HostStep,
    action: Action,
    params: Mapping[str, Any],
    handlers: Handlers,
    *,
    evidence: Mapping[str, str],
    at: float,
    doubt: _Doubt,
) -> Judged:
    """Did an action that may have run (started at epoch `at`) happen and work? The boot id
    it journaled for a reboot, else its verification; see the module docstring."""
    before = evidence.get("boot_id")
    came_back: list[CommandResult] = []
    if before:
        if not await was_delivered(hs, before, at):
            return Judged(None, "the boot id did not change: it never happened")
        result = await back_with_new_boot(hs, doubt.waiting, before, time.monotonic())
        if result.timed_out:
            failed = Outcome(failed=True, changed=True, message=f"{action.name}: {result.stderr}")
            return Judged(failed)
        # The node came back with a new boot id: the reboot took effect, as far as what comes
        # next is concerned (an escalation ladder's next rung, a rescue's "persists after a
        # warm reboot"), exactly as when this run sent it.
        came_back.append(result)
    context = action_context(hs, params, {}, interrupted=evidence)
    problem = await verify(hs, action, handlers, context)
    if problem is None:
        message = doubt.verified.format(action=action.name)
        done = Outcome(changed=action.changes_state, message=message)
        done.commands.extend(came_back)
        return Judged(done)
    if action.repeatable and not before:
        return Judged(None, f"verification failed: {problem}")
    message = doubt.unverified.format(action=action.name, problem=problem)
    # It may have run (a reboot did): a rescue must not say nothing happened.
    failed = Outcome(failed=True, changed=action.changes_state, message=message)
    failed.commands.extend(came_back)
    return Judged(failed)


def _forget(hs: HostStep, intent: OpenIntent) -> None:
    memory = hs.ctx.options.memory
    if memory is not None:
        memory.mark_undelivered(intent.record)


def _finish(hs: HostStep, action: Action, outcome: Outcome) -> Outcome:
    """Close the interrupted intent in the journal with this outcome."""
    hs.ctx.safety.replay_out(hs.state.name, action)
    hs.action_event(ActionTaken, action.name, failed=outcome.failed)
    return outcome
