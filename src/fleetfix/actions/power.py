"""A cold power cycle through the node's BMC: what a warm reboot cannot do.

NVIDIA asks for more than `systemctl reboot` in three cases: the driver's recovery action
SYSTEM_REBOOT ("Reboot the system") or BUS_RESET ("Reset the GPU's PCIe bus"), and a GPU that
fell off the bus and is still gone after a warm reboot (the nvidia-smi manual: power-cycle the
system before giving up on it). A warm reboot keeps the GPUs powered and the PCIe link up; a
cold cycle drops both. docs/gpu-procedures.md cites the sources.

The command runs on the controller, not on the node: the node's own OS is what is in doubt,
and the BMC is reached over its management network. It needs, per host:

* `bmc_host` (the BMC's address), `bmc_user`, `bmc_password` (a secret: handed to the tool in
  its environment, never on the command line, so neither `ps` nor the journal holds it);
* `bmc_protocol`: `ipmi` (default: `ipmitool -I lanplus ... chassis power cycle`) or `redfish`
  (`POST /redfish/v1/Systems/{bmc_system}/Actions/ComputerSystem.Reset {"ResetType":
  "PowerCycle"}`, bmc_system default `1`); `fleetfix_ipmitool` names another ipmitool binary;
* and the operator's permission: the step's `allowed` (playbooks pass `power_cycle`, an extra
  var or host var). A cold cycle of the wrong node kills whatever runs there, so it is never a
  default: without permission, or without a BMC, the plan is refused with "needs a human:
  cold power cycle", which playbooks turn into the node's drain reason.

Like a reboot, the engine journals the intent with the boot id before sending and then waits
for a new boot id; the busy-node gate is the reboot's.
"""

from __future__ import annotations

import json
import shlex

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import busy_reason, choice, flag, params_checker

PROTOCOLS = ("ipmi", "redfish")
NEEDS_A_HUMAN = "needs a human: cold power cycle"
"""The words a refused power cycle leaves (playbooks drain the node with them)."""
PASSWORD_ENV = "FLEETFIX_BMC_PASSWORD"
USER_ENV = "FLEETFIX_BMC_USER"


def _var(ctx: ActionContext, name: str, default: str = "") -> str:
    value = ctx.vars.get(name)
    return default if value in (None, "") else str(value)


def _plan(ctx: ActionContext) -> ActionPlan:
    busy = busy_reason(ctx)
    if busy is not None:
        return ActionPlan(refused=f"{busy}; a power cycle would kill them")
    if not flag(ctx.params, "allowed"):
        return ActionPlan(
            refused="a cold power cycle was not allowed in this run (-e power_cycle=true, or"
            f" the host var power_cycle: true): {NEEDS_A_HUMAN}"
        )
    host = _var(ctx, "bmc_host")
    if not host:
        return ActionPlan(refused=f"the inventory names no BMC (bmc_host): {NEEDS_A_HUMAN}")
    protocol = str(ctx.params.get("protocol") or _var(ctx, "bmc_protocol", "ipmi")).lower()
    if protocol not in PROTOCOLS:
        return ActionPlan(refused=f"bmc_protocol must be ipmi or redfish, not {protocol!r}")
    env = {USER_ENV: _var(ctx, "bmc_user"), PASSWORD_ENV: _var(ctx, "bmc_password")}
    if protocol == "ipmi":
        tool = _var(ctx, "fleetfix_ipmitool", "ipmitool")
        command = (
            f'IPMI_PASSWORD="${PASSWORD_ENV}" {shlex.quote(tool)} -I lanplus'
            f' -H {shlex.quote(host)} -U "${USER_ENV}" -E chassis power cycle'
        )
    else:
        system = _var(ctx, "bmc_system", "1")
        url = f"https://{host}/redfish/v1/Systems/{system}/Actions/ComputerSystem.Reset"
        body = json.dumps({"ResetType": "PowerCycle"})
        command = (
            f'curl -fsS -k -u "${USER_ENV}:${PASSWORD_ENV}" -H "Content-Type: application/json"'
            f" -X POST -d {shlex.quote(body)} {shlex.quote(url)}"
        )
    why = f"cold power cycle through the BMC {host} ({protocol})"
    planned = PlannedCommand(
        command, why, timeout=60, expect_unreachable=True, on_controller=True, env=env
    )
    return ActionPlan(commands=(planned,))


ACTIONS = (
    Action(
        name="power_cycle",
        validate=params_checker({"protocol": choice(*PROTOCOLS)}),
        summary="cold power cycle through the node's BMC (IPMI or Redfish, from the controller),"
        " then wait for the node to return with a new boot id",
        plan=_plan,
        params={
            "allowed": "must be true: the operator's permission (playbooks: -e power_cycle=true)",
            "protocol": "ipmi or redfish (default: the host var bmc_protocol, else ipmi)",
            "allow_busy": "power-cycle even with GPU processes or Slurm jobs (kills them)",
        },
        requires=("gpu_processes",),
        optional=("slurm_node",),
        disruptive=True,
    ),
)
