"""The lab: a simulated GPU cluster whose nodes are real SSH servers (DESIGN.md section 12).

One server process (`python -m fleetfix.lab serve`) listens on every node's own loopback
address, runs each command in a real bash sandboxed per node, and answers the emulated GPU
tools (nvidia-smi, dmesg, scontrol, ...) from in-memory node state. It is a world apart from
the engine: nothing here imports fleetfix's engine, and the engine only sees SSH hosts.

    async with LabServer.start("xid79", state_dir) as lab:
        lab.hosts, lab.port, lab.client_key, lab.known_hosts, lab.truth()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetfix.lab.control import LabHandle, LabServer, astart_lab, find_lab, start_lab
    from fleetfix.lab.embedded import attach_lab, connection_vars, embedded_lab, ensure_lab
    from fleetfix.lab.scenario import Scenario
    from fleetfix.lab.scenario_file import load_scenario, shipped_scenarios

_HOMES = {
    "LabHandle": "control",
    "LabServer": "control",
    "astart_lab": "control",
    "find_lab": "control",
    "start_lab": "control",
    "attach_lab": "embedded",
    "connection_vars": "embedded",
    "embedded_lab": "embedded",
    "ensure_lab": "embedded",
    "Scenario": "scenario",
    "load_scenario": "scenario_file",
    "shipped_scenarios": "scenario_file",
}


def __getattr__(name: str) -> Any:
    """The public names load with their module on first use (PEP 562): `fleetfix run` builds
    the lab's CLI parser at every start and must not pay for the whole lab."""
    if name not in _HOMES:
        raise AttributeError(f"module 'fleetfix.lab' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fleetfix.lab.{_HOMES[name]}"), name)


__all__ = [
    "LabHandle",
    "LabServer",
    "Scenario",
    "astart_lab",
    "attach_lab",
    "connection_vars",
    "embedded_lab",
    "ensure_lab",
    "find_lab",
    "load_scenario",
    "shipped_scenarios",
    "start_lab",
]
