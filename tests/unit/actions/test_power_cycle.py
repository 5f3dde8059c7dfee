"""The power_cycle action: a cold cycle through the BMC only with the operator's permission and
a BMC named in the inventory (else "needs a human: cold power cycle"); the password reaches the
tool in its environment, never on its command line (which is printed and journaled)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.power import ACTIONS, NEEDS_A_HUMAN
from fleetfix.engine.reboot import on_controller
from fleetfix.probes import gpu_processes

POWER_CYCLE = next(a for a in ACTIONS if a.name == "power_cycle")
IDLE = gpu_processes.parse(
    "### fleetfix query-compute-apps timeout=15\n### fleetfix end rc=0\n"
    "### fleetfix fuser timeout=15\n### fleetfix end rc=1\n"
)
BMC = {"bmc_host": "10.1.0.7", "bmc_user": "fleetfix", "bmc_password": "s3cret pass"}


def plan(params: dict[str, Any], hostvars: dict[str, Any], **facts: Any) -> ActionPlan:
    facts.setdefault("gpu_processes", IDLE)
    return POWER_CYCLE.plan(ActionContext("gpu007", params, facts, hostvars))


def test_without_permission_it_needs_a_human() -> None:
    refused = plan({}, BMC).refused
    assert refused is not None and NEEDS_A_HUMAN in refused and "power_cycle=true" in refused


def test_without_a_bmc_it_needs_a_human() -> None:
    refused = plan({"allowed": "true"}, {}).refused
    assert refused is not None and "bmc_host" in refused and NEEDS_A_HUMAN in refused


def test_a_busy_node_is_not_power_cycled() -> None:
    busy = gpu_processes.parse(
        "### fleetfix query-compute-apps timeout=15\n"
        "4242, python, GPU-1, 00000000:1B:00.0, 1000 MiB\n### fleetfix end rc=0\n"
        "### fleetfix fuser timeout=15\n### fleetfix end rc=1\n"
    )
    refused = plan({"allowed": True}, BMC, gpu_processes=busy).refused
    assert refused is not None and "4242" in refused


def test_ipmi_from_the_controller_with_the_password_in_the_environment() -> None:
    (command,) = plan({"allowed": True}, BMC).commands
    assert command.on_controller and command.expect_unreachable
    assert "chassis power cycle" in command.command and "-H 10.1.0.7" in command.command
    assert "s3cret" not in command.command
    assert command.env["FLEETFIX_BMC_PASSWORD"] == "s3cret pass"


def test_redfish_posts_a_power_cycle_reset() -> None:
    (command,) = plan({"allowed": True}, {**BMC, "bmc_protocol": "redfish"}).commands
    assert "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset" in command.command
    assert '"ResetType": "PowerCycle"' in command.command
    assert "s3cret" not in command.command


def test_the_controller_runs_the_tool_with_the_secret_only_in_its_environment(
    tmp_path: Path,
) -> None:
    seen = tmp_path / "seen"
    tool = tmp_path / "ipmitool"
    tool.write_text(f'#!/bin/sh\necho "$*" > {seen}\necho "$IPMI_PASSWORD" >> {seen}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (command,) = plan({"allowed": True}, {**BMC, "fleetfix_ipmitool": str(tool)}).commands
    result = asyncio.run(on_controller(command))
    assert result.rc == 0, result.stderr
    argv, password = seen.read_text().splitlines()
    assert argv == "-I lanplus -H 10.1.0.7 -U fleetfix -E chassis power cycle"
    assert password == "s3cret pass"
    assert "FLEETFIX_BMC_PASSWORD" not in os.environ  # the controller's own env is untouched


def test_a_bmc_that_refuses_is_a_failed_command(tmp_path: Path) -> None:
    tool = tmp_path / "ipmitool"
    tool.write_text(
        "#!/bin/sh\necho 'Error: Unable to establish IPMI v2 / RMCP+ session' >&2\nexit 1\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (command,) = plan({"allowed": True}, {**BMC, "fleetfix_ipmitool": str(tool)}).commands
    result = asyncio.run(on_controller(command))
    assert result.rc == 1 and "RMCP+" in result.stderr
