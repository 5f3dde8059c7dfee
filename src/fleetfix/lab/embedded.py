"""The embedded lab: an inventory whose vars name a scenario makes `fleetfix run` start it.

`inventories/lab.ini` sets `fleetfix_lab_scenario=xid79`; the run calls `embedded_lab`, which
reuses a lab already running for that scenario (`fleetfix lab up`) or starts one for the run
and stops it afterwards, and hands back the connection vars to merge into every host.

The inventory `fleetfix lab up` writes also names its state dir (`fleetfix_lab_state_dir`):
a run with it attaches to that lab, whatever its port, and fails if it is not running; it
never starts another one.

A lab this module starts listens on the port `fleetfix_lab_port` names (`fleetfix run
--lab-port PORT` sets it), refused when taken; else on the scenario's port, or, when that one
is taken (another lab, a real sshd on 2222), on a free one, said in one line on stderr.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fleetfix.errors import LabError
from fleetfix.inventory import Inventory
from fleetfix.lab.control import LabHandle, astart_lab, default_state_dir, find_lab
from fleetfix.lab.layout import fleet_layout
from fleetfix.lab.scenario_file import load_scenario

LAB_PORT_VAR = "fleetfix_lab_port"
"""The inventory var (all hosts) that chooses the embedded lab's SSH port."""


def _scenario_source(scenario: str, inventory_dir: Path | None) -> str | Path:
    """A scenario path is relative to the inventory that names it; otherwise a shipped name."""
    if inventory_dir is not None and scenario.endswith((".yml", ".yaml")):
        candidate = inventory_dir / scenario
        if candidate.is_file():
            return candidate
    return scenario


def attach_lab(scenario: str, state_dir: Path) -> LabHandle:
    """The lab running from `state_dir` (written in the inventory by `fleetfix lab up`).

    Raises:
        LabError: no lab answers there, or it serves another scenario.
    """
    running = find_lab(state_dir)
    if running is None:
        raise LabError(
            f"the inventory names the lab in {state_dir}, but no lab is running there",
            hint=f"start it again: fleetfix lab up --scenario {scenario} --state-dir {state_dir}",
        )
    if running.scenario != Path(scenario).stem:
        raise LabError(
            f"the lab running from {state_dir} serves {running.scenario!r}, not {scenario!r}"
        )
    return running


async def ensure_lab(
    scenario: str,
    inventory_dir: Path | None = None,
    state_dir: Path | None = None,
    *,
    port: int | None = None,
) -> LabHandle:
    """The lab for `scenario`: the one already running from its default state dir, or a new one.

    With `state_dir` (an inventory written by `fleetfix lab up`), only the lab running there.
    A lab this call starts is owned by the caller (its handle holds the process; stop it with
    `astop()`); a reused one is left running. It listens on `port` (LabError when taken), else
    on the scenario's port, else on a free one (said on stderr).
    """
    if state_dir is not None:
        return attach_lab(scenario, state_dir)
    state_dir = default_state_dir(scenario)
    running = find_lab(state_dir)
    if running is not None:
        if running.scenario != Path(scenario).stem:
            raise LabError(
                f"the lab running from {state_dir} serves {running.scenario!r}, not {scenario!r}"
            )
        return running
    return await _start(_scenario_source(scenario, inventory_dir), state_dir, port)


async def _start(source: str | Path, state_dir: Path, chosen: int | None) -> LabHandle:
    addresses, scenario_port = _listen_plan(source)
    if chosen is not None:
        _refuse_taken(chosen, addresses)
        return await astart_lab(source, state_dir, port=chosen)
    taken = _taken_on(scenario_port, addresses) if scenario_port else None
    if taken is None:
        return await astart_lab(source, state_dir)
    handle = await astart_lab(source, state_dir, port=0)  # 0: the server picks a free port
    # The CLI prints; this one line is the lab's own notice, at the moment the choice is made.
    print(
        f"fleetfix: lab port {scenario_port} is in use ({taken}); the lab listens on port"
        f" {handle.port} instead (choose one with --lab-port PORT)",
        file=sys.stderr,
    )
    return handle


def _listen_plan(source: str | Path) -> tuple[list[str], int]:
    """The node addresses a lab of this scenario listens on, and the scenario's port."""
    scenario = load_scenario(source)
    nodes = fleet_layout(scenario.fleet, scenario.hardware_of)
    return [node.address for node in nodes], scenario.ssh_port


def _refuse_taken(port: int, addresses: Iterable[str]) -> None:
    taken = _taken_on(port, addresses)
    if taken is not None:
        raise LabError(
            f"--lab-port {port} ({LAB_PORT_VAR}) is in use ({taken})",
            hint="choose a free port, or leave --lab-port out: the lab then finds one itself",
        )


def _taken_on(port: int, addresses: Iterable[str]) -> str | None:
    """Where `port` cannot be listened on (`127.10.1.1:2222: Address already in use`), or None.

    A listener on the address or on the wildcard answers the bind with EADDRINUSE; a closed
    connection's TIME_WAIT does not (SO_REUSEADDR, as the lab's listeners set it)."""
    for address in addresses:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                return f"{address}:{port}: {exc.strerror or exc}"
    return None


def chosen_port(inventory: Inventory | None) -> int | None:
    """The port `fleetfix_lab_port` names (the first host tells, as for the scenario var).

    Raises:
        LabError: the value is not a port number.
    """
    names = inventory.host_names() if inventory is not None else []
    if inventory is None or not names:
        return None
    value = inventory.host_vars(names[0]).get(LAB_PORT_VAR)
    if value is None or value == "":
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if not 1 <= port <= 65535:
        raise LabError(f"{LAB_PORT_VAR} must be a port number (1-65535), got {value!r}")
    return port


def connection_vars(handle: LabHandle) -> dict[str, dict[str, Any]]:
    """Per lab host, the inventory vars that reach it (they override the inventory's own)."""
    common = {
        "ansible_port": handle.port,
        "ansible_user": handle.user,
        "ansible_ssh_private_key_file": str(handle.client_key),
        "fleetfix_known_hosts": str(handle.known_hosts),
    }
    return {name: {"ansible_host": address, **common} for name, address in handle.hosts.items()}


@asynccontextmanager
async def embedded_lab(
    scenario: str,
    inventory: Inventory | None = None,
    inventory_dir: Path | None = None,
    state_dir: Path | None = None,
) -> AsyncIterator[dict[str, dict[str, Any]]]:
    """Run-scoped lab: yields connection vars per host; stops the lab after if it started it.

    `state_dir` attaches to the lab running there (see `attach_lab`) instead. A lab it starts
    listens on the port the inventory's `fleetfix_lab_port` names, if any (see `ensure_lab`).
    """
    handle = await ensure_lab(scenario, inventory_dir, state_dir, port=chosen_port(inventory))
    try:
        yield connection_vars(handle)
    finally:
        if handle.process is not None:
            await handle.astop()
