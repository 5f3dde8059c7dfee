"""`fleetfix lab up --state-dir D` then `fleetfix run -i D/inventory.ini`: the run reaches that
lab (whatever its port) and never starts another; with that lab down, the run fails clearly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.lab.control import find_lab, pid_alive
from fleetfix.lab.info import read_info
from tests.lab.support import processes_mentioning

REPO = Path(__file__).resolve().parents[2]


def fleetfix(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, with XDG_STATE_HOME inside `tmp`: a lab started behind our back lands there."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp / "xdg"), "FLEETFIX_DEBUG": "1"}
    return subprocess.run(
        [sys.executable, "-m", "fleetfix", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """The lab's state dir; whatever runs from it is stopped by PID at the end."""
    directory = tmp_path / "lab"
    try:
        yield directory
    finally:
        handle = find_lab(directory)
        if handle is not None:
            handle.stop()
        info = read_info(directory) if directory.exists() else None
        assert info is None or not pid_alive(info.pid)


def test_run_attaches_to_the_lab_that_wrote_the_inventory(state: Path, tmp_path: Path) -> None:
    up = fleetfix(
        tmp_path, "lab", "up", "--scenario", "xid79", "--state-dir", str(state), "--port", "0"
    )
    assert up.returncode == 0, up.stderr
    inventory = Path(up.stdout.splitlines()[-1])
    port = json.loads((state / "lab.json").read_text())["ssh_port"]
    assert port != 2222 and f"fleetfix_lab_state_dir={state}" in inventory.read_text()

    journal = str(tmp_path / "j.sqlite")
    playbook = str(REPO / "playbooks" / "xid79.yml")
    done = fleetfix(
        tmp_path, "run", playbook, "-i", str(inventory), "--yes", "--check", "--journal", journal
    )
    assert "Traceback" not in done.stderr, done.stderr
    # 2: the scenario's human-drained node (gpu014, Xid 79) is left alone, as a live run would
    assert done.returncode == 2, done.stdout + done.stderr
    assert "gpu014: left alone: owned by bob" in done.stdout
    handle = find_lab(state)
    assert handle is not None
    truth = handle.truth()["nodes"]
    assert all(node["commands"] > 0 for node in truth.values()), "every node was probed"
    assert handle.audit() == {name: [] for name in truth}, "--check disrupts nothing"
    assert not (tmp_path / "xdg" / "fleetfix" / "lab" / "xid79").exists(), "no second lab"

    down = fleetfix(tmp_path, "lab", "down", "--state-dir", str(state))
    assert down.returncode == 0 and not handle.alive()
    again = fleetfix(
        tmp_path, "run", playbook, "-i", str(inventory), "--yes", "--check", "--journal", journal
    )
    assert again.returncode == 1
    assert f"the inventory names the lab in {state}, but no lab is running there" in again.stderr
    assert f"fleetfix lab up --scenario xid79 --state-dir {state}" in again.stderr
    assert not (tmp_path / "xdg" / "fleetfix" / "lab" / "xid79").exists(), "no lab was started"
    assert not processes_mentioning(str(tmp_path)), "nothing left running"
