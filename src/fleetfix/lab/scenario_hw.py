"""Read the hardware scenario keys of a node: Xids, GPUs that fail to initialise, SRAM and
NVSwitch faults, nccl wrong results, the Fabric Manager's state, the node's own board, driver,
GPU model and environment (and the tool groups it lacks), the third-party modules and
monitoring units installed on it, and its BMC (and the fleet's BMC credentials).

Each reader checks the value against the node's board (an SXid needs NVSwitches that report
them, `fabric_manager` a board that runs one) through the scenario reader's checker, so mistakes
carry file, line and a hint like every other scenario error.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from types import MappingProxyType

from fleetfix.lab import kmsg
from fleetfix.lab.boards import BOARDS, Board
from fleetfix.lab.drivers import ACTIONS, COLD_ACTIONS
from fleetfix.lab.environments import ENVIRONMENTS, TOOL_GROUPS
from fleetfix.lab.scenario import (
    EXTRA_UNITS,
    FABRIC_MANAGER_STATES,
    INIT_FAILED_RECOVERY,
    RECOVERY_LEVELS,
    SRAM_SOURCES,
    THIRD_PARTY_MODULES,
    XID_FORMS,
    BmcCredentials,
    InitFailed,
    NcclWrong,
    NodeBmc,
    SramFault,
    SxidFault,
    XidFault,
    parse_duration,
)
from fleetfix.lab.scenario_changes import Checker

GpuReader = Callable[[object, str], int]
SXID_LINKS = 64
_DEFAULT_XID_RECOVERY = MappingProxyType({79: "reboot", 74: "never", 64: "never"})
IPMI_USER_MAX = 16
IPMI_PASSWORD_MAX = 20
"""ipmitool refuses a longer user name, and a longer password over lanplus."""


def choose(checker: Checker, value: object, where: str, key: str, choices: Sequence[str]) -> str:
    """`value` if it is one of `choices`, else an error naming them."""
    if value not in choices:
        raise checker.error(
            f"{where}: unknown {key} {value!r}", key, f"{key}s: {', '.join(choices)}"
        )
    return str(value)


def recovery(
    checker: Checker, value: object, where: str, levels: Sequence[str] = RECOVERY_LEVELS
) -> str:
    """A recovery level from `levels`, else an error with the closest one as a hint."""
    if value not in levels:
        close = difflib.get_close_matches(str(value), levels, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"recovery levels: {', '.join(levels)}"
        raise checker.error(f"{where}: unknown recovery {value!r}", "recovery", hint)
    return str(value)


def xid(checker: Checker, value: object, where: str, layout: Board, gpu: GpuReader) -> XidFault:
    """One `xid:` entry; recovery defaults from the action a warm reboot cannot give (System
    Reboot, Bus Reset: power_cycle), else from the code (79: reboot, 74/64: never, others:
    reset)."""
    keys = ("code", "gpu", "recovery", "ago", "form", "action")
    raw = checker.mapping(value, where, keys)
    code = checker.integer(raw.get("code"), f"{where}.code", minimum=1)
    action = xid_action(checker, raw.get("action"), layout, where)
    default = "power_cycle" if action in COLD_ACTIONS else _DEFAULT_XID_RECOVERY.get(code, "reset")
    return XidFault(
        code=code,
        gpu=gpu(raw.get("gpu", 0), f"{where}.gpu"),
        recovery=recovery(checker, raw.get("recovery", default), where),
        ago=parse_duration(raw.get("ago", 600), f"{where}.ago"),
        form=xid_form(checker, raw.get("form", "xid"), code, where),
        action=action,
    )


def init_failed(checker: Checker, value: object, where: str, gpu: GpuReader) -> InitFailed:
    """One `gpu_init_failed:` entry: a GPU index, or {gpu, recovery} (reboot, power_cycle or
    never; default reboot)."""
    if not isinstance(value, dict):
        return InitFailed(gpu=gpu(value, where))
    raw = checker.mapping(value, where, ("gpu", "recovery"))
    return InitFailed(
        gpu=gpu(raw.get("gpu", 0), f"{where}.gpu"),
        recovery=recovery(
            checker, raw.get("recovery", "reboot"), where, levels=INIT_FAILED_RECOVERY
        ),
    )


def fleet_bmc(checker: Checker, value: object) -> BmcCredentials:
    """The top-level `bmc: {user, password}`: what every BMC accepts and the inventory says."""
    user, password = _credentials(checker, value, "bmc")
    default = BmcCredentials()
    return BmcCredentials(
        default.user if user is None else user, default.password if password is None else password
    )


def node_bmc(checker: Checker, value: object, where: str) -> NodeBmc:
    """A node's `bmc:`: true (the default: the fleet's credentials), false (no BMC), or a
    `user` and/or `password` of its own (the inventory, which has the fleet's, is wrong for it)."""
    if value is None or value is True:
        return NodeBmc()
    if value is False:
        return NodeBmc(present=False)
    user, password = _credentials(checker, value, f"{where}.bmc")
    return NodeBmc(user=user, password=password)


def _credentials(checker: Checker, value: object, where: str) -> tuple[str | None, str | None]:
    raw = checker.mapping(value, where, ("user", "password"))
    user = None if raw.get("user") is None else str(raw["user"])
    password = None if raw.get("password") is None else str(raw["password"])
    if user is not None and not 0 < len(user.encode()) <= IPMI_USER_MAX:
        raise checker.error(f"{where}.user: 1 to {IPMI_USER_MAX} bytes, as ipmitool allows", "user")
    if password is not None and len(password.encode()) > IPMI_PASSWORD_MAX:
        raise checker.error(
            f"{where}.password: at most {IPMI_PASSWORD_MAX} bytes, as ipmitool allows over lanplus",
            "password",
        )
    return user, password


def parse_board(checker: Checker, value: object, where: str) -> str:
    return choose(checker, value, where, "board", tuple(BOARDS))


def parse_environment(checker: Checker, value: object, where: str) -> str:
    return choose(checker, value, where, "environment", tuple(ENVIRONMENTS))


def parse_without(checker: Checker, value: object, where: str) -> tuple[str, ...]:
    """`without`: a tool group or a list of them (environments.TOOL_GROUPS)."""
    return installed(checker, value, f"{where}.without", "tool group", tuple(TOOL_GROUPS))


def xid_form(checker: Checker, value: object, code: int, where: str) -> str:
    form = choose(checker, value, where, "form", XID_FORMS)
    if form != "xid" and code != 79:
        raise checker.error(f"{where}: form {form!r} is only for Xid 79", "form")
    return form


def xid_action(checker: Checker, value: object, layout: Board, where: str) -> str | None:
    """The recovery action a scenario names for an Xid (None: derived from `recovery`)."""
    if value is None:
        return None
    name = choose(checker, value, where, "action", tuple(ACTIONS))
    if name == "recover-imex" and not layout.imex:
        raise checker.error(
            f"{where}: action recover-imex needs an IMEX board (gb200-nvl)", "action"
        )
    return ACTIONS[name]


def sram(checker: Checker, value: object, where: str, gpu: GpuReader) -> SramFault:
    keys = ("gpu", "volatile", "aggregate", "threshold_exceeded", "source")
    raw = checker.mapping(value, where, keys)
    volatile = checker.integer(raw.get("volatile", 0), f"{where}.volatile")
    return SramFault(
        gpu=gpu(raw.get("gpu", 0), f"{where}.gpu"),
        volatile=volatile,
        aggregate=max(checker.integer(raw.get("aggregate", 0), f"{where}.aggregate"), volatile),
        threshold_exceeded=checker.flag(
            raw.get("threshold_exceeded", False), f"{where}.threshold_exceeded"
        ),
        source=choose(checker, raw.get("source", "l2"), where, "source", SRAM_SOURCES),
    )


def sxid(checker: Checker, value: object, where: str, layout: Board, gpu: GpuReader) -> SxidFault:
    if not layout.sxid:
        raise checker.error(
            f"{where}: board {layout.name} has no NVSwitch that reports SXid errors",
            "sxid",
            "SXids exist on classic, hgx-a100, hgx-h100 and hgx-h200 (NVIDIA's guide: not on "
            "fourth-generation NVSwitches)",
        )
    keys = ("code", "switch", "link", "fatal", "gpu", "ago")
    raw = checker.mapping(value, where, keys)
    code = checker.integer(raw.get("code"), f"{where}.code", minimum=1)
    switch = checker.integer(raw.get("switch", 0), f"{where}.switch")
    if switch >= len(layout.switch_buses):
        raise checker.error(f"{where}: NVSwitch {switch} does not exist", "switch")
    link = checker.integer(raw.get("link", 0), f"{where}.link")
    if link >= SXID_LINKS:
        raise checker.error(f"{where}: link {link} does not exist", "link")
    fatal = checker.flag(raw.get("fatal", code in kmsg.FATAL_SXIDS), f"{where}.fatal")
    return SxidFault(
        code=code,
        switch=switch,
        link=link,
        fatal=fatal,
        gpu=gpu(raw.get("gpu", 0), f"{where}.gpu") if fatal else None,
        ago=parse_duration(raw.get("ago", 600), f"{where}.ago"),
    )


def nccl_wrong(checker: Checker, value: object, where: str, gpu: GpuReader) -> NcclWrong | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return NcclWrong(elements=checker.integer(value, where, minimum=1))
    raw = checker.mapping(value, where, ("elements", "gpu", "recovery"))
    return NcclWrong(
        elements=checker.integer(raw.get("elements"), f"{where}.elements", minimum=1),
        gpu=gpu(raw.get("gpu", 0), f"{where}.gpu"),
        recovery=choose(checker, raw.get("recovery", "never"), where, "recovery", RECOVERY_LEVELS),
    )


def fabric_manager(checker: Checker, value: object, where: str, layout: Board) -> str:
    if value is None:
        return "running"
    if not layout.fabric_manager:
        raise checker.error(
            f"{where}: board {layout.name} runs no nvidia-fabricmanager", "fabric_manager"
        )
    return choose(checker, value, where, "fabric_manager", FABRIC_MANAGER_STATES)


def installed(
    checker: Checker, value: object, where: str, key: str, known: Sequence[str]
) -> tuple[str, ...]:
    """`third_party_modules` / `extra_units`: a name or a list of names from `known`."""
    if value is None:
        return ()
    names = value if isinstance(value, list) else [value]
    return tuple(choose(checker, name, where, key, known) for name in names)


def third_party_modules(checker: Checker, value: object, where: str) -> tuple[str, ...]:
    return installed(checker, value, f"{where}.third_party_modules", "module", THIRD_PARTY_MODULES)


def extra_units(checker: Checker, value: object, where: str) -> tuple[str, ...]:
    return installed(checker, value, f"{where}.extra_units", "unit", EXTRA_UNITS)
