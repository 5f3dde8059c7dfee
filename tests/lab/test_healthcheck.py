"""`fleetfix healthcheck` run ON lab nodes (through the lab's SSH, as slurmd would run it on the
node): its exit code, and the node's Slurm state afterwards as the lab's truth says."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.lab.control import LabHandle
from tests.lab.support import Result, run, running_lab

SCENARIO = """\
name: healthcheck
description: one healthy node and one of each fault the health check must see
fleet:
  spines: 1
  leaves: 1
  racks: 1
  nodes_per_rack: 6
  gpus_per_node: 8
  driver_version: "550.90.07"
  node_name: "gpu{:03d}"
reboot_time: 1s
nodes:
  gpu002:
    xid: {code: 79, gpu: 2, recovery: reboot, ago: 5m}
  gpu003:
    xid: {code: 79, gpu: 5, recovery: reboot, ago: 5m}
    slurm: {state: drained, reason: "bad DIMM B2, ticket OPS-1187", user: bob}
  gpu004:
    hung_nvidia_smi: true
  gpu005:
    row_remap: {gpu: 4, failure: true, uncorrectable: 3}
  gpu006:
    xid: {code: 79, gpu: 1, recovery: reboot, ago: 5m}
"""
SLURM_KILLS_AFTER = 60.0
HEALTHCHECK = f"{sys.executable} -m fleetfix healthcheck"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    root = tmp_path_factory.mktemp("healthcheck")
    scenario = root / "healthcheck.yml"
    scenario.write_text(SCENARIO)
    with running_lab(str(scenario), Path(root / "state")) as handle:
        yield handle


def on_node(lab: LabHandle, node: str, options: str = "") -> Result:
    return asyncio.run(run(lab, node, f"{HEALTHCHECK} {options}", timeout=90))


def slurm(lab: LabHandle, node: str) -> dict[str, object]:
    state: dict[str, object] = lab.truth()["nodes"][node]["slurm"]
    return state


def test_healthy_node_exits_0_and_stays_in_service(lab: LabHandle) -> None:
    result = on_node(lab, "gpu001")
    assert result.rc == 0, result
    assert "healthy" in result.stdout and result.stderr == ""
    assert slurm(lab, "gpu001")["drain"] is False
    assert slurm(lab, "gpu001")["reason"] is None


def test_xid79_node_is_drained_with_a_fleetfix_reason(lab: LabHandle) -> None:
    result = on_node(lab, "gpu002")
    assert result.rc == 1, result
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
    after = slurm(lab, "gpu002")
    assert after["drain"] is True
    assert str(after["reason"]).startswith("fleetfix: healthcheck: ")
    assert "7 of 8 GPUs" in str(after["reason"])
    # Run again: drained by fleetfix already, nothing rewritten.
    assert on_node(lab, "gpu002").rc == 1
    assert slurm(lab, "gpu002")["reason"] == after["reason"]


def test_human_drained_node_is_left_alone(lab: LabHandle) -> None:
    before = slurm(lab, "gpu003")
    result = on_node(lab, "gpu003")
    assert result.rc == 3, result
    assert "someone else" in result.stderr
    assert slurm(lab, "gpu003") == before
    assert before["reason"] == "bad DIMM B2, ticket OPS-1187"


def test_hung_nvidia_smi_finishes_well_inside_slurms_deadline(lab: LabHandle) -> None:
    started = time.monotonic()
    result = on_node(lab, "gpu004")
    elapsed = time.monotonic() - started
    assert result.rc == 1, result
    assert elapsed < SLURM_KILLS_AFTER, f"took {elapsed:.1f}s"
    assert "nvidia-smi hung" in str(slurm(lab, "gpu004")["reason"])


def test_row_remap_failure_drains_an_rma_candidate(lab: LabHandle) -> None:
    result = on_node(lab, "gpu005")
    assert result.rc == 1, result
    reason = str(slurm(lab, "gpu005")["reason"])
    assert "RMA candidate: run the field diagnostic" in reason and "needs RMA" not in reason


def test_dry_run_decides_but_does_not_drain(lab: LabHandle) -> None:
    result = on_node(lab, "gpu006", "--dry-run")
    assert result.rc == 2, result
    assert "would run scontrol update NodeName=gpu006 State=DRAIN" in result.stderr
    assert slurm(lab, "gpu006")["drain"] is False


def test_checks_can_be_chosen(lab: LabHandle) -> None:
    # Only the kernel log: Xid 79 is there, so still unhealthy (dry run: nothing changes).
    only_log = on_node(lab, "gpu006", "--check xid --dry-run")
    assert only_log.rc == 2 and "Xid 79" in only_log.stderr, only_log
    # Expecting 7 GPUs and skipping the log: the count check alone still sees the lost GPU.
    counted = on_node(lab, "gpu006", "--skip xid --gpus 7 --dry-run")
    assert counted.rc == 2, counted


def test_bad_options_exit_5(lab: LabHandle) -> None:
    assert on_node(lab, "gpu001", "--timeout 75").rc == 5
    assert on_node(lab, "gpu001", "--check nvidia_smi --skip nvidia_smi").rc == 5
