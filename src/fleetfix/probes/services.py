"""The `services` probe: state of the GPU node's systemd units (persistenced, fabric manager, ...).

The command prints one line per unit: `<unit> <LoadState> <ActiveState>`, from `systemctl show
-p LoadState --value` and `systemctl is-active`. The load state is needed because `is-active`
prints "inactive" for a unit that does not exist at all. Lines of the two-column form
`<unit> <state>` (a plain `systemctl is-active` loop) are read too. A unit systemctl could not be
asked about (no systemd, no D-Bus) is `unknown`, never `inactive`.

The CUDA MPS control daemon is rarely a unit (a prolog or an operator starts it), so the default
command also reports it by process name, as `nvidia-cuda-mps-control active|inactive` from
`pgrep -x` (no state when pgrep cannot tell: `unknown`).

A node without systemctl (a VM or container booted without systemd) is "systemd not on this
node": the command prints `### fleetfix not-installed systemctl` and nothing else, and the
parser raises ToolNotInstalled("services", "systemd"). Not facts, even though MPS could still
be read by process name: the units gate what actions stop and restore around a reset, and a
GPU holder (persistenced, nv-hostengine, Fabric Manager) may run outside systemd, so seven
`unknown` units must not read as seven absent ones (actions.fabric.unit_state) and let an
action go on; a gate fed by services refuses instead. Where systemctl is there, the command
first prints `### fleetfix systemctl`, and a unit it could not be asked about (systemd not
PID 1, no D-Bus) stays `unknown`. Output without that line (the command before it, a paste)
in which systemctl answered for no unit at all is read as systemd not on the node: the old
command hid systemctl's "command not found", and this is what it printed there.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fleetfix.errors import FleetfixError, ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import Probe
from fleetfix.probes.not_installed import missing_tool, unless_installed
from fleetfix.probes.text import clean_lines

NAME = "services"
TOOL = "systemd"
ASKED = "### fleetfix systemctl"
"""The line before the unit states when systemctl is on the node."""
DEFAULT_UNITS = (
    "nvidia-persistenced",
    "nvidia-fabricmanager",
    "nvidia-dcgm",
    "dcgm",
    "nvidia-imex",
    "dcgm-exporter",
    "nvsm",
)
"""GPU-node units whose state gates remediation (holders of the GPU to stop and restore)."""
MPS_CONTROL = "nvidia-cuda-mps-control"
"""The CUDA MPS control daemon, reported like a unit by the default command."""
_UNIT = re.compile(r"^[A-Za-z0-9@._:\\-]+$")
_LOAD_STATES = frozenset(
    {"loaded", "not-found", "masked", "error", "bad-setting", "stub", "merged"}
)


class UnitState(enum.StrEnum):
    """A unit's state as an operator reads it."""

    ACTIVE = "active"
    INACTIVE = "inactive"
    FAILED = "failed"
    ACTIVATING = "activating"
    DEACTIVATING = "deactivating"
    RELOADING = "reloading"
    REFRESHING = "refreshing"
    MAINTENANCE = "maintenance"
    NOT_FOUND = "not-found"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Service:
    """One unit."""

    unit: str
    state: UnitState
    load_state: str | None
    """systemd's LoadState (loaded, not-found, masked, ...), None if not reported."""
    active: bool


@dataclass(frozen=True, slots=True)
class ServicesFacts:
    """Unit states, with the lists runbooks gate on."""

    services: tuple[Service, ...]
    units: Mapping[str, str]
    """Unit name -> state (`facts.units['nvidia-fabricmanager'] == 'active'`)."""
    active: tuple[str, ...]
    failed: tuple[str, ...]
    not_found: tuple[str, ...]
    dcgm_unit: str | None
    """The DCGM unit this host has (`nvidia-dcgm` or `dcgm`), None if neither exists."""


