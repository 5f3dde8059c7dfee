"""The benchmark workload, written once for each contender: five probes per host.

fleetfix runs the five probes as probe steps; ansible-playbook runs each probe's exact command
as a `raw` task; the bare fan-out runs the same commands over asyncssh. So every contender asks
the lab for the same work and only the orchestration around it differs.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleetfix.lab.control import LabHandle
from fleetfix.lab.embedded import connection_vars

PROBE_NAMES = ("nvidia_smi", "xid", "gpu_processes", "shm", "services")
FORKS = 50
MAX_HANDSHAKES = 16  # fleetfix's default (SSHTransport, --max-handshakes)


@dataclass(frozen=True, slots=True)
class ProbeCommand:
    """One probe and the shell command it runs with default parameters."""

    probe: str
    command: str


def probe_commands() -> tuple[ProbeCommand, ...]:
    """Each probe's `PROBE.command({})`, the text every contender sends."""
    found = []
    for name in PROBE_NAMES:
        module = importlib.import_module(f"fleetfix.probes.{name}")
        found.append(ProbeCommand(name, module.PROBE.command({})))
    return tuple(found)


def fleetfix_playbook() -> str:
    """A 5-probe fleetfix playbook over every host."""
    play = {
        "name": "benchmark: five probes",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [{"name": f"probe {name}", "probe": name} for name in PROBE_NAMES],
    }
    return _dump([play])


def ansible_playbook(commands: Sequence[ProbeCommand]) -> str:
    """The same five commands as `raw` tasks (no module, no Python needed on the node)."""
    play = {
        "name": "benchmark: five probe commands",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [{"name": f"probe {c.probe}", "raw": c.command} for c in commands],
    }
    return _dump([play])


def _dump(document: Any) -> str:
    # Width: keep each long command on one line so the file reads like a hand-written one.
    return yaml.safe_dump(document, sort_keys=False, width=1_000_000)


def lab_inventory(lab: LabHandle) -> str:
    """The lab's own inventory minus its scenario line, with connection vars in [all:vars].

    Without `fleetfix_lab_scenario` the run does not start (or reuse) an embedded lab; it just
    connects to the hosts, as it would to a real cluster.
    """
    text = lab.inventory_path.read_text(encoding="utf-8")
    hosts_part = text.split("[all:vars]", 1)[0].strip()
    # The lab's header comment talks about embedded mode, which this file does not use.
    body = [line for line in hosts_part.splitlines() if not line.startswith("#")]
    common = next(iter(connection_vars(lab).values()))
    shared = {key: value for key, value in common.items() if key != "ansible_host"}
    header = f"# benchmarks/run.py: lab {lab.scenario} ({len(lab.hosts)} nodes) on port {lab.port}"
    lines = [header, *body, "", "[all:vars]", *(f"{k}={v}" for k, v in shared.items())]
    return "\n".join(lines) + "\n"


def first_hosts(lab: LabHandle, count: int) -> dict[str, str]:
    """The first `count` lab hosts in name order (name -> address; gpu9999 before gpu10000)."""
    names = sorted(lab.hosts, key=lambda name: (len(name), name))[:count]
    return {name: lab.hosts[name] for name in names}


def write_limit(path: Path, names: Sequence[str]) -> Path:
    """A `--limit @file` host list (one name a line), understood by fleetfix and Ansible."""
    path.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
    return path
