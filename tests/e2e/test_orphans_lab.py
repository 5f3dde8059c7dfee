"""orphans.yml on the lab over real SSH, judged by lab truth (issue 23): a finished job's
left-over processes end and their GPU memory is free; a running job's processes are untouched
and still hold theirs; nothing is ended on a node someone else owns, nor by `--check`.

tests/e2e/scenarios/orphans.yml: gpu01 runs alice's job 48213 (GPUs 0, 1) beside bob's 40 GB
left-over of job 48100 (GPU 2); gpu02 is idle but for carol's left-overs of job 47001 (one
ignores SIGTERM); gpu03,
drained by dave, has the same kind of left-over.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import fleetfix_run, node_shell, nodes, write_inventory
from tests.e2e.safety_support import query
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(300)

SCENARIO = Path(__file__).parent / "scenarios" / "orphans.yml"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabHandle]:
    with running_lab(str(SCENARIO), tmp_path / "lab") as handle:
        yield handle


def _held(truth: dict[str, dict[str, Any]], node: str) -> list[tuple[int, int | None, int]]:
    """(GPU, job, MiB) of each process on the node's GPUs."""
    return sorted((p["gpu"], p["job_id"], p["used_mib"]) for p in truth[node]["gpu_processes"])


def _evidence(journal: Path) -> dict[str, str]:
    """host -> the orphans kill_orphans journaled with its start."""
    rows = query(journal, "SELECT host, evidence FROM actions WHERE action = 'kill_orphans'")
    return {str(host): json.loads(str(evidence))["orphans"] for host, evidence in rows}


def test_the_orphans_end_and_the_running_jobs_processes_keep_their_memory(
    lab: LabHandle, tmp_path: Path
) -> None:
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    before = nodes(lab.truth())
    running = [p["pid"] for p in before["gpu01"]["gpu_processes"] if p["job_id"] == 48213]
    assert _held(before, "gpu01") == [(0, 48213, 61234), (1, 48213, 61234), (2, 48100, 40960)]

    run = fleetfix_run("orphans.yml", inventory, tmp_path, "-e", "orphan_wait=1s")

    after = nodes(lab.truth())
    assert _held(after, "gpu01") == [(0, 48213, 61234), (1, 48213, 61234)], run.output
    assert [p["pid"] for p in after["gpu01"]["gpu_processes"]] == running
    assert after["gpu01"]["slurm"]["job_id"] == 48213
    assert _held(after, "gpu02") == [], run.output
    assert _held(after, "gpu03") == [(0, 47002, 40960)], run.output
    assert run.hosts_with("changed") == {"gpu01", "gpu02"}, run.output
    assert "owned by" in run.left.get("gpu03", ""), run.output
    # the lab's audit has each orphan's death and the signal that ended it: SIGTERM, and for
    # gpu02's rank that ignores it, SIGKILL after the wait; no other process was signalled
    kills = {node: [e for e in lab.audit()[node] if e["tool"] == "kill"] for node in after}
    assert [k["argv"][0] for k in kills["gpu01"]] == ["-TERM"], kills
    stubborn = next(p["pid"] for p in before["gpu02"]["gpu_processes"] if p["gpu"] == 1)
    assert sorted(k["argv"] for k in kills["gpu02"])[0] == ["-KILL", str(stubborn)], kills
    assert sorted(k["argv"][0] for k in kills["gpu02"]) == ["-KILL", "-TERM"], kills
    assert kills["gpu03"] == []
    # the evidence is journaled with the action: user, job, memory, command line
    evidence = _evidence(tmp_path / "j.sqlite")
    assert evidence["gpu02"].startswith("pid "), evidence
    assert "user carol job 47001 (not on the node any more)" in evidence["gpu02"]
    assert "40960 MiB on 00000000:" in evidence["gpu02"]
    assert evidence["gpu02"].endswith(": python3 eval.py")
    assert "user bob job 48100" in evidence["gpu01"] and "48213" not in evidence["gpu01"]


def test_check_lists_the_orphans_and_ends_nothing(lab: LabHandle, tmp_path: Path) -> None:
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    before = nodes(lab.truth())

    run = fleetfix_run("orphans.yml", inventory, tmp_path, "--check")

    after = nodes(lab.truth())
    for node in ("gpu01", "gpu02", "gpu03"):
        assert _held(after, node) == _held(before, node), run.output
    assert all(entry["tool"] != "kill" for entries in lab.audit().values() for entry in entries)
    assert "user bob job 48100" in run.stdout and "user carol job 47001" in run.stdout, run.output
    assert "user carol job 47002" not in run.stdout, run.output


def test_ps_on_a_node_shows_the_nodes_processes_not_the_machines(lab: LabHandle) -> None:
    truth = nodes(lab.truth())
    orphan = next(p["pid"] for p in truth["gpu01"]["gpu_processes"] if p["job_id"] == 48100)
    said = node_shell(lab, "gpu01", f"ps -o user=,cgroup=,args= -p {orphan},1")
    assert said.split() == [
        "bob",
        "0::/system.slice/slurmstepd.scope/job_48100/step_0/user/task_0",
        "python3",
        "pretrain.py",
    ]
