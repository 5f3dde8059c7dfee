"""The embedded lab: an inventory whose vars name a scenario makes `fleetfix run` start it.

`inventories/lab.ini` sets `fleetfix_lab_scenario=xid79`; the run calls `embedded_lab`, which
reuses a lab already running for that scenario (`fleetfix lab up`) or starts one for the run
and stops it afterwards, and hands back the connection vars to merge into every host.

The inventory `fleetfix lab up` writes also names its state dir (`fleetfix_lab_state_dir`):
a run with it attaches to that lab, whatever its port, and fails if it is not running; it
never starts another one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fleetfix.errors import LabError
from fleetfix.lab.control import LabHandle, astart_lab, default_state_dir, find_lab


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
    scenario: str, inventory_dir: Path | None = None, state_dir: Path | None = None
) -> LabHandle:
    """The lab for `scenario`: the one already running from its default state dir, or a new one.

    With `state_dir` (an inventory written by `fleetfix lab up`), only the lab running there.
    A lab this call starts is owned by the caller (its handle holds the process; stop it with
    `astop()`); a reused one is left running.
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
    return await astart_lab(_scenario_source(scenario, inventory_dir), state_dir)


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
    inventory: object = None,
    inventory_dir: Path | None = None,
    state_dir: Path | None = None,
) -> AsyncIterator[dict[str, dict[str, Any]]]:
    """Run-scoped lab: yields connection vars per host; stops the lab after if it started it.

    `state_dir` attaches to the lab running there (see `attach_lab`) instead.
    """
    handle = await ensure_lab(scenario, inventory_dir, state_dir)
    try:
        yield connection_vars(handle)
    finally:
        if handle.process is not None:
            await handle.astop()
