"""The shipped xid79 and nccl-health playbooks on the lab, judged by the lab's truth."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleetfix.events import HostBackInService, HostLeft, HostOutOfService
from fleetfix.journal import Journal
from fleetfix.lab.control import LabHandle
from fleetfix.lab.embedded import connection_vars
from fleetfix.report.json import schema_path
from tests.e2e.labrun import nodes
from tests.lab.support import running_lab
from tests.unit.report.schema_check import validate

ROOT = Path(__file__).resolve().parents[2]
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class Lab:
    handle: LabHandle
    inventory: Path
    journal: Path

    def run(self, playbook: str, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [
            sys.executable,
            "-m",
            "fleetfix",
            "run",
            str(ROOT / "playbooks" / playbook),
            "-i",
            str(self.inventory),
            "--yes",
            "--journal",
            str(self.journal),
            *extra,
        ]
        env = {**os.environ, "NO_COLOR": "1"}
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=400, check=False, cwd=ROOT
        )

    def truth(self) -> dict[str, Any]:
        return nodes(self.handle.truth())


def lab_inventory(handle: LabHandle, path: Path) -> Path:
    """The lab's own inventory, reaching this lab (not an embedded one) on its port and key."""
    text = handle.inventory_path.read_text()
    lines = [line for line in text.splitlines() if not line.startswith("fleetfix_lab_scenario")]
    common = next(iter(connection_vars(handle).values()))
    lines += [f"{k}={v}" for k, v in common.items() if k != "ansible_host"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def xid79_lab(tmp_path: Path) -> Iterator[Lab]:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.5) as handle:
        yield Lab(handle, lab_inventory(handle, tmp_path / "lab.ini"), tmp_path / "j.sqlite")


@pytest.fixture
def bad_leaf_lab(tmp_path: Path) -> Iterator[Lab]:
    with running_lab("bad-leaf", tmp_path / "lab") as handle:
        yield Lab(handle, lab_inventory(handle, tmp_path / "lab.ini"), tmp_path / "j.sqlite")


def kinds(node: dict[str, Any]) -> list[str]:
    return sorted(f["kind"] for f in node["faults"])


def changed_hosts(stdout: str) -> dict[str, int]:
    return {m[1]: int(m[3]) for m in RECAP.finditer(stdout)}


# The xid79 lab is the demo's: besides the three nodes the playbook works on, gpu005 (alice's
# job) and gpu014 (drained by bob) carry an Xid 79 the engine must not act on. drain_wait=3s
# defers the busy node quickly (the playbook waits 5 minutes by default).
DRAIN_WAIT = ("-e", "drain_wait=3s")


def test_xid79_check_mode_changes_nothing_and_shows_the_plan(xid79_lab: Lab) -> None:
    before = xid79_lab.truth()
    done = xid79_lab.run("xid79.yml", "--check", *DRAIN_WAIT)
    # 2: bob's node would be left alone and the busy node deferred, as in a live run
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr
    assert xid79_lab.truth() == before
    assert "[gpu003] would run: scontrol update NodeName=gpu003 State=DRAIN" in done.stdout
    assert re.search(r"\[gpu011\] would run: .*reboot", done.stdout)
    assert "[gpu011] would run: nohup sh -c 'sleep 1; systemctl reboot" in done.stdout
    assert "[gpu005] would run: nohup sh -c 'sleep 1; systemctl reboot" not in done.stdout
    # The plan is the real run's: the busy node's drain waits for its job, then defers it;
    # the steps after the drain (a reboot the job's processes would refuse) are not planned.
    assert "[gpu005]: FAILED! => " not in done.stdout
    assert "gpu005: deferred: check mode: slurm_drain: jobs are running on gpu005" in done.stdout
    assert "[gpu014] would run" not in done.stdout  # bob's: never touched
    assert "gpu014: left alone: owned by bob" in done.stdout


def test_xid79_fixes_what_a_reboot_fixes_and_leaves_the_rest_drained(xid79_lab: Lab) -> None:
    done = xid79_lab.run("xid79.yml", *DRAIN_WAIT)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr
    nodes = xid79_lab.truth()
    for fixed in ("gpu003", "gpu011"):
        assert "xid" not in kinds(nodes[fixed]), nodes[fixed]
        assert nodes[fixed]["boots"] == 2
        assert not nodes[fixed]["slurm"]["drain"]
    rma = nodes["gpu007"]
    assert "xid" in kinds(rma)
    assert rma["slurm"]["drain"]
    # No cold power cycle allowed in this run: left for a person with the BMC, not an RMA.
    reason = rma["slurm"]["reason"]
    assert reason.startswith("fleetfix:") and "needs a human: cold power cycle" in reason, reason
    assert rma["power_cycles"] == 0
    busy, human = nodes["gpu005"], nodes["gpu014"]
    assert busy["boots"] == 1 and busy["slurm"]["job_id"] is not None and busy["gpu_processes"]
    assert human["boots"] == 1 and human["slurm"]["reason"] == "reseat GPU 4, ticket OPS-1187"
    healthy = [n for name, n in nodes.items() if name not in ("gpu003", "gpu007", "gpu011")]
    assert all(n["boots"] == 1 for n in healthy)

    # Again: the RMA node is skipped, the fixed ones have nothing to do, bob's node is left
    # alone and the busy node deferred again (its job still runs); nothing is rebooted.
    again = xid79_lab.run("xid79.yml", *DRAIN_WAIT)
    assert again.returncode == 2, again.stdout[-3000:]
    assert {h for h, changed in changed_hosts(again.stdout).items() if changed} <= {"gpu005"}
    assert {name: n["boots"] for name, n in xid79_lab.truth().items()} == {
        name: n["boots"] for name, n in nodes.items()
    }


