"""A busy node never holds the fleet (issue 19), judged on the lab: its truth, its audit of
disruptive calls and the run's JSON report.

tests/e2e/scenarios/busy-parking.yml: gpu01 (batch 1 of 5) has Xid 79 under dave's job 51234;
gpu03, gpu05 (a reboot fixes them) and gpu07 (GPU 3 stays gone) come in later batches.
xid79.yml with `-e drain_wait=60s`, two runs on fresh labs at once: in one the job outlives
the wait, in the other dave cancels it while gpu01 is parked.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import Run, node_shell, nodes, run_argv, run_env, write_inventory
from tests.e2e.safety_support import action_rows, harmful, is_reboot, unjournaled
from tests.lab.support import running_lab
from tests.support import wait_until

pytestmark = pytest.mark.timeout(400)

SCENARIO = Path(__file__).parent / "scenarios" / "busy-parking.yml"
DRAIN_WAIT = 60.0
BUSY, JOB = "gpu01", 51234
FIXABLE = ("gpu03", "gpu05")
GONE = "gpu07"


@dataclass(frozen=True, slots=True)
class Finished:
    run: Run
    truth: dict[str, dict[str, Any]]
    audit: dict[str, list[dict[str, Any]]]
    report: dict[str, Any]
    unjournaled: list[str]
    took: float


def _pending(lab: LabHandle) -> bool:
    reason = str(lab.truth()["nodes"][BUSY]["slurm"]["reason"] or "")
    return reason.startswith("fleetfix: pending")


def _finished(base: Path, *, cancel_when_parked: bool) -> Finished:
    with running_lab(str(SCENARIO), base / "lab", reboot_time=0.5) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        extra = ("-e", f"drain_wait={DRAIN_WAIT:.0f}s", "--report", str(base / "report.json"))
        argv = run_argv("xid79.yml", inventory, base / "j.sqlite", *extra)
        started = time.monotonic()
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env(), cwd=base
        ) as process:
            if cancel_when_parked:
                parked = wait_until(lambda: _pending(lab) or process.poll() is not None, 120)
                assert parked and _pending(lab), "gpu01 was never parked"
                node_shell(lab, BUSY, f"scancel {JOB}", user="dave")
            stdout, stderr = process.communicate(timeout=300)
        took = time.monotonic() - started
        run = Run(process.returncode, stdout, stderr)
        report = json.loads((base / "report.json").read_text())
        audit = lab.audit()
        missing = unjournaled(audit, action_rows(base / "j.sqlite"))
        return Finished(run, nodes(lab.truth()), audit, report, missing, took)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Finished, Finished]]:
    with ThreadPoolExecutor(2, thread_name_prefix="parking") as pool:
        outlives = pool.submit(
            _finished, tmp_path_factory.mktemp("outlives"), cancel_when_parked=False
        )
        cancelled = pool.submit(
            _finished, tmp_path_factory.mktemp("cancelled"), cancel_when_parked=True
        )
        yield outlives.result(), cancelled.result()


def _host(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(h for h in report["hosts"] if h["name"] == name)


def _at(entries: list[dict[str, Any]], word: str) -> list[float]:
    return [float(e["at"]) for e in entries if any(word in a for a in e["argv"])]


def test_the_rest_of_the_fleet_is_repaired_before_the_busy_nodes_wait_ends(
    runs: tuple[Finished, Finished],
) -> None:
    done = runs[0]
    out = done.run.output
    drained_at = min(_at(done.audit[BUSY], "State=DRAIN"))
    deadline = drained_at + DRAIN_WAIT
    for name in FIXABLE:
        node = done.truth[name]
        assert node["boots"] == 2 and not node["slurm"]["drain"], f"{name}: {node}\n{out}"
        assert "xid" not in {f["kind"] for f in node["faults"]}, node["faults"]
        (resumed,) = _at(done.audit[name], "State=RESUME")
        (rebooted,) = [float(e["at"]) for e in done.audit[name] if is_reboot(e)]
        assert drained_at < rebooted < resumed < deadline, (name, drained_at, resumed, out)
        assert _host(done.report, name)["left"] is None
    gone = done.truth[GONE]
    assert gone["boots"] == 2 and gone["slurm"]["drain"], f"{gone}\n{out}"
    assert min(e["at"] for e in done.audit[GONE]) < deadline, "gpu07 waited for dave's job"
    assert done.unjournaled == [], done.unjournaled


def test_a_job_that_outlives_the_wait_leaves_the_node_deferred_and_untouched(
    runs: tuple[Finished, Finished],
) -> None:
    done = runs[0]
    out = done.run.output
    busy = done.truth[BUSY]
    reason = str(busy["slurm"]["reason"])
    assert busy["slurm"]["drain"] and reason.startswith("fleetfix: pending"), f"{reason}\n{out}"
    assert f"waiting for job(s) {JOB}" in reason, reason
    assert busy["slurm"]["job_id"] == JOB and len(busy["gpu_processes"]) == 2
    assert busy["boots"] == 1 and [e for e in done.audit[BUSY] if harmful(e)] == []
    left = _host(done.report, BUSY)["left"]
    assert left["kind"] == "deferred", left
    assert left["reason"].startswith(f"deferred: job(s) {JOB} still running on {BUSY} after 60s")
    assert f"parked: job(s) {JOB} still running on {BUSY}" in done.run.stdout, out
    assert done.took >= DRAIN_WAIT, done.took  # the wait was waited out (a slow machine only adds)
    assert done.run.returncode == 2, out  # gpu07 failed, gpu01 deferred: no hold, no stop


def test_a_job_that_ends_while_parked_gets_the_node_repaired_in_the_same_run(
    runs: tuple[Finished, Finished],
) -> None:
    done = runs[1]
    out = done.run.output
    busy = done.truth[BUSY]
    assert busy["boots"] == 2, f"{busy}\n{out}"
    assert not busy["slurm"]["drain"] and busy["slurm"]["reason"] is None, busy["slurm"]
    assert "xid" not in {f["kind"] for f in busy["faults"]}, busy["faults"]
    assert _host(done.report, BUSY)["left"] is None
    assert f"revisit: {BUSY}" in done.run.stdout, out
    (cancelled,) = [float(e["at"]) for e in done.audit[BUSY] if e["tool"] == "scancel"]
    (rebooted,) = [float(e["at"]) for e in done.audit[BUSY] if is_reboot(e)]
    (resumed,) = _at(done.audit[BUSY], "State=RESUME")
    drained_at = min(_at(done.audit[BUSY], "State=DRAIN"))
    # dave's scancel, then fleetfix's reboot and resume, before the wait would have ended
    assert cancelled < rebooted < resumed < drained_at + DRAIN_WAIT, done.audit[BUSY]
    for name in FIXABLE:
        assert done.truth[name]["boots"] == 2 and not done.truth[name]["slurm"]["drain"]
    assert done.unjournaled == [], done.unjournaled
    assert done.run.returncode == 2, out  # gpu07 failed
