"""recover.yml on the `boards` lab: what the driver asks for is done, per board, judged by the
lab's truth (recovery actions, fabric state, boots, Slurm) and by the commands it saw.

boards (src/fleetfix/lab/scenarios/boards.yml, driver 580): bd01 HGX A100 Xid 95 -> Reset;
bd02 HGX H100 Xid 119 -> Reset; bd03 driver asks Reboot; bd04 PCIe Xid 94 -> Reset; bd05 SRAM
threshold exceeded; bd06 row-remap failure, unrepairable memory, banks exhausted; bd07/bd08 Xid
79 without an Xid line (three-line and one-line forms); bd10 Fabric Manager restarted without a
GPU reset (fabric In Progress); bd11 HGX H200 whose Fabric Manager was stopped after boot (the
fabric still says Completed, but no CUDA job can start: remedy's Fabric Manager rule); bd12
B200 whose nccl-tests give wrong results after its reset; bd13 GB200 Recover IMEX Domain; bd14
healthy. Every run has `-e validate_nccl=true`: a node is returned to service only after a short
single-node nccl-tests run passes.

Each node is recovered by its own `fleetfix run --limit NODE` (its own journal) on one lab, so
no node is held by another's rack cap. The runs go two at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.labrun import Run, fleetfix_run, nodes, write_inventory
from tests.e2e.safety_support import is_reboot
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(900)

NODES = (
    *("bd01", "bd02", "bd03", "bd04", "bd05", "bd06", "bd07"),
    *("bd08", "bd10", "bd11", "bd12", "bd13", "bd14"),
)
RESET = ("bd01", "bd02", "bd04", "bd10")
REBOOTED = ("bd03", "bd07", "bd08")
FOR_A_HUMAN = {  # RMA candidates: NVIDIA's field diagnostic confirms an RMA, fleetfix does not
    "bd05": "RMA candidate: run the field diagnostic",
    "bd06": "RMA candidate: run the field diagnostic",
}
FABRIC_MANAGER = "nvidia-fabricmanager"
ALL_EIGHT = "-r -i 0,1,2,3,4,5,6,7"


@dataclass(frozen=True, slots=True)
class Recovered:
    run: Run
    before: dict[str, Any]
    after: dict[str, Any]
    audit: list[dict[str, Any]]


@pytest.fixture(scope="module")
def recovered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Recovered]]:
    base = tmp_path_factory.mktemp("boards")
    with running_lab("boards", base / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        before = nodes(lab.truth())

        def recover(node: str) -> Run:
            workdir = base / node
            workdir.mkdir()
            extra = ("--limit", node, "-e", "drain_wait=3s", "-e", "validate_nccl=true")
            return fleetfix_run("recover.yml", inventory, workdir, *extra, timeout=600)

        with ThreadPoolExecutor(2, thread_name_prefix="recover") as pool:
            runs = dict(zip(NODES, pool.map(recover, NODES), strict=True))
        after, audit = nodes(lab.truth()), lab.audit()
        yield {
            node: Recovered(runs[node], before[node], after[node], audit.get(node, []))
            for node in NODES
        }


def _calls(result: Recovered, tool: str) -> list[str]:
    return [" ".join(e["argv"]) for e in result.audit if e["tool"] == tool]


def _gpu_resets(result: Recovered) -> list[str]:
    return [c for c in _calls(result, "nvidia-smi") if c.startswith("-r") or " -r" in c]


@pytest.mark.parametrize("node", RESET)
def test_a_gpu_the_driver_wants_reset_is_reset_not_rebooted(
    recovered: dict[str, Recovered], node: str
) -> None:
    result = recovered[node]
    out = result.run.output
    assert result.run.returncode == 0, out
    assert set(result.after["recovery_actions"]) == {"None"}, out
    assert result.after["boots"] == result.before["boots"], f"rebooted instead of reset\n{out}"
    assert _gpu_resets(result), f"no nvidia-smi -r seen: {result.audit}"
    assert result.after["slurm"]["drain"] is False, result.after["slurm"]
    assert set(result.after["fabric"]["gpus"]) <= {"Completed", "N/A"}, result.after["fabric"]


@pytest.mark.parametrize("node", [n for n in RESET if n != "bd04"])
def test_resets_on_nvswitch_boards_keep_the_fabric_manager_running(
    recovered: dict[str, Recovered], node: str
) -> None:
    """Fabric Manager guide / nvidia-smi -r: on Ampere NVSwitch systems Fabric Manager must run
    for a reset; on Hopper, stopping it means resetting every NVLink peer together. fleetfix
    keeps it running and resets only the GPUs that need it."""
    result = recovered[node]
    stops = [c for c in _calls(result, "systemctl") if c.split()[:1] == ["stop"]]
    assert not [c for c in stops if FABRIC_MANAGER in c], result.audit
    assert result.after["fabric"]["manager"] == "active", result.after["fabric"]


def test_a_stopped_fabric_manager_is_started_after_every_nvlink_peer_is_reset(
    recovered: dict[str, Recovered],
) -> None:
    """bd11 (HGX H200) looked healthy to nvidia-smi: its GPUs registered before Fabric Manager
    stopped. FM guide: on NVSwitch systems CUDA needs Fabric Manager, and after it starts again
    the GPUs must be reset; nvidia-smi -r: on Hopper without Fabric Manager every NVLink peer
    goes in the same command. So: one reset of all eight GPUs while it is stopped, then start
    it, the fabric Completed, and the node back in service."""
    result = recovered["bd11"]
    out = result.run.output
    assert result.before["fabric"]["manager"] == "inactive", result.before["fabric"]
    assert result.run.returncode == 0, out
    assert _gpu_resets(result) == [ALL_EIGHT], result.audit
    commands = [
        " ".join(e["argv"]) for e in result.audit if e["tool"] in ("nvidia-smi", "systemctl")
    ]
    started = f"start {FABRIC_MANAGER}"
    assert started in commands[commands.index(ALL_EIGHT) :], commands
    assert not [c for c in commands if c.startswith(("stop", "restart")) and FABRIC_MANAGER in c]
    assert result.after["fabric"]["manager"] == "active", result.after["fabric"]
    assert set(result.after["fabric"]["gpus"]) == {"Completed"}, result.after["fabric"]
    assert result.after["boots"] == result.before["boots"]
    assert result.after["slurm"]["drain"] is False, result.after["slurm"]
    assert [c for c in _calls(result, "scontrol") if "State=RESUME" in c], result.audit


@pytest.mark.parametrize("node", REBOOTED)
def test_a_node_the_driver_wants_rebooted_is_rebooted_once_and_resumed(
    recovered: dict[str, Recovered], node: str
) -> None:
    result = recovered[node]
    out = result.run.output
    assert result.run.returncode == 0, out
    assert sum(1 for e in result.audit if is_reboot(e)) == 1, result.audit
    assert _gpu_resets(result) == [], result.audit
    assert result.after["boots"] == result.before["boots"] + 1
    assert result.after["faults"] == [], result.after["faults"]
    assert result.after["slurm"]["drain"] is False, result.after["slurm"]


@pytest.mark.parametrize("node", sorted(FOR_A_HUMAN))
def test_memory_a_reset_cannot_fix_ends_drained_for_a_human(
    recovered: dict[str, Recovered], node: str
) -> None:
    result = recovered[node]
    out = result.run.output
    # The node is marked failed: exit 2, or 6 when that trips the play's max_fail_percentage
    # (here it is alone in its batch).
    assert result.run.returncode in (2, 6), out
    assert result.run.recap[node]["failed"] == 1, out
    slurm = result.after["slurm"]
    assert slurm["drain"] and FOR_A_HUMAN[node] in str(slurm["reason"]), slurm
    assert str(slurm["reason"]).startswith("fleetfix: "), slurm
    assert _gpu_resets(result) == [] and not any(is_reboot(e) for e in result.audit), out
    assert result.after["boots"] == result.before["boots"]


def test_the_imex_domain_is_recovered_by_restarting_imex(
    recovered: dict[str, Recovered],
) -> None:
    result = recovered["bd13"]
    out = result.run.output
    assert result.run.returncode == 0, out
    assert "restart nvidia-imex" in _calls(result, "systemctl"), result.audit
    assert set(result.after["recovery_actions"]) == {"None"}, out
    assert _gpu_resets(result) == [] and result.after["boots"] == result.before["boots"]
    assert result.after["slurm"]["drain"] is False


def test_a_healthy_node_is_left_alone(recovered: dict[str, Recovered]) -> None:
    result = recovered["bd14"]
    assert result.run.returncode == 0, result.run.output
    assert result.audit == [] and result.after == result.before


def test_a_node_that_fails_its_test_after_the_fix_stays_drained(
    recovered: dict[str, Recovered],
) -> None:
    result = recovered["bd12"]
    out = result.run.output
    assert result.run.returncode in (2, 6), out
    assert _gpu_resets(result), result.audit
    assert "TASK [a short single-node test before return to service]" in out
    slurm = result.after["slurm"]
    assert slurm["drain"] and str(slurm["reason"]).startswith("fleetfix: "), slurm
    assert not [c for c in _calls(result, "scontrol") if "State=RESUME" in c], result.audit


@pytest.mark.parametrize("node", [*RESET, *REBOOTED, "bd11", "bd13"])
def test_a_returned_node_passed_its_test_first(recovered: dict[str, Recovered], node: str) -> None:
    lines = recovered[node].run.stdout.splitlines()
    banner = [i for i, line in enumerate(lines) if "single-node test before return" in line]
    assert len(banner) == 1, recovered[node].run.output
    assert lines[banner[0] + 1].startswith(f"ok: [{node}]"), lines[banner[0] : banner[0] + 3]
