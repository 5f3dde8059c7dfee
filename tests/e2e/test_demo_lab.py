"""`make demo` shows the engine protecting nodes (issue 12): the demo's run (the Makefile's
playbook, inventory and drain_wait) on the demo's scenario, judged by the lab's truth.

Both protected nodes carry an Xid 79, so the playbook wants to reboot them: gpu005 runs alice's
job (deferred after drain_wait, job still running, never rebooted) and gpu014 was drained by bob
(left alone, untouched, his reason kept). The run must say so, while it runs and at the end.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import REPO, Run, fault_kinds, fleetfix_run, nodes, write_inventory
from tests.lab.support import running_lab

BUSY, HUMAN, RMA = "gpu005", "gpu014", "gpu007"
BOB_REASON = "reseat GPU 4, ticket OPS-1187"


@dataclass(frozen=True)
class Demo:
    """What `make demo` runs, read from the Makefile and the inventory it names."""

    playbook: str
    scenario: str
    drain_wait: str


def demo_target() -> Demo:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.partition("\ndemo:")[2].partition("\n\n")[0]
    run = re.search(
        r"fleetfix run playbooks/(\S+) -i (\S+) .*-e drain_wait=\$\((\w+)\) -e power_cycle=true",
        recipe,
    )
    assert run, recipe
    wait = re.search(rf"^{run[3]} := (\S+)$", makefile, re.M)
    inventory = (REPO / run[2]).read_text()
    scenario = re.search(r"^fleetfix_lab_scenario=(\S+)$", inventory, re.M)
    assert wait and scenario
    return Demo(run[1], scenario[1], wait[1])


@dataclass(frozen=True)
class Played:
    run: Run
    before: dict[str, dict[str, Any]]
    after: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    demo = demo_target()
    work = tmp_path_factory.mktemp("demo")
    with running_lab(demo.scenario, work / "lab", reboot_time=0.5) as lab:
        before = nodes(lab.truth())
        inventory = write_inventory(lab, work / "lab.ini")
        done = fleetfix_run(
            demo.playbook,
            inventory,
            work,
            *("-e", f"drain_wait={demo.drain_wait}", "-e", "power_cycle=true"),
        )
        yield Played(done, before, nodes(lab.truth()))


def test_the_demo_ends_as_the_makefile_says(played: Played) -> None:
    assert played.run.returncode == 2, played.run.output[-4000:]  # `make demo` accepts 0 or 2
    assert set(played.run.left) == {BUSY, RMA, HUMAN}


def test_the_human_drained_node_is_left_alone(played: Played) -> None:
    human, was = played.after[HUMAN], played.before[HUMAN]
    assert "xid" in fault_kinds(was)  # there was work the playbook wanted to do
    assert human["boots"] == was["boots"] == 1 and human["boot_id"] == was["boot_id"]
    assert human["slurm"]["drain"] and human["slurm"]["reason"] == BOB_REASON
    assert human["slurm"]["reason_user"] == "bob"
    assert human["audit"] == []  # not even drained again: nothing that changes a node ran
    said = f"left alone: owned by bob: {BOB_REASON}"
    assert f"[{HUMAN}] {said}" in played.run.stdout  # while it runs
    assert played.run.left[HUMAN] == said  # and in the end-of-run summary


def test_the_busy_node_keeps_its_job_and_is_not_rebooted(played: Played) -> None:
    busy, was = played.after[BUSY], played.before[BUSY]
    assert "xid" in fault_kinds(was)
    assert busy["boots"] == 1 and busy["boot_id"] == was["boot_id"]
    assert busy["slurm"]["job_id"] == was["slurm"]["job_id"] == 48213
    assert busy["gpu_processes"] == was["gpu_processes"] != []
    assert not any(e["tool"] in ("reboot", "shutdown", "scancel", "kill") for e in busy["audit"])
    # drained with fleetfix's reason (no new jobs land on a node with a GPU off the bus) and
    # left for the next run, which finishes the work once the job is gone
    assert busy["slurm"]["drain"] and busy["slurm"]["reason"].startswith("fleetfix: pending")
    deferred = played.run.left[BUSY]
    assert deferred.startswith("deferred: job(s) 48213 still running on gpu005")


def test_the_rest_of_the_demo_still_happens(played: Played) -> None:
    for fixed in ("gpu003", "gpu011"):
        node = played.after[fixed]
        assert "xid" not in fault_kinds(node) and node["boots"] == 2
        assert not node["slurm"]["drain"]
    rma = played.after[RMA]  # a warm reboot, then a cold cycle through its BMC, then left
    assert rma["boots"] == 3 and rma["power_cycles"] == 1, rma
    assert rma["slurm"]["drain"]
    assert "RMA candidate: run the field diagnostic" in rma["slurm"]["reason"], rma["slurm"]
    assert played.run.left[RMA].startswith("failed: ")


def test_the_demo_scenario_is_the_shipped_one() -> None:
    demo = demo_target()
    assert (demo.playbook, demo.scenario) == ("xid79.yml", "xid79")
    assert Path(REPO / "playbooks" / demo.playbook).exists()
