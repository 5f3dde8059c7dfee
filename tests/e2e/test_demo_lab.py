"""`make demo` shows the engine protecting nodes (issue 12): the demo's run (the Makefile's
playbook, inventory and drain_wait) on the demo's scenario, judged by the lab's truth. Its last
15 lines tell what happened to each node and what to do next (issue 20).

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
FIXED = ("gpu003", "gpu011")
BOB_REASON = "reseat GPU 4, ticket OPS-1187"
VERDICTS = {BUSY: "deferred", RMA: "needs RMA", HUMAN: "left alone"} | dict.fromkeys(FIXED, "fixed")
"""Every host of the demo that does not end healthy, with the label of its verdict."""


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
    workdir: Path

    @property
    def run_id(self) -> str:
        found = re.search(r"^run id: (\S+)", self.run.stdout, re.M)
        assert found, self.run.output
        return found[1]


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
            *("--report", str(work / "demo-report.json")),
        )
        yield Played(done, before, nodes(lab.truth()), work)


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
    assert played.run.left[RMA].startswith("needs RMA: ")


def test_the_last_15_lines_tell_each_node_and_the_next_step(played: Played) -> None:
    tail = played.run.stdout.splitlines()[-15:]
    text = "\n".join(tail)
    for host, label in VERDICTS.items():  # each not-healthy host on its verdict's group line
        assert any(
            line.startswith(f"  {label} ") and host in line.partition(": ")[2] for line in tail
        ), (host, label, text)
    assert any(line.startswith("  healthy 11: gpu[") for line in tail), text
    assert f"(owned by bob: {BOB_REASON})" in text and "job(s) 48213" in text  # owner, job
    retry = f".fleetfix/retry/{played.run_id}.txt"
    command = next(line for line in tail if line.startswith(f"  deferred {BUSY}: fleetfix run"))
    assert command.endswith(f" --limit @{retry}"), command
    assert " -i " in command and "xid79.yml" in command
    assert f"needs RMA {RMA}: open the RMA ticket with the evidence in " in text
    assert str(played.workdir / "demo-report.json") in text
    assert f"left alone {HUMAN}: ask the owner" in text
    assert (played.workdir / retry).read_text().split() == sorted([BUSY, RMA, HUMAN])


def test_the_summary_comes_after_everything_else(played: Played) -> None:
    out = played.run.stdout
    summary = out.rindex("SUMMARY (run ")
    for block in ("PLAY RECAP", "LEFT UNHEALTHY OR UNTOUCHED", "TOPOLOGY", "ACTIONS TAKEN"):
        assert out.index(block) < summary, block
    assert out.count(f"job(s) 48213 still running on {BUSY} after") == 2  # the list, the summary
    actions = out.partition("ACTIONS TAKEN")[2].partition("report: ")[0]
    assert actions.count(f"  {RMA}  slurm_drain  ") == 1, actions  # drained twice: one line


def test_the_demo_scenario_is_the_shipped_one() -> None:
    demo = demo_target()
    assert (demo.playbook, demo.scenario) == ("xid79.yml", "xid79")
    assert Path(REPO / "playbooks" / demo.playbook).exists()
