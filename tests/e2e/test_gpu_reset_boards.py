"""gpu_reset on the `boards` lab, from a user's playbook: NVIDIA's reset rules per board, judged
by the commands the lab saw (its audit) and by its truth.

The playbook is what an operator writes (drain and wait, reset the GPUs the driver flags,
resume). On bd01 (HGX A100, Xid 95), bd02 (HGX H100, Xid 119) and bd04 (PCIe H100, Xid 94) the
driver asks for a reset of one GPU; on bd11 (HGX H200 whose Fabric Manager was stopped) the
operator names GPU 2. The rules (Fabric Manager user guide, nvidia-smi -r): Fabric Manager is
never stopped; with it running (A100, H100) or absent (PCIe) only the flagged GPU is reset;
on Hopper without it, every NVLink peer goes in the same command, then it is started and the
GPUs register (fabric Completed) before the node returns to service.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.labrun import Run, fleetfix_run, nodes, write_inventory
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(600)

PLAYBOOK = """\
- name: reset what the driver flags
  hosts: all
  tasks:
    - name: drain and wait for jobs to leave
      action:
        name: slurm_drain
        reason: "fleetfix: GPU reset"
        wait: true
        wait_timeout: 30s
    - name: reset the GPUs
      action:
        name: gpu_reset
        gpus: "{{ reset_gpus | default(none) }}"
    - name: back to service
      action: slurm_resume
"""
FLAGGED = {"bd01": ["-r", "-i", "1"], "bd02": ["-r", "-i", "3"], "bd04": ["-r", "-i", "0"]}
"""Node -> the one reset the lab must see: only the GPU the driver flags."""
ALL_EIGHT = ["-r", "-i", "0,1,2,3,4,5,6,7"]
FABRIC_MANAGER = "nvidia-fabricmanager"


@dataclass(frozen=True, slots=True)
class Reset:
    runs: dict[str, Run]
    before: dict[str, dict[str, Any]]
    after: dict[str, dict[str, Any]]
    audit: dict[str, list[dict[str, Any]]]

    def calls(self, node: str, tool: str) -> list[list[str]]:
        return [entry["argv"] for entry in self.audit[node] if entry["tool"] == tool]

    def resets(self, node: str) -> list[list[str]]:
        return [argv for argv in self.calls(node, "nvidia-smi") if "-r" in argv]


@pytest.fixture(scope="module")
def reset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reset]:
    base = tmp_path_factory.mktemp("boards-reset")
    book = base / "reset.yml"
    book.write_text(textwrap.dedent(PLAYBOOK))
    with running_lab("boards", base / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        before = nodes(lab.truth())
        flagged, named = base / "flagged", base / "named"
        flagged.mkdir()
        named.mkdir()
        runs = {
            "flagged": fleetfix_run(book, inventory, flagged, "--limit", ",".join(FLAGGED)),
            "bd11": fleetfix_run(
                book, inventory, named, "--limit", "bd11", "-e", '{"reset_gpus": [2]}'
            ),
        }
        yield Reset(runs, before, nodes(lab.truth()), lab.audit())


def test_the_runs_succeed(reset: Reset) -> None:
    for run in reset.runs.values():
        assert run.returncode == 0, run.output


@pytest.mark.parametrize("node", sorted(FLAGGED))
def test_only_the_flagged_gpu_is_reset(reset: Reset, node: str) -> None:
    assert reset.resets(node) == [FLAGGED[node]], reset.audit[node]
    assert [e["rc"] for e in reset.audit[node] if e["tool"] == "nvidia-smi"] == [0]


@pytest.mark.parametrize("node", [*sorted(FLAGGED), "bd11"])
def test_fabric_manager_is_never_stopped(reset: Reset, node: str) -> None:
    stops = [argv for argv in reset.calls(node, "systemctl") if argv[:1] in (["stop"], ["restart"])]
    assert not [argv for argv in stops if FABRIC_MANAGER in argv], reset.audit[node]


def test_without_fabric_manager_every_nvlink_peer_is_reset_in_one_command(reset: Reset) -> None:
    """nvidia-smi -r: on Hopper without Fabric Manager, every GPU NVLink-connected to the one
    being reset (on HGX: all eight) goes in the same command; then Fabric Manager starts."""
    assert reset.resets("bd11") == [ALL_EIGHT], reset.audit["bd11"]
    commands = [e["argv"] for e in reset.audit["bd11"] if e["tool"] in ("nvidia-smi", "systemctl")]
    reset_at = commands.index(ALL_EIGHT)
    assert ["start", FABRIC_MANAGER] in commands[reset_at:], commands
    assert reset.before["bd11"]["fabric"]["manager"] == "inactive"


@pytest.mark.parametrize("node", [*sorted(FLAGGED), "bd11"])
def test_the_node_is_back_with_its_fabric_registered(reset: Reset, node: str) -> None:
    after, before = reset.after[node], reset.before[node]
    assert set(after["recovery_actions"]) == {"None"}, after["recovery_actions"]
    assert after["faults"] == [], after["faults"]
    assert set(after["fabric"]["gpus"]) <= {"Completed", "N/A"}, after["fabric"]
    assert after["fabric"]["manager"] == ("active" if node != "bd04" else None)
    assert after["services"] == {**before["services"], FABRIC_MANAGER: True} or (
        node == "bd04" and after["services"] == before["services"]
    ), after["services"]
    assert after["persistence"] == before["persistence"]
    assert after["boots"] == before["boots"]
    assert after["slurm"]["drain"] is False, after["slurm"]


def test_the_other_nodes_were_not_touched(reset: Reset) -> None:
    for node in set(reset.after) - {*FLAGGED, "bd11"}:
        assert reset.audit[node] == [], node