def test_rack_cap_holds_at_every_instant(xid79_lab: Lab) -> None:
    done = xid79_lab.run("xid79.yml", *DRAIN_WAIT)
    assert done.returncode == 2
    run_id = re.search(r"run id: (\S+)", done.stdout)
    assert run_id is not None
    rack = {name: n["rack"] for name, n in xid79_lab.truth().items()}
    journal = Journal(xid79_lab.journal)
    try:
        events = list(journal.events(run_id[1]))
    finally:
        journal.close()
    out: set[str] = set()
    worst = 0
    taken = 0
    for event in events:
        if isinstance(event, HostOutOfService):
            out.add(event.host)
            taken += 1
        elif isinstance(event, HostBackInService):
            out.discard(event.host)
        elif isinstance(event, HostLeft) and event.kind == "deferred":
            out.discard(event.host)  # its job still runs: it frees its place (docs/decisions.md)
        worst = max([worst, *Counter(rack[h] for h in out).values()])
    assert taken == 4  # gpu003, gpu011, gpu007 and the busy gpu005 (drained, then deferred)
    assert worst == 1  # max_unavailable_per: {rack: 1}, at every event of the run


def test_bad_leaf_is_named_and_its_nodes_are_not_drained(bad_leaf_lab: Lab, tmp_path: Path) -> None:
    reports = [tmp_path / "r.html", tmp_path / "r.json", tmp_path / "r.xml"]
    args = [a for p in reports for a in ("--report", str(p))]
    done = bad_leaf_lab.run("nccl-health.yml", *args)
    assert done.returncode == 6, done.stdout[-3000:] + done.stderr
    assert "sit under leaf leaf-03" in done.stdout and "suspect the leaf switch" in done.stdout
    nodes = bad_leaf_lab.truth()
    under = [name for name, n in nodes.items() if n["leaf"] == "leaf-03"]
    assert len(under) == 16
    assert not any(nodes[name]["slurm"]["drain"] for name in under)
    assert nodes["gpu006"]["slurm"]["drain"]  # the genuinely slow node is drained
    assert not nodes["gpu005"]["slurm"]["drain"]  # its pair-mate passed with another partner
    assert all(n["boots"] == 1 for n in nodes.values())
    # Every node was tested inside a reservation of its own, released after the tests, held
    # drains under leaf-03 included.
    assert bad_leaf_lab.handle.truth()["reservations"] == []
    creates = [
        name
        for name, node in nodes.items()
        if any(e["argv"][:2] == ["create", "reservation"] for e in node["audit"])
    ]
    assert len(creates) == 64

    data = json.loads(reports[1].read_text())
    validate(data, json.loads(schema_path().read_text()))  # the shipped JSON Schema
    assert data["schema"] == "fleetfix.report/v2"
    assert data["exit_code"] == 6
    suspects = [f for f in data["findings"] if f["kind"] == "leaf"]
    assert [f["domain"] for f in suspects] == ["leaf-03"]
    html = reports[0].read_text()
    assert (
        "leaf-03" in html
        and "SUSPECT" in html
        and "http" not in html.lower().replace("http-equiv", "")
    )
    suite = ET.parse(reports[2]).getroot()
    cases = suite.findall(".//testcase")
    # A case per host, named by its verdict, and one per finding (the suspect leaf's).
    named = {str(c.get("name")).partition(": ")[0] for c in cases}
    assert set(nodes) <= named
    assert any("leaf-03" in f"{c.get('classname')} {c.get('name')}" for c in cases)


def test_drain_with_wait_defers_a_node_whose_job_outlives_drain_wait(xid79_lab: Lab) -> None:
    """drain.yml -e wait=true: the idle node ends DRAINED; alice's job on gpu005 outlives
    drain_wait, so gpu005 stays draining with its job running, reported deferred (exit 2)."""
    done = xid79_lab.run(
        "drain.yml", "--limit", "gpu005,gpu006", "-e", "wait=true", "-e", "drain_wait=2s"
    )
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr
    nodes = xid79_lab.truth()
    idle, busy = nodes["gpu006"]["slurm"], nodes["gpu005"]["slurm"]
    assert idle["drain"] and idle["reason"].startswith("fleetfix: drained by operator (run "), idle
    assert busy["drain"] and busy["job_id"] is not None, busy
    assert nodes["gpu005"]["gpu_processes"], "the drain's wait must not touch the job"
    assert "deferred: job(s) 48213 still running on gpu005 after 2s" in done.stdout, done.stdout
