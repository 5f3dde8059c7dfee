"""`raw`: the command as typed, through the remote shell (or `executable`), like Ansible's raw:
no creates/removes, always "changed", the registered value is rc/stdout/stderr."""

from __future__ import annotations

from fleetfix.engine.disruptive import command_action, disruptive_command
from fleetfix.engine.hoststep import Outcome
from fleetfix.engine.remediate import run_command_action
from fleetfix.modules.call import ModuleCall, quoted


async def raw(call: ModuleCall) -> Outcome:
    command = str(call.params["_raw_params"])
    executable = call.params["executable"]
    if executable:
        command = f"{quoted(str(executable))} -c {quoted(command)}"
    what = disruptive_command(command)
    if what is not None:  # a reboot, driver unload or GPU reset: an action's gates
        return await run_command_action(call.hs, command_action(command, what), call.handlers)
    if call.dry:  # Ansible's raw does not support check mode: it is skipped
        return Outcome(skipped=True, message=f"check mode: would run: {command}")
    result = await call.run(command)
    # Ansible's raw registers its output as the node printed it: the trailing newline stays.
    outcome = Outcome(
        changed=True, commands=[result], data={"stdout": result.stdout, "stderr": result.stderr}
    )
    if result.timed_out:
        outcome.failed, outcome.message = True, "command timed out and was killed"
    elif result.rc != 0:
        outcome.failed, outcome.message = True, f"non-zero return code {result.rc}"
    return outcome
