"""Read the board-level scenario keys of a node: SRAM and NVSwitch faults, nccl wrong results,
the Fabric Manager's state, the node's own board, driver, GPU model and environment (and the
tool groups it lacks), and the third-party modules and monitoring units installed on it.

Each reader checks the value against the node's board (an SXid needs NVSwitches that report
them, `fabric_manager` a board that runs one) through the scenario reader's checker, so mistakes
carry file, line and a hint like every other scenario error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fleetfix.lab import kmsg
from fleetfix.lab.boards import BOARDS, Board
from fleetfix.lab.drivers import ACTIONS
from fleetfix.lab.environments import ENVIRONMENTS, TOOL_GROUPS
from fleetfix.lab.scenario import (
    EXTRA_UNITS,
    FABRIC_MANAGER_STATES,
    RECOVERY_LEVELS,
    SRAM_SOURCES,
    THIRD_PARTY_MODULES,
    XID_FORMS,
    NcclWrong,
    SramFault,
    SxidFault,
    parse_duration,
)
from fleetfix.lab.scenario_changes import Checker

GpuReader = Callable[[object, str], int]
SXID_LINKS = 64


def choose(checker: Checker, value: object, where: str, key: str, choices: Sequence[str]) -> str:
    """`value` if it is one of `choices`, else an error naming them."""
    if value not in choices:
        raise checker.error(
            f"{where}: unknown {key} {value!r}", key, f"{key}s: {', '.join(choices)}"
        )
    return str(value)


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
