"""The embedded lab's port (issue 20): `make demo` must work when the scenario's port (2222) is
taken. A run whose scenario port another process holds starts the lab on a free port and says
which, in one line on stderr; `--lab-port PORT` chooses the port, and a taken one is a clear
error naming the option. The tests hold ports of their own, never 2222."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.labrun import run_env

NODE_ADDRESS = "127.10.1.1"  # the first node of any lab layout
SCENARIO = """\
name: port-taken
fleet: {{spines: 1, leaves: 1, racks: 1, nodes_per_rack: 2, node_name: "pt{{:02d}}"}}
ssh: {{port: {port}}}
"""
PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: ask the node its name
      shell: hostname
"""


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port a listener of this test holds on the lab's first node address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind((NODE_ADDRESS, 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def _workdir(tmp_path: Path, scenario_port: int) -> Path:
    (tmp_path / "port-taken.yml").write_text(SCENARIO.format(port=scenario_port))
    (tmp_path / "lab.ini").write_text(
        "[gpu]\npt01\npt02\n[all:vars]\nfleetfix_lab_scenario=port-taken.yml\n"
    )
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    return tmp_path


def _run(workdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "fleetfix", "run", "site.yml", "-i", "lab.ini", "--yes"]
    env = {**run_env(), "XDG_STATE_HOME": str(workdir / "state")}
    return subprocess.run(
        [*argv, "--journal", str(workdir / "j.sqlite"), *extra],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=workdir,
    )


def _served_port(workdir: Path) -> int:
    """The port the run's lab said, in its own log, that it listened on."""
    log = (workdir / "state" / "fleetfix" / "lab" / "port-taken" / "server.log").read_text()
    ports = re.findall(r"lab port-taken up: \d+ nodes, port (\d+)", log)
    assert len(ports) == 1, log
    return int(ports[0])


def test_a_taken_scenario_port_makes_the_lab_pick_a_free_one(
    tmp_path: Path, held_port: int
) -> None:
    done = _run(_workdir(tmp_path, held_port))
    assert done.returncode == 0, done.stdout + done.stderr
    said = re.findall(
        r"^fleetfix: lab port (\d+) is in use .* port (\d+) instead", done.stderr, re.M
    )
    assert len(said) == 1, done.stderr
    assert int(said[0][0]) == held_port and int(said[0][1]) == _served_port(tmp_path)
    assert "pt01" in done.stdout and "pt02" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_taken_lab_port_option_is_a_clear_error(tmp_path: Path, held_port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as spare:
        spare.bind((NODE_ADDRESS, 0))
        scenario_port = int(spare.getsockname()[1])  # free again once closed
    done = _run(_workdir(tmp_path, scenario_port), "--lab-port", str(held_port))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"--lab-port {held_port} (fleetfix_lab_port) is in use" in done.stderr
    assert f"{NODE_ADDRESS}:{held_port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_lab_port_option_chooses_the_port(tmp_path: Path, held_port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as spare:
        spare.bind((NODE_ADDRESS, 0))
        chosen = int(spare.getsockname()[1])
    # The scenario's own port is taken: with --lab-port the lab neither falls back nor says so.
    done = _run(_workdir(tmp_path, held_port), "--lab-port", str(chosen))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is in use" not in done.stderr
    assert _served_port(tmp_path) == chosen


@pytest.mark.parametrize("port", ["0", "65536", "ssh"])
def test_a_lab_port_that_is_no_port_is_a_usage_error(tmp_path: Path, port: str) -> None:
    done = _run(_workdir(tmp_path, 2222), "--lab-port", port)
    assert done.returncode == 5
    assert "--lab-port" in done.stderr and "port number" in done.stderr
