"""Run the real `fleetfix run` CLI against a running lab and read its recap and truth."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

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
            found["host"]: {key: int(found[key]) for key in RECAP.groupindex if key != "host"}
            for found in RECAP.finditer(self.stdout)
        }

    def hosts_with(self, counter: str) -> set[str]:
        """Hosts whose recap `counter` (changed, failed, ...) is not zero."""
        return {host for host, row in self.recap.items() if row[counter]}

    @property
    def left(self) -> dict[str, str]:
        """host -> why, from the list the run prints after the recap of the hosts it leaves
        unhealthy or untouched (each makes it exit non-zero)."""
        found: dict[str, str] = {}
        _, marker, rest = self.stdout.partition("LEFT UNHEALTHY OR UNTOUCHED")
        for line in rest.splitlines()[1:] if marker else ():
            if not line.startswith("  "):
                break
            host, _, why = line.strip().partition(": ")
            found[host] = why
        return found

    @property
    def output(self) -> str:
        """Both streams, for assertion messages."""
        return f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def write_inventory(lab: LabHandle, path: Path) -> Path:
    """The lab's inventory with its scenario line (which would make the CLI start a second,
    embedded lab) replaced by the vars that reach the running one."""
    dropped = ("fleetfix_lab_scenario=", *(f"{key}=" for key in _CONNECTION_KEYS))
    kept = [
        line for line in lab.inventory_path.read_text().splitlines() if not line.startswith(dropped)
    ]
    common = next(iter(connection_vars(lab).values()))
    extra = "\n".join(f"{key}={common[key]}" for key in _CONNECTION_KEYS)
    text = "\n".join(kept)
    if "[all:vars]" in kept:
        text = text.replace("[all:vars]", f"[all:vars]\n{extra}", 1)
    else:
        text += f"\n[all:vars]\n{extra}"
    path.write_text(text + "\n")
    return path


def run_argv(playbook: str | Path, inventory: Path, journal: Path, *extra: str) -> list[str]:
    """`fleetfix run` on a shipped playbook (or a path), --yes, its own journal."""
    return [
        sys.executable,
        "-m",
        "fleetfix",
        "run",
        str(PLAYBOOKS / playbook),
        "-i",
        str(inventory),
        "--yes",
        "--journal",
        str(journal),
        *extra,
    ]


def run_env() -> dict[str, str]:
    """Plain output, no debug tracebacks, unbuffered (the "run id:" line survives a kill -9)."""
    env = {key: value for key, value in os.environ.items() if key != "FLEETFIX_DEBUG"}
    env["NO_COLOR"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def fleetfix_run(
    playbook: str | Path, inventory: Path, workdir: Path, *extra: str, timeout: float = 240.0
) -> Run:
    """`fleetfix run PLAYBOOK -i INVENTORY --yes` in a subprocess, plain output; a bare name is
    one of the shipped playbooks."""
    argv = run_argv(playbook, inventory, workdir / "j.sqlite", *extra)
    done = subprocess.run(
        argv,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=run_env(),
        cwd=workdir,
    )
    return Run(done.returncode, done.stdout, done.stderr)


VOLATILE = ("commands",)
"""Truth keys that count the run's reads, not the node's state (SSH commands answered)."""


def nodes(truth: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per node truth, keyed by node name, without the counters of reads (VOLATILE): two
    readings are equal when the nodes are in the same state."""
    return {
        name: {key: value for key, value in node.items() if key not in VOLATILE}
        for name, node in truth["nodes"].items()
    }


def fault_kinds(node: dict[str, Any]) -> set[str]:
    """The kinds of fault still present on one node (an entry of `nodes(truth)`)."""
    return {fault["kind"] for fault in node["faults"]}


def changed_nodes(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> set[str]:
    """Nodes whose truth differs between two readings."""
    return {name for name, node in after.items() if node != before[name]}


def node_shell(lab: LabHandle, node: str, command: str, *, user: str = "root") -> str:
    """Run `command` on a lab node as `user` (the lab records it, e.g. as a drain's author);
    its stdout, or AssertionError when it fails."""
    return asyncio.run(_node_shell(lab, node, command, user))


async def _node_shell(lab: LabHandle, node: str, command: str, user: str) -> str:
    async with asyncssh.connect(
        lab.hosts[node],
        port=lab.port,
        username=user,
        client_keys=[str(lab.client_key)],
        known_hosts=str(lab.known_hosts),
    ) as conn:
        done = await asyncio.wait_for(conn.run(command, check=False), 30)
    assert done.exit_status == 0, f"{node}: {command!r} failed: {done.stderr!r}"
    return str(done.stdout or "")
