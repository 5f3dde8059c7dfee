"""The lab's emulated BMCs: what a node's BMC answers to ipmitool's `chassis power` commands.

Every lab node has a BMC at an address of its own (lab/layout.py: 127.110.R.N for the node at
127.10.R.N) unless its scenario says `bmc: false`. Nothing listens there: the controller runs
the lab's ipmitool (lab/ipmitool.py, `<state>/bmc/ipmitool`), which parses its arguments as
ipmitool does and sends the request to the lab server's control port; `answer` decides what
the BMC says and which power change the server then makes (lab/server.py).

The words are ipmitool's own (ipmitool 1.8.19, lib/ipmi_chassis.c, lib/ipmi_strings.c,
src/plugins/lanplus/lanplus.c): `Chassis Power Control: Cycle`, `Chassis Power is on`, and a
session that cannot be opened (wrong user or password, or no BMC answering at that address)
is `Error: Unable to establish IPMI v2 / RMCP+ session`, exit 1 (the RAKP detail is printed
only with -v). IPMI asks a BMC to refuse a power cycle of a chassis that is off (completion
code D5h), which ipmitool prints as `Set Chassis Power Control to Cycle failed: Command not
supported in present state`.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from fleetfix.lab.state import FleetState, NodeState

LANPLUS_SESSION_ERROR = "Error: Unable to establish IPMI v2 / RMCP+ session"
LAN_SESSION_ERROR = "Error: Unable to establish IPMI v1.5 / RMCP session"
POWER_HELP = "chassis power Commands: status, on, off, cycle, reset, diag, soft"
NOT_IN_PRESENT_STATE = "Command not supported in present state"

_CONTROLS = MappingProxyType(
    {
        "up": ("Up/On", "on"),
        "on": ("Up/On", "on"),
        "down": ("Down/Off", "off"),
        "off": ("Down/Off", "off"),
        "cycle": ("Cycle", "cycle"),
        "reset": ("Reset", "reset"),
        "diag": ("Diag", None),
        "acpi": ("Soft", "off"),
        "soft": ("Soft", "off"),
    }
)
"""ipmitool's `chassis power` words -> its name for the control, and the lab's power change
(`diag` is an NMI: the lab's nodes ignore it; a soft, ACPI, shutdown ends powered off)."""
_NEEDS_POWER = frozenset({"cycle", "reset", "diag"})
"""Controls a BMC refuses (D5h) while the chassis is off."""


@dataclass(frozen=True, slots=True)
class BmcRequest:
    """What the lab's ipmitool sends: the BMC asked, the session's credentials, the command."""

    address: str
    interface: str
    user: str
    password: str
    command: tuple[str, ...]
    argv: tuple[str, ...]
    """The whole command line, a -P password masked as ipmitool masks it (for the audit)."""


@dataclass(frozen=True, slots=True)
class BmcAnswer:
    """What ipmitool prints and exits with, and the power change the server makes."""

    stdout: str = ""
    stderr: str = ""
    rc: int = 0
    node: NodeState | None = None
    """The node whose BMC answered (None: no BMC at that address)."""
    power: str | None = None
    """`on`, `off`, `cycle` or `reset` for the server to carry out; None: nothing changes."""
    audited: bool = False
    """A power control was asked for (the node's audit records it, refused or not)."""


def answer(fleet: FleetState, request: BmcRequest) -> BmcAnswer:
    """The BMC at `request.address` answers `request` (see the module docstring)."""
    node = fleet.by_bmc.get(request.address)
    control = _is_control(request.command)
    session_error = LAN_SESSION_ERROR if request.interface == "lan" else LANPLUS_SESSION_ERROR
    if node is None or node.status == "unreachable":
        return BmcAnswer(stderr=session_error + "\n", rc=1)
    accepted = fleet.scenario.bmc_of(node.name)
    if accepted is None or not _authenticated(request, accepted.user, accepted.password):
        return BmcAnswer(stderr=session_error + "\n", rc=1, node=node, audited=control)
    return _command(node, request.command, audited=control)


def _authenticated(request: BmcRequest, user: str, password: str) -> bool:
    same_user = hmac.compare_digest(request.user.encode(), user.encode())
    return hmac.compare_digest(request.password.encode(), password.encode()) and same_user


def _is_control(command: Sequence[str]) -> bool:
    """`chassis power X` / `power X` with X a control (not status or help)."""
    words = list(command[1:]) if command[:1] == ("chassis",) else list(command)
    return len(words) >= 2 and words[0] == "power" and words[1] in _CONTROLS


def _command(node: NodeState, command: tuple[str, ...], *, audited: bool) -> BmcAnswer:
    if not command:
        return BmcAnswer(stderr="No command provided!\n", rc=1, node=node)
    if command[0] == "chassis":
        if len(command) < 2 or command[1] == "help":
            return BmcAnswer(stderr=_CHASSIS_HELP, rc=1, node=node)
        if command[1] != "power":
            return _unsupported(node, " ".join(command[:2]))
        return _power(node, command[2:], audited=audited)
    if command[0] == "power":
        return _power(node, command[1:], audited=audited)
    return BmcAnswer(stderr=f"Invalid command: {command[0]}\n", rc=1, node=node)


_CHASSIS_HELP = (
    "Chassis Commands:\n  status, power, policy, restart_cause\n  poh, identify, selftest,\n"
    "  bootdev, bootparam, bootmbox\n"
)


def _unsupported(node: NodeState, what: str) -> BmcAnswer:
    message = f"ipmitool: the fleetfix lab's BMC emulates `chassis power` only, not `{what}`\n"
    return BmcAnswer(stderr=message, rc=1, node=node)


def _power(node: NodeState, words: Sequence[str], *, audited: bool) -> BmcAnswer:
    if not words or words[0] == "help":
        return BmcAnswer(stderr=POWER_HELP + "\n", node=node)
    powered = node.status != "off"
    if words[0] == "status":
        return BmcAnswer(stdout=f"Chassis Power is {'on' if powered else 'off'}\n", node=node)
    if words[0] not in _CONTROLS:
        return BmcAnswer(stderr=f"Invalid chassis power command: {words[0]}\n", rc=1, node=node)
    name, change = _CONTROLS[words[0]]
    if not powered and words[0] in _NEEDS_POWER:
        message = f"Set Chassis Power Control to {name} failed: {NOT_IN_PRESENT_STATE}\n"
        return BmcAnswer(stderr=message, rc=1, node=node, audited=audited)
    if (change == "on" and powered) or (change == "off" and not powered):
        change = None  # already so: the BMC says yes and nothing happens
    return BmcAnswer(
        stdout=f"Chassis Power Control: {name}\n", node=node, power=change, audited=audited
    )
