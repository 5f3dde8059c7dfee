"""`fleetfix triage` on the lab over real SSH (issue 23): the shipped `triage` scenario plants four
faults on alice's hung job 48213 (src/fleetfix/lab/scenarios/triage.yml): IB symbol errors on
gpu004's mlx5_3, bob's left-over process on gpu007, an uncorrected PCIe error on gpu010's GPU 5,
a rank on gpu013 that never entered allreduce 9001. The triage must name those four and nothing
else, with their evidence and the runbooks that fix them, and change nothing on any node."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import changed_nodes, nodes, run_env, write_inventory
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabHandle]:
    with running_lab("triage", tmp_path / "lab") as handle:
        yield handle


def _fleetfix(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetfix", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        env=run_env(),
        cwd=cwd,
    )


def _job_logs(tmp_path: Path) -> Path:
    """The job's log, as `fleetfix lab job-logs` writes it."""
    done = _fleetfix(
        "lab", "job-logs", "48213", "--scenario", "triage", "--out", "logs", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    return tmp_path / "logs" / "slurm-48213.out"


def test_triage_names_exactly_the_planted_suspects_and_changes_nothing(
    lab: LabHandle, tmp_path: Path
) -> None:
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    log = _job_logs(tmp_path)
    before = nodes(lab.truth())
    bob = next(p for p in before["gpu007"]["gpu_processes"] if p["job_id"] == 48100)

    done = _fleetfix(
        "triage", "48213", "-i", str(inventory), "--log", str(log), "--json", cwd=tmp_path
    )

    assert done.returncode == 2, done.stdout + done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    assert found["job"]["state"] == "RUNNING" and found["job"]["user"] == "alice"
    assert found["hosts"] == [f"gpu{n:03d}" for n in range(1, 17)] and found["missing"] == []
    suspects = {s["target"]: s for s in found["suspects"]}
    assert set(suspects) == {
        "gpu010 GPU 0000:c3:00.0",  # GPU 5 on the HGX board
        "gpu013 GPU cuda 3 (busId 61000)",
        "gpu004 mlx5_3/1",
        f"gpu007 pid {bob['pid']}",
    }, done.stdout
    assert [s["kind"] for s in found["suspects"]] == ["gpu", "gpu", "link", "process"]
    (aer,) = suspects["gpu010 GPU 0000:c3:00.0"]["evidence"]
    assert aer["source"] == "probe xid" and "PCIe uncorrected AER" in aer["text"]
    (hang,) = suspects["gpu013 GPU cuda 3 (busId 61000)"]["evidence"]
    assert hang["source"].startswith(f"log {log}:") and "SeqNum 9001" in hang["text"]
    (link,) = suspects["gpu004 mlx5_3/1"]["evidence"]
    assert link["text"].startswith("symbol_error +50 ")
    (orphan,) = suspects[f"gpu007 pid {bob['pid']}"]["evidence"]
    assert "of bob, job 48100 (ended), holds 40960 MiB" in orphan["text"]
    assert found["remediation"] == [
        f"fleetfix run playbooks/orphans.yml -i {inventory} --limit gpu007",
        f"fleetfix run playbooks/recover.yml -i {inventory} --limit gpu010,gpu013",
    ]
    # read-only: no node changed, the lab saw no disruptive call, alice's job still runs
    after = nodes(lab.truth())
    assert changed_nodes(before, after) == set(), done.stdout
    assert all(not calls for calls in lab.audit().values()), lab.audit()
    assert after["gpu007"]["slurm"]["job_id"] == 48213


def test_a_job_slurm_does_not_know_is_a_clear_error(lab: LabHandle, tmp_path: Path) -> None:
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    done = _fleetfix("triage", "99999", "-i", str(inventory), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "job 99999" in done.stderr and "Traceback" not in done.stderr
    bad = _fleetfix("triage", "48213; reboot", "-i", str(inventory), cwd=tmp_path)
    assert bad.returncode == 1 and "job must be a Slurm job id" in bad.stderr
    missing = _fleetfix("triage", "48213", "-i", str(inventory), "--log", "nope.out", cwd=tmp_path)
    assert missing.returncode == 1 and "--log nope.out" in missing.stderr
    (tmp_path / "fabric.yml").write_text("switches: [{name: leaf-01, kind: leaf}]\nlinks: [oops]\n")
    chart = _fleetfix(
        "triage", "48213", "-i", str(inventory), "--topology-file", "fabric.yml", cwd=tmp_path
    )
    assert chart.returncode == 1 and "fabric.yml" in chart.stderr, chart.stderr
    assert "Traceback" not in chart.stderr and lab.audit() == {n: [] for n in lab.audit()}
