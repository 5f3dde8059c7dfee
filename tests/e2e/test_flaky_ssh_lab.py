"""Issue 19 on the `flaky-ssh` lab (tests/e2e/scenarios/flaky-ssh.yml), judged by the lab's
truth: connections that drop are reconnected for read-only commands, an action whose
connection dropped is settled by evidence, and a node that cannot be kept connected is named
"unreachable: needs a human" (exit 4), never left in service in silence.

fl01's connections drop at their sixth command, fl02's at their first, fl03's never; each
has an Xid 79 that a reboot cures.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import Run, fault_kinds, fleetfix_run, nodes, run_env, write_inventory
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(600)

SCENARIO = Path(__file__).parent / "scenarios" / "flaky-ssh.yml"
NEEDS_A_HUMAN = "unreachable: needs a human"


@dataclass(frozen=True, slots=True)
class FlakyLab:
    handle: LabHandle
    inventory: Path
    base: Path

    def run(self, name: str, *extra: str) -> Run:
        workdir = self.base / name
        workdir.mkdir()
        return fleetfix_run("xid79.yml", self.inventory, workdir, "-v", *extra, timeout=300)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlakyLab]:
    base = tmp_path_factory.mktemp("flaky-ssh")
    with running_lab(str(SCENARIO), base / "lab", reboot_time=0.3) as handle:
        yield FlakyLab(handle, write_inventory(handle, base / "lab.ini"), base)


def test_a_node_whose_connections_drop_is_still_repaired(lab: FlakyLab) -> None:
    before = nodes(lab.handle.truth())["fl01"]
    assert "xid" in fault_kinds(before)

    done = lab.run("fl01", "--limit", "fl01")

    assert done.returncode == 0, done.output
    assert done.recap["fl01"]["unreachable"] == 0, done.output
    assert "reconnecting in 0.5s (try 2) for a read-only command" in done.stdout, done.output
    after = nodes(lab.handle.truth())["fl01"]
    assert fault_kinds(after) == {"flaky_ssh"}  # the Xid 79 is gone; the link stays flaky
    assert after["boots"] == before["boots"] + 1  # rebooted once, never twice
    assert after["slurm"]["drain"] is False  # back in service, repaired


def test_a_node_that_drops_every_connection_needs_a_human(lab: FlakyLab) -> None:
    before = nodes(lab.handle.truth())["fl02"]

    done = lab.run("fl02", "--limit", "fl02")

    # Its batch failed whole, so max_fail_percentage stops the run (exit 6, as for any node
    # that fails alone in its batch); the node is named unreachable, not left in silence.
    assert done.returncode == 6, done.output
    assert done.recap["fl02"]["unreachable"] == 1, done.output
    why = done.left["fl02"]
    assert why.startswith("unreachable: read the kernel Xid log: connection lost"), why
    assert why.endswith(f"(on 4 connections in a row); {NEEDS_A_HUMAN}"), why
    assert nodes(lab.handle.truth())["fl02"] == before  # nothing was done to it


def test_probing_a_node_that_drops_every_connection_exits_4(lab: FlakyLab) -> None:
    argv = [sys.executable, "-m", "fleetfix", "probe", "-i", str(lab.inventory)]
    done = subprocess.run(
        [*argv, "--limit", "fl02,fl03", "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=run_env(),
        cwd=lab.base,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert NEEDS_A_HUMAN in done.stdout, done.stdout
    assert "fl03" in done.stdout
