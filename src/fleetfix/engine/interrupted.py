"""Settling an action an interrupted run started: re-verify it, never repeat it blindly.

The intent record is journaled before the first command leaves, so after a crash fleetfix
knows every action that may have run. On `--resume`:

- a reboot is judged by the boot id it journaled: changed (or the host is away) means it
  happened, so wait for the host and verify; the old boot id still there `resume_grace` seconds
  after the intent means it never left the controller: the intent is marked undelivered (it
  does not count against max_attempts) and the action runs as in a clean run;
- any other action is re-verified; if the fault is gone it counts as done. If not, a
  repeatable action (a drain: its plan reads the node's state) runs again; any other one fails
  with the reason, and is not repeated: it may have run, and a human should look.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fleetfix.actions.base import Action
from fleetfix.engine.hoststep import HostStep, Outcome
from fleetfix.engine.reboot import back_with_new_boot, was_delivered
from fleetfix.engine.verification import Handlers, action_context, verify
from fleetfix.events import ActionTaken
from fleetfix.results import OpenIntent


async def settle(
    hs: HostStep,
    action: Action,
    params: Mapping[str, Any],
    handlers: Handlers,
    intent: OpenIntent,
) -> Outcome | None:
    """The outcome of an interrupted action, or None when it provably never ran (run it)."""
    before = intent.evidence.get("boot_id")
    if before:
        if not await was_delivered(hs, before, intent.at):
            _forget(hs, intent)
            return None
        result = await back_with_new_boot(hs, "reboot (resumed)", before, time.monotonic())
        if result.timed_out:
            failed = Outcome(failed=True, changed=True, message=f"{action.name}: {result.stderr}")
            return _finish(hs, action, failed)
    context = action_context(hs, params, {}, interrupted=intent.evidence)
    problem = await verify(hs, action, handlers, context)
    if problem is None:
        message = f"{action.name}: started by the interrupted run; verified, not repeated"
        return _finish(hs, action, Outcome(changed=action.changes_state, message=message))
    if action.repeatable and not before:
        _forget(hs, intent)  # it runs again as a new attempt; the old row must not count twice
        return None
    message = (
        f"{action.name}: started by the interrupted run and not repeated (it may have run): "
        f"verification failed: {problem}"
    )
    # It may have run (a reboot did): a rescue must not say nothing happened.
    return _finish(hs, action, Outcome(failed=True, changed=action.changes_state, message=message))


def _forget(hs: HostStep, intent: OpenIntent) -> None:
    memory = hs.ctx.options.memory
    if memory is not None:
        memory.mark_undelivered(intent.record)


def _finish(hs: HostStep, action: Action, outcome: Outcome) -> Outcome:
    """Close the interrupted intent in the journal with this outcome."""
    hs.ctx.safety.replay_out(hs.state.name, action)
    hs.action_event(ActionTaken, action.name, failed=outcome.failed)
    return outcome
