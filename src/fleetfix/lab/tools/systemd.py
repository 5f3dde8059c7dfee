"""Emulated `systemctl` for the GPU node's units (persistenced, fabric manager or IMEX, DCGM,
slurmd; which ones depend on the board).

Starting nvidia-persistenced turns persistence mode on for every GPU and stopping it turns it
off, as the daemon does; starting or stopping nvidia-fabricmanager or nvidia-imex changes the
NVLink fabric as lab/fabric.py describes; GPU services cannot start while the nvidia module is
unloaded. `restart` is a stop and a start; `start` of a running unit changes nothing.
`systemctl reboot` reboots the node. `show [-p PROP[,PROP]] [--value] UNIT...` answers
LoadState (`not-found` for a unit the node does not have), ActiveState, SubState,
UnitFileState, Id and Description.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from fleetfix.lab import transitions
from fleetfix.lab.state import NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines

_NEEDS_DRIVER = frozenset({"nvidia-persistenced", "nvidia-fabricmanager", "nvidia-imex"})
_DESCRIPTIONS = MappingProxyType(
    {
        "nvidia-persistenced": "NVIDIA Persistence Daemon",
        "nvidia-fabricmanager": "NVIDIA fabric manager service",
        "nvidia-imex": "NVIDIA IMEX service",
        "nvidia-dcgm": "NVIDIA DCGM service",
        "dcgm-exporter": "NVIDIA DCGM Exporter",
        "nvsm": "NVIDIA System Management service",
        "slurmd": "Slurm node daemon",
    }
)


def _unit(name: str) -> str:
    return name.removesuffix(".service")


def systemctl(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    if "show" in argv:
        shown = _show_request(argv)
        if shown is not None:
            return _show(ctx, *shown)
    args = [a for a in argv if not a.startswith("-")]
    flags = {a for a in argv if a.startswith("-")}
    if not args:
        return fail("systemctl: listing units is not emulated in the lab; name a unit")
    verb, units = args[0], [_unit(u) for u in args[1:]]
    if verb in ("reboot", "kexec"):
        return ToolReply(effect="reboot")
    if verb in ("daemon-reload", "reset-failed"):
        return ToolReply()
    handler = _VERBS.get(verb)
    if handler is None:
        return fail(f"Unknown command verb {verb}.")
    if not units:
        return fail("Too few arguments.")
    return handler(ctx, units, flags)


def _is_active(ctx: ToolContext, units: list[str], flags: set[str]) -> ToolReply:
    states = [_state(ctx.node, u) for u in units]
    quiet = "-q" in flags or "--quiet" in flags
    rc = 0 if all(s == "active" for s in states) else 3
    return ToolReply(stdout="" if quiet else lines(*states), rc=rc)


def _state(node: NodeState, unit: str) -> str:
    service = node.services.get(unit)
    if service is None:
        return "inactive"
    return "active" if service.active else "inactive"


def _is_enabled(ctx: ToolContext, units: list[str], flags: set[str]) -> ToolReply:
    out, err = [], []
    for unit in units:
        service = ctx.node.services.get(unit)
        if service is None:
            err.append(
                f"Failed to get unit file state for {unit}.service: No such file or directory"
            )
        else:
            out.append("enabled" if service.enabled else "disabled")
    rc = 0 if not err and all(o == "enabled" for o in out) else 1
    return ToolReply(stdout=lines(*out) if out else "", stderr=lines(*err) if err else "", rc=rc)


def _start(ctx: ToolContext, units: list[str], flags: set[str]) -> ToolReply:
    return _change(ctx, units, active=True, verb="start")


def _stop(ctx: ToolContext, units: list[str], flags: set[str]) -> ToolReply:
    return _change(ctx, units, active=False, verb="stop")


def _restart(ctx: ToolContext, units: list[str], flags: set[str]) -> ToolReply:
    return _change(ctx, units, active=True, verb="restart")


def _change(ctx: ToolContext, units: list[str], active: bool, verb: str) -> ToolReply:
    for unit in units:
        problem = _set_active(ctx.node, unit, active, verb)
        if problem is not None:
            return fail(problem, rc=5 if "not found" in problem else 1)
    return ToolReply(delay=ctx.fleet.scenario.timing.service)


def _set_active(node: NodeState, unit: str, active: bool, verb: str) -> str | None:
    service = node.services.get(unit)
    if service is None:
        return f"Failed to {verb} {unit}.service: Unit {unit}.service not found."
    if active and unit in _NEEDS_DRIVER and not node.driver_loaded():
        return (
            f"Job for {unit}.service failed because the control process exited with error code.\n"
            f'See "systemctl status {unit}.service" and "journalctl -xeu {unit}.service" '
            "for details."
        )
    if verb.endswith("restart") and service.active:
        transitions.set_service(node, unit, False)
    transitions.set_service(node, unit, active)
    return None


def _enable(ctx: ToolContext, units: list[str], flags: set[str]) -> ToolReply:
    return _set_enabled(ctx, units, flags, enabled=True)


def _disable(ctx: ToolContext, units: list[str], flags: set[str]) -> ToolReply:
    return _set_enabled(ctx, units, flags, enabled=False)


def _set_enabled(ctx: ToolContext, units: list[str], flags: set[str], enabled: bool) -> ToolReply:
    out = []
    for unit in units:
        service = ctx.node.services.get(unit)
        if service is None:
            return fail(
                f"Failed to {'enable' if enabled else 'disable'} unit: "
                f"Unit file {unit}.service does not exist."
            )
        link = f"/etc/systemd/system/multi-user.target.wants/{unit}.service"
        if service.enabled != enabled:
            out.append(
                f"Created symlink {link} → /lib/systemd/system/{unit}.service."
                if enabled
                else f"Removed {link}."
            )
        service.enabled = enabled
        if "--now" in flags:
            problem = _set_active(ctx.node, unit, enabled, "start" if enabled else "stop")
            if problem is not None:
                return fail(problem)
    return ToolReply(stderr=lines(*out) if out else "")


def _status(ctx: ToolContext, units: list[str], flags: set[str]) -> ToolReply:
    blocks, rc = [], 0
    for unit in units:
        service = ctx.node.services.get(unit)
        if service is None:
            return fail(f"Unit {unit}.service could not be found.", rc=4)
        state = "active (running)" if service.active else "inactive (dead)"
        rc = rc or (0 if service.active else 3)
        blocks.append(
            lines(
                f"{'●' if service.active else '○'} {unit}.service - "
                + _DESCRIPTIONS.get(unit, unit),
                f"     Loaded: loaded (/lib/systemd/system/{unit}.service; "
                f"{'enabled' if service.enabled else 'disabled'}; vendor preset: enabled)",
                f"     Active: {state}",
            )
        )
    return ToolReply(stdout="\n".join(blocks), rc=rc)


_SHOW_PROPERTIES = ("Id", "Description", "LoadState", "ActiveState", "SubState", "UnitFileState")


def _show_request(argv: Sequence[str]) -> tuple[list[str], list[str], bool] | None:
    """(units, properties, --value) of a `show` command line; None when `show` is not its verb
    (an argument of another option)."""
    units: list[str] = []
    properties: list[str] = []
    value_only = False
    words = iter(argv)
    verb_seen = False
    for word in words:
        if word in ("-p", "--property"):
            properties.extend(next(words, "").split(","))
        elif word.startswith("--property="):
            properties.extend(word.split("=", 1)[1].split(","))
        elif word.startswith("-p") and len(word) > 2:
            properties.extend(word[2:].split(","))
        elif word == "--value":
            value_only = True
        elif word.startswith("-"):
            continue
        elif not verb_seen:
            if word != "show":
                return None
            verb_seen = True
        else:
            units.append(_unit(word))
    return units, [p for p in properties if p], value_only


def _show(ctx: ToolContext, units: list[str], properties: list[str], value_only: bool) -> ToolReply:
    if not units:
        return fail("systemctl show without a unit (the manager's properties) is not emulated")
    wanted = properties or list(_SHOW_PROPERTIES)
    blocks = []
    for unit in units:
        values = _properties(ctx.node, unit)
        shown = [(name, values[name]) for name in wanted if name in values]
        blocks.append(lines(*(value if value_only else f"{name}={value}" for name, value in shown)))
    return ToolReply(stdout="\n".join(blocks))


def _properties(node: NodeState, unit: str) -> dict[str, str]:
    service = node.services.get(unit)
    found = service is not None
    active = service is not None and service.active
    return {
        "Id": f"{unit}.service",
        "Description": _DESCRIPTIONS.get(unit, unit) if found else f"{unit}.service",
        "LoadState": "loaded" if found else "not-found",
        "ActiveState": "active" if active else "inactive",
        "SubState": "running" if active else "dead",
        "UnitFileState": ("enabled" if service.enabled else "disabled") if service else "",
    }


_VERBS = MappingProxyType(
    {
        "is-active": _is_active,
        "is-enabled": _is_enabled,
        "start": _start,
        "stop": _stop,
        "restart": _restart,
        "try-restart": _restart,
        "enable": _enable,
        "disable": _disable,
        "status": _status,
    }
)
