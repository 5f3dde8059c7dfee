"""`reboot` with `via: slurm`: `scontrol reboot ASAP nextstate=...` on the lab, run by the real
`fleetfix run`. Outcomes from the lab's truth (boots, Slurm state) and the run's journal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import Run, fleetfix_run, write_inventory
from tests.e2e.safety_support import query
from tests.lab.support import running_lab

PLAYBOOK = """\
- name: reboot through Slurm
  hosts: all
  tasks:
    - name: drain
      action: {name: slurm_drain, reason: "fleetfix: xid79 remediation"}
    - name: reboot through Slurm
      action: {name: reboot, via: "{{ via | default('slurm') }}", reason: "xid79 reboot"}
      expect_unreachable: 2m
      verify:
        - name: every GPU is back
          probe: {name: nvidia_smi, expected_gpus: 8}
          register: smi_after
        - name: all eight
          assert:
            that: smi_after.facts.count_ok
    - name: return to service
      when: resume_after | default(true) | bool
      action: slurm_resume
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabHandle]:
    with running_lab("xid79", tmp_path / "state", reboot_time=1.0) as handle:
        yield handle


def reboot_run(lab: LabHandle, tmp_path: Path, node: str, *extra: str) -> Run:
    playbook = tmp_path / "slurm-reboot.yml"
    playbook.write_text(PLAYBOOK)
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    return fleetfix_run(playbook, inventory, tmp_path, "--limit", node, *extra)


def node_truth(lab: LabHandle, node: str) -> dict[str, Any]:
    found: dict[str, Any] = lab.truth()["nodes"][node]
    return found


def reboot_intents(journal: Path, node: str) -> list[str]:
    """Bodies of the journaled intents (write-ahead records) of reboots on `node`."""
    rows = query(
        journal,
        "SELECT body FROM events WHERE type = 'ActionStarted' AND instr(body, ?) > 0",
        (f'"host": "{node}"',),
    )
    return [str(body) for (body,) in rows if '"action": "reboot"' in str(body)]


def test_slurm_reboot_keeps_node_out_until_fleetfix_validates(
    lab: LabHandle, tmp_path: Path
) -> None:
    before = node_truth(lab, "gpu003")
    done = reboot_run(lab, tmp_path, "gpu003", "-e", "resume_after=false")
    assert done.returncode == 0, done.output
    after = node_truth(lab, "gpu003")
    assert after["boots"] == before["boots"] + 1
    assert after["boot_id"] != before["boot_id"]
    assert not [f for f in after["faults"] if f["kind"] == "xid"]
    # nextstate=DOWN: back, but out of service, with fleetfix's reason.
    assert after["slurm"]["state"] == "DOWN"
    assert str(after["slurm"]["reason"]).startswith("fleetfix: xid79 reboot")
    assert after["slurm"]["reboot"] is None
    reboots = [e for e in after["audit"] if e["tool"] == "scontrol" and "reboot" in e["argv"]]
    assert reboots and "nextstate=DOWN" in reboots[0]["argv"], after["audit"]
    assert not [e for e in after["audit"] if e["tool"] in ("reboot", "systemctl")]
    intents = reboot_intents(tmp_path / "j.sqlite", "gpu003")
    assert len(intents) == 1 and before["boot_id"] in intents[0], intents


def test_slurm_reboot_then_validated_resume(lab: LabHandle, tmp_path: Path) -> None:
    before = node_truth(lab, "gpu011")
    done = reboot_run(lab, tmp_path, "gpu011")
    assert done.returncode == 0, done.output
    after = node_truth(lab, "gpu011")
    assert after["boots"] == before["boots"] + 1
    assert after["slurm"]["state"] == "IDLE"
    assert after["slurm"]["drain"] is False and after["slurm"]["reason"] is None


def test_failed_validation_never_returns_the_node(lab: LabHandle, tmp_path: Path) -> None:
    # gpu007's Xid 79 survives the reboot: 7 GPUs come back, verification fails.
    before = node_truth(lab, "gpu007")
    done = reboot_run(lab, tmp_path, "gpu007")
    assert done.returncode == 2, done.output
    after = node_truth(lab, "gpu007")
    assert after["boots"] == before["boots"] + 1
    assert after["slurm"]["state"] == "DOWN", after["slurm"]
    assert str(after["slurm"]["reason"]).startswith("fleetfix:")


def test_nextstate_resume_is_the_sites_choice(lab: LabHandle, tmp_path: Path) -> None:
    before = node_truth(lab, "gpu003")
    extra = ("-e", "resume_after=false", "-e", "fleetfix_reboot_nextstate=resume")
    done = reboot_run(lab, tmp_path, "gpu003", *extra)
    assert done.returncode == 0, done.output
    after = node_truth(lab, "gpu003")
    assert after["boots"] == before["boots"] + 1
    # Slurm returned it to service itself (no slurm_resume ran).
    assert after["slurm"]["state"] == "IDLE" and after["slurm"]["drain"] is False
