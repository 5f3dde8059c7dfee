"""systemd/service: what a unit as read leads to (as Ansible's systemd module decides), the
`service` action's commands for it, and the arguments Ansible requires together."""

from __future__ import annotations

from typing import Any

import pytest

# Imported first: fleetfix.modules.call imported before the engine is a circular import
# (engine/__init__ -> play -> kinds -> modules.registry -> modules.call).
import fleetfix.engine  # noqa: F401
from fleetfix.actions.base import ActionContext
from fleetfix.actions.node import ACTIONS
from fleetfix.modules.call import ModuleFailed
from fleetfix.modules.services import (
    Changes,
    Unit,
    action_params,
    changes,
    parse_show,
    return_values,
    state_verb,
)
from fleetfix.modules.spec import ModuleArgsError, resolve
from fleetfix.modules.specs import MODULE_SPECS

SERVICE = next(action for action in ACTIONS if action.name == "service")


def _params(**given: Any) -> dict[str, Any]:
    return resolve(MODULE_SPECS["systemd"], {"name": "slurmd", **given})


def _unit(active: str = "active", load: str = "loaded", enabled: str = "", rc: int = 0) -> Unit:
    status = {"Id": "slurmd.service", "LoadState": load, "ActiveState": active}
    return Unit(status, enabled, rc if enabled else None)


def _commands(params: dict[str, Any]) -> list[str]:
    plan = SERVICE.plan(ActionContext("gpu01", params, {}, {}))
    assert plan.refused is None, plan.refused
    return [command.command for command in plan.commands]


@pytest.mark.parametrize(
    ("wanted", "active_state", "verb"),
    [
        ("started", "active", None),
        ("started", "activating", None),
        ("started", "inactive", "start"),
        ("started", "failed", "start"),
        ("stopped", "inactive", None),
        ("stopped", "failed", None),
        ("stopped", "active", "stop"),
        ("stopped", "deactivating", "stop"),
        ("restarted", "active", "restart"),
        ("restarted", "inactive", "start"),
        ("reloaded", "active", "reload"),
        ("reloaded", "failed", "start"),
    ],
)
def test_a_state_changes_the_unit_only_when_ansible_would(
    wanted: str, active_state: str, verb: str | None
) -> None:
    assert state_verb(wanted, active_state) == verb


def test_enabled_and_masked_change_only_what_differs() -> None:
    assert changes(_params(enabled=True), _unit(enabled="enabled")) == Changes()
    assert changes(_params(enabled=True), _unit(enabled="disabled", rc=1)) == Changes(enabled=True)
    # enabled-runtime is not enabled for good: Ansible enables it again.
    assert changes(_params(enabled=True), _unit(enabled="enabled-runtime")).enabled is True
    assert changes(_params(enabled=False), _unit(enabled="enabled")) == Changes(enabled=False)
    assert changes(_params(masked=True), _unit(enabled="masked", rc=1)) == Changes()
    assert changes(_params(masked=True), _unit(enabled="enabled")) == Changes(masked=True)
    assert changes(_params(masked=False), _unit(enabled="masked", rc=1)) == Changes(masked=False)


def test_a_unit_the_node_lacks_fails_with_ansibles_message() -> None:
    missing = _unit(active="inactive", load="not-found")
    with pytest.raises(ModuleFailed, match=r"^Could not find the requested service slurmd: host$"):
        changes(_params(state="started"), missing)
    with pytest.raises(ModuleFailed, match="Could not find"):
        changes(_params(enabled=True), missing)
    # Masking does not need the unit (systemd masks units before they are installed).
    assert changes(_params(masked=True), Unit(missing.status, "", 1)) == Changes(masked=True)


def test_a_unit_that_failed_to_load_fails() -> None:
    broken = Unit({"LoadState": "bad-setting", "LoadError": "bad ExecStart", "ActiveState": "x"})
    with pytest.raises(ModuleFailed, match="Error loading unit file 'slurmd': bad ExecStart"):
        changes(_params(state="started"), broken)


def test_the_action_runs_only_what_changes_in_ansibles_order() -> None:
    found = Changes(masked=False, enabled=True, verb="start")
    params = action_params(_params(daemon_reload=True, no_block=True), found)
    assert _commands(params) == [
        "systemctl --no-block daemon-reload",
        "systemctl --no-block unmask slurmd",
        "systemctl --no-block enable slurmd",
        "systemctl --no-block start slurmd",
    ]
    assert _commands(action_params(_params(state="stopped"), Changes(verb="stop"))) == [
        "systemctl stop slurmd"
    ]
    no_unit = resolve(MODULE_SPECS["systemd"], {"daemon_reload": True})
    assert _commands(action_params(no_unit, Changes())) == ["systemctl daemon-reload"]


def test_the_service_action_alone_still_restarts_by_default() -> None:
    assert _commands({"name": "nvidia-dcgm"}) == ["systemctl restart nvidia-dcgm"]
    assert _commands({"name": "x; reboot", "state": "stopped"}) == ["systemctl stop 'x; reboot'"]


def test_return_values_are_ansibles() -> None:
    unit = _unit()
    assert return_values(_params(state="restarted", enabled=True), unit) == {
        "name": "slurmd",
        "status": dict(unit.status),
        "state": "started",  # Ansible reports restarted and reloaded units as started
        "enabled": True,
    }
    assert return_values(_params(state="stopped"), unit)["state"] == "stopped"
    assert "state" not in return_values(_params(masked=True), unit)


def test_state_enabled_and_masked_need_a_name() -> None:
    spec = MODULE_SPECS["systemd"]
    with pytest.raises(ModuleArgsError, match="missing parameter\\(s\\) required by 'state': name"):
        resolve(spec, {"state": "started"})
    assert resolve(spec, {"daemon_reload": True})["name"] is None


def test_systemctl_show_is_read_as_name_value_lines() -> None:
    text = "Id=slurmd.service\nDescription=Slurm node daemon\nExecMainStatus=0\n\nMainPID=12=x\n"
    assert parse_show(text) == {
        "Id": "slurmd.service",
        "Description": "Slurm node daemon",
        "ExecMainStatus": "0",
        "MainPID": "12=x",
    }
