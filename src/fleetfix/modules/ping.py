"""`ping`: the node answers over the transport (one trivial command), as Ansible's ping
answers once its module ran there; registers `ping: DATA` (`pong` by default)."""

from __future__ import annotations

from fleetfix.engine.hoststep import Outcome
from fleetfix.modules.call import ModuleCall, ModuleFailed


async def ping(call: ModuleCall) -> Outcome:
    """Runs in --check too (Ansible's ping supports check mode); `data: crash` fails the step,
    as Ansible's module raises for it (its own tests use that to make a failure)."""
    data = str(call.params["data"])
    await call.checked("true", "ping")
    if data == "crash":
        raise ModuleFailed("boom")
    return call.outcome(ping=data)
