"""`systemd` (also `systemd_service`) and `service`: Ansible's arguments and return values,
every change made through fleetfix's `service` action so the engine's gates hold for it.

The unit is read first (`systemctl show -p ...`, and `systemctl is-enabled` when enabled or
masked is asked for), and what would change is decided from that as Ansible's systemd module
decides it (`changes`, pure). Nothing to change (`started` on an active unit) runs no gate and
nothing else. Anything to change runs as one `service` action step, like a shipped playbook's:
a node someone else drained in Slurm (or on the hands-off list) is left alone, a node whose
Slurm state cannot be read is refused, the intent is journaled before the first command, and
--check plans without running. `service` is `systemd` here: fleetfix manages services through
systemd only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fleetfix.actions.node import STATE_VERBS
from fleetfix.engine.hoststep import Outcome
from fleetfix.engine.remediate import run_action
from fleetfix.modules.call import ModuleCall, ModuleFailed, quoted
from fleetfix.playbook.model import StepKind

SERVICE_ACTION = "service"
PROPERTIES = (
    "Id",
    "Names",
    "Description",
    "LoadState",
    "LoadError",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "FragmentPath",
)
"""What `status` holds (Ansible's is every property `systemctl show` prints)."""
_RUNNING = frozenset({"active", "activating"})
_LOAD_FAILED = frozenset({"error", "bad-setting"})
_NOT_YET_ENABLED = frozenset({"enabled-runtime", "indirect", "alias"})
"""`is-enabled` answers for which Ansible still runs `systemctl enable`."""
_GLOB = ("*", "?", "[")
_STATE_OF_VERB = MappingProxyType({verb: state for state, verb in STATE_VERBS.items()})


@dataclass(frozen=True, slots=True)
class Unit:
    """What was read of a unit: `systemctl show` properties, `is-enabled` when asked."""

    status: Mapping[str, str]
    enabled_said: str = ""
    enabled_rc: int | None = None

    @property
    def found(self) -> bool:
        return self.status.get("LoadState", "not-found") != "not-found"

    @property
    def masked(self) -> bool:
        return self.enabled_said == "masked" or self.status.get("LoadState") == "masked"

    @property
    def enabled(self) -> bool:
        return self.enabled_rc == 0 and self.enabled_said not in _NOT_YET_ENABLED


@dataclass(frozen=True, slots=True)
class Changes:
    """What the module would change; None (or no verb) leaves that alone."""

    masked: bool | None = None
    enabled: bool | None = None
    verb: str | None = None
    """start, stop, restart or reload."""

    @property
    def any(self) -> bool:
        return self.masked is not None or self.enabled is not None or self.verb is not None


def parse_show(text: str) -> dict[str, str]:
    """`systemctl show`'s `Name=value` lines as a dict (blank lines between units ignored)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, equals, value = line.partition("=")
        if equals and name.strip():
            found[name.strip()] = value
    return found


def state_verb(wanted: str, active_state: str) -> str | None:
    """The systemctl verb that brings a unit in `active_state` to `wanted`, as Ansible's
    systemd module picks it: started/stopped only when not already so; restarted and
    reloaded always act, starting a unit that is not running."""
    running = active_state in _RUNNING
    if wanted == "started":
        return None if running else "start"
    if wanted == "stopped":
        return "stop" if running or active_state == "deactivating" else None
    return STATE_VERBS[wanted] if running else "start"


def changes(params: Mapping[str, Any], unit: Unit) -> Changes:
    """What to change on a unit for these parameters (pure: the unit as read).

    Raises:
        ModuleFailed: the unit is missing (for enabled or state) or failed to load.
    """
    name = params["name"]
    if (params["enabled"] is not None or params["state"] is not None) and not unit.found:
        raise ModuleFailed(f"Could not find the requested service {name}: host")
    load_state = unit.status.get("LoadState", "")
    if load_state in _LOAD_FAILED:
        why = unit.status.get("LoadError") or load_state
        raise ModuleFailed(f"Error loading unit file '{name}': {why}")
    masked = params["masked"]
    enabled = params["enabled"]
    state = params["state"]
    verb = None
    if state is not None:
        if "ActiveState" not in unit.status:
            raise ModuleFailed("Service is in unknown state", status=dict(unit.status))
        verb = state_verb(state, unit.status["ActiveState"])
    return Changes(
        masked=masked if masked is not None and masked != unit.masked else None,
        enabled=enabled if enabled is not None and enabled != unit.enabled else None,
        verb=verb,
    )


def action_params(params: Mapping[str, Any], found: Changes) -> dict[str, Any]:
    """The `service` action's parameters for these changes (only what changes)."""
    wanted: dict[str, Any] = {}
    if params["name"]:
        wanted["name"] = params["name"]
    for key in ("daemon_reload", "daemon_reexec", "no_block", "force"):
        if params.get(key):
            wanted[key] = True
    if found.masked is not None:
        wanted["masked"] = found.masked
    if found.enabled is not None:
        wanted["enabled"] = found.enabled
    if found.verb is not None:
        wanted["state"] = _STATE_OF_VERB[found.verb]
    return wanted


def return_values(params: Mapping[str, Any], unit: Unit | None) -> dict[str, Any]:
    """Ansible's return values besides `changed`: name, status, and enabled/state when asked."""
    values: dict[str, Any] = {
        "name": params["name"],
        "status": dict(unit.status) if unit is not None else {},
    }
    if params["enabled"] is not None:
        values["enabled"] = params["enabled"]
    state = params["state"]
    if state is not None:
        values["state"] = "started" if state in ("restarted", "reloaded") else state
    return values


async def systemd(call: ModuleCall) -> Outcome:
    params = call.params
    name = params["name"]
    if name is not None and any(mark in name for mark in _GLOB):
        mark = next(m for m in _GLOB if m in name)
        raise ModuleFailed(
            "This module does not currently support using glob patterns, found"
            f" '{mark}' in service name: {name}"
        )
    unit = await _read(call, name) if name else None
    found = changes(params, unit) if unit is not None else Changes()
    values = return_values(params, unit)
    if not found.any and not (params["daemon_reload"] or params["daemon_reexec"]):
        return call.outcome(**values)
    return await _through_action(call, action_params(params, found), found.any, values)


async def service(call: ModuleCall) -> Outcome:
    """Ansible's `service` on a systemd node runs `systemd` with the arguments systemd takes
    (`sleep` is dropped there, as Ansible's service action does)."""
    systemd_params = {
        "name": call.params["name"],
        "state": call.params["state"],
        "enabled": call.params["enabled"],
        "masked": None,
        "daemon_reload": False,
        "daemon_reexec": False,
        "scope": "system",
        "no_block": False,
        "force": None,
    }
    return await systemd(dataclasses.replace(call, params=systemd_params))


async def _read(call: ModuleCall, name: str) -> Unit:
    """The unit's properties, and `is-enabled` when enabled or masked is asked for."""
    unit = quoted(name)
    shown = await call.run(f"systemctl show -p {','.join(PROPERTIES)} -- {unit}")
    if shown.rc == 127:
        raise ModuleFailed("systemctl not found: fleetfix manages services through systemd only")
    if shown.timed_out or shown.rc != 0:
        said = (shown.stderr.strip() or shown.stdout.strip())[:300]
        raise ModuleFailed(f"Could not read service {name}: {said or f'exit status {shown.rc}'}")
    status = parse_show(shown.stdout)
    if call.params["enabled"] is None and call.params["masked"] is None:
        return Unit(status)
    asked = await call.run(f"systemctl is-enabled -- {unit}")
    return Unit(status, asked.stdout.strip(), asked.rc)


async def _through_action(
    call: ModuleCall, params: dict[str, Any], changed: bool, values: dict[str, Any]
) -> Outcome:
    """Run the changes as a `service` action step: every engine gate, journal and --check."""
    step = dataclasses.replace(
        call.hs.step, kind=StepKind.ACTION, args={"name": SERVICE_ACTION, "params": params}
    )
    done = await run_action(call.hs.with_step(step), call.handlers)
    outcome = call.outcome(changed=changed and not done.failed, message=done.message, **values)
    outcome.commands.extend(done.commands)
    outcome.failed, outcome.skipped, outcome.left = done.failed, done.skipped, done.left
    if done.left is not None:
        outcome.changed = False
    outcome.data.update(done.data)
    return outcome
