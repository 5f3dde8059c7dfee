"""The lab: a simulated GPU cluster whose nodes are real SSH servers (DESIGN.md section 12).

One server process (`python -m fleetfix.lab serve`) listens on every node's own loopback
address, runs each command in a real bash sandboxed per node, and answers the emulated GPU
tools (nvidia-smi, dmesg, scontrol, ...) from in-memory node state. It is a world apart from
the engine: nothing here imports fleetfix's engine, and the engine only sees SSH hosts.

    async with LabServer.start("xid79", state_dir) as lab:
        lab.hosts, lab.port, lab.client_key, lab.known_hosts, lab.truth()
"""

from fleetfix.lab.control import LabHandle, LabServer, astart_lab, find_lab, start_lab
from fleetfix.lab.embedded import attach_lab, connection_vars, embedded_lab, ensure_lab
from fleetfix.lab.scenario import Scenario
from fleetfix.lab.scenario_file import load_scenario, shipped_scenarios

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
