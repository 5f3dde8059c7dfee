"""`raw`: the command as typed, through the remote shell (or `executable`), like Ansible's raw:
no creates/removes, always "changed", the registered value is rc/stdout/stderr."""

from __future__ import annotations

from fleetfix.engine.hoststep import Outcome
from fleetfix.modules.call import ModuleCall, quoted


async def raw(call: ModuleCall) -> Outcome:
    command = str(call.params["_raw_params"])
    executable = call.params["executable"]
    if executable:
        command = f"{quoted(str(executable))} -c {quoted(command)}"
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