def parse(text: str) -> ServicesFacts:
    """Service facts from `<unit> [<LoadState>] <ActiveState>` lines.

    Raises:
        ToolNotInstalled: systemd is not on the node (see the module docstring).
        ProbeParseError: a line is not a unit state, or there is none.
    """
    if missing_tool(text, ("systemctl",)) is not None:
        raise ToolNotInstalled(NAME, TOOL, text)
    lines = [ln for ln in clean_lines(text) if ln.text.strip()]
    asked = bool(lines) and lines[0].text.strip() == ASKED
    services: list[Service] = []
    for ln in lines[1:] if asked else lines:
        service = _service(ln.text.split())
        if service is None:
            raise ProbeParseError(NAME, "not a '<unit> <state>' line", text, line=ln.number)
        services.append(service)
    if not services:
        raise ProbeParseError(NAME, "no unit states in the output", text)
    if not asked and _systemctl_never_answered(services):
        raise ToolNotInstalled(NAME, TOOL, text)
    units = {s.unit: s.state.value for s in services}
    if len(units) != len(services):
        raise ProbeParseError(NAME, "a unit is listed twice", text)
    return ServicesFacts(
        services=tuple(services),
        units=MappingProxyType(units),
        active=tuple(s.unit for s in services if s.active),
        failed=tuple(s.unit for s in services if s.state is UnitState.FAILED),
        not_found=tuple(s.unit for s in services if s.state is UnitState.NOT_FOUND),
        dcgm_unit=next((u for u in ("nvidia-dcgm", "dcgm") if _exists(units.get(u))), None),
    )


def _systemctl_never_answered(services: list[Service]) -> bool:
    """Every unit line is bare: neither systemctl call printed anything, for any unit (MPS is
    found by process name, not by systemctl)."""
    units = [s for s in services if s.unit != MPS_CONTROL]
    return bool(units) and all(s.load_state is None and s.state is UnitState.UNKNOWN for s in units)


def _exists(state: str | None) -> bool:
    return state is not None and state not in (UnitState.NOT_FOUND, UnitState.UNKNOWN)


def _service(fields: list[str]) -> Service | None:
    if not 1 <= len(fields) <= 3 or not _UNIT.match(fields[0]):
        return None
    unit = fields[0].removesuffix(".service")
    load = fields[1] if len(fields) == 3 else None
    active = fields[-1] if len(fields) > 1 else None
    if len(fields) == 2 and active in _LOAD_STATES:
        load, active = active, None  # is-active printed nothing, LoadState did
    if load is not None and load not in _LOAD_STATES:
        return None
    state = _state(load, active)
    if state is None:
        return None
    return Service(unit=unit, state=state, load_state=load, active=state is UnitState.ACTIVE)


def _state(load: str | None, active: str | None) -> UnitState | None:
    if load == "not-found":
        return UnitState.NOT_FOUND
    if active is None:
        return UnitState.UNKNOWN  # systemctl printed nothing: it could not be asked
    try:
        return UnitState(active)
    except ValueError:
        return None


def _units(params: Mapping[str, Any]) -> tuple[str, ...]:
    raw = params.get("units")
    if raw is None:
        return DEFAULT_UNITS
    names = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    units = tuple(str(n).strip() for n in names if str(n).strip())
    bad = [u for u in units if not _UNIT.match(u)]
    if not units or bad:
        raise FleetfixError(f"services: 'units' must be systemd unit names, got {raw!r}")
    return units


def _command(params: Mapping[str, Any]) -> str:
    units = " ".join(shlex.quote(u) for u in _units(params))
    command = (
        f"{unless_installed(['systemctl'])}echo {shlex.quote(ASKED)}; "
        f"for u in {units}; do "
        "printf '%s %s %s\\n' \"$u\" "
        '"$(systemctl show -p LoadState --value "$u" 2>/dev/null)" '
        '"$(systemctl is-active "$u" 2>/dev/null)"; '
        "done"
    )
    if params.get("units") is not None:
        return command
    return (
        f"{command}; s=$(pgrep -x {MPS_CONTROL} >/dev/null 2>&1; r=$?; "
        "if [ $r -eq 0 ]; then echo active; elif [ $r -eq 1 ]; then echo inactive; fi); "
        f"printf '%s %s\\n' {MPS_CONTROL} \"$s\""
    )


PROBE: Probe[ServicesFacts] = Probe(
    name=NAME,
    summary="State of GPU-node systemd units (persistenced, fabricmanager, dcgm, imex, ...) "
    "and the MPS control daemon",
    command=_command,
    parse=parse,
    params={
        "units": "unit names to check (list or comma-separated); default: "
        + ", ".join(DEFAULT_UNITS),
    },
)
