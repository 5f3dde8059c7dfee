"""Run the real `fleetfix run` CLI against a running lab and read its recap and truth."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetfix.lab.control import LabHandle
from fleetfix.lab.embedded import connection_vars

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"

RECAP = re.compile(
    r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)"
    r"\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)"
    r"\s+ignored=(?P<ignored>\d+)\s*$",
    re.M,
)

# Vars that make the CLI reach the lab already running, instead of starting an embedded one.
_CONNECTION_KEYS = (
    "ansible_port",
    "ansible_user",
    "ansible_ssh_private_key_file",
    "fleetfix_known_hosts",
)


@dataclass(frozen=True, slots=True)
class Run:
    """One finished `fleetfix run`: exit code, output and the parsed PLAY RECAP."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        """host -> {ok, changed, unreachable, failed, skipped, rescued, ignored}."""
        return {
            found["host"]: {
                key: int(value) for key, value in found.groupdict().items() if key != "host"
            }
            for found in RECAP.finditer(self.stdout)
        }

    @property
    def output(self) -> str:
        """Both streams, for assertion messages."""
        return f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def write_inventory(lab: LabHandle, path: Path) -> Path:
    """The lab's inventory without its scenario line, plus the vars that reach the running lab."""
    kept = [
        line
        for line in lab.inventory_path.read_text().splitlines()
        if not line.startswith("fleetfix_lab_scenario=")
    ]
    common = next(iter(connection_vars(lab).values()))
    extra = [f"{key}={common[key]}" for key in _CONNECTION_KEYS]
    text = "\n".join(kept)
    if "[all:vars]" in text:
        text = text.replace("[all:vars]", "[all:vars]\n" + "\n".join(extra), 1)
    else:
        text += "\n[all:vars]\n" + "\n".join(extra)
    path.write_text(text + "\n")
    return path


def fleetfix_run(
    playbook: str, inventory: Path, workdir: Path, *extra: str, timeout: float = 150.0
) -> Run:
    """`fleetfix run playbooks/PLAYBOOK -i INVENTORY --yes` in a subprocess, plain output."""
    argv = [
        sys.executable,
        "-m",
        "fleetfix",
        "run",
        str(PLAYBOOKS / playbook),
        "-i",
        str(inventory),
        "--yes",
        "--journal",
        str(workdir / "j.sqlite"),
        *extra,
    ]
    env = {key: value for key, value in os.environ.items() if key != "FLEETFIX_DEBUG"}
    env["NO_COLOR"] = "1"
    done = subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=timeout, env=env, cwd=workdir
    )
    return Run(done.returncode, done.stdout, done.stderr)


def nodes(truth: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per node truth, keyed by node name."""
    found: dict[str, dict[str, Any]] = truth["nodes"]
    return found


def fault_kinds(truth: dict[str, Any], node: str) -> set[str]:
    """The kinds of fault still present on `node`."""
    return {fault["kind"] for fault in nodes(truth)[node]["faults"]}
