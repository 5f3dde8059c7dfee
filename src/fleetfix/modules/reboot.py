"""`reboot`: Ansible's arguments, fleetfix's reboot action underneath.

The step runs as `action: reboot`, so every engine invariant holds for it as for the shipped
playbooks: a node someone else drained is left alone, a busy node is refused, the intent is
journaled with the boot id before the reboot is sent, topology caps and the repair budget
apply, and the reboot counts as done only when the node is back with a new boot id (within
`reboot_timeout`). `test_command` is then retried until it succeeds, as Ansible does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from fleetfix.engine.hoststep import Outcome
from fleetfix.engine.remediate import run_action
from fleetfix.modules.call import ModuleCall
from fleetfix.playbook.model import Duration, StepKind

REBOOT_ACTION = "reboot"


async def reboot(call: ModuleCall) -> Outcome:
    params = call.params
    started = time.monotonic()
    step = dataclasses.replace(
        call.hs.step,
        kind=StepKind.ACTION,
        args={"name": REBOOT_ACTION, "params": {}},
        expect_unreachable=Duration(params["reboot_timeout"]),
    )
    if params["pre_reboot_delay"] and not call.dry:
        await asyncio.sleep(params["pre_reboot_delay"])
    outcome = await run_action(call.hs.with_step(step), call.handlers)
    rebooted = outcome.changed and not outcome.failed and not call.dry
    if rebooted:
        await asyncio.sleep(params["post_reboot_delay"])
        problem = await _test_command(call, started)
        if problem is not None:
            outcome.failed, outcome.message = True, problem
    outcome.data.update(rebooted=rebooted, elapsed=int(time.monotonic() - started))
    return outcome


async def _test_command(call: ModuleCall, started: float) -> str | None:
    """Run test_command until it succeeds, within what is left of reboot_timeout."""
    command = call.params["test_command"]
    if not command:
        return None
    deadline = started + call.params["reboot_timeout"]
    while True:
        result = await call.run(str(command), timeout=max(1.0, deadline - time.monotonic()))
        if result.ok:
            return None
        if time.monotonic() >= deadline:
            said = (result.stderr.strip() or result.stdout.strip())[:200]
            return f"reboot: test_command failed after the reboot: {said or result.rc}"
        await asyncio.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
