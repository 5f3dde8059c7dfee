"""What only a cold power cycle clears, and GPUs that failed to initialise (issue 18), read from
node state and the emulated tools in this process (the cold-cycle scenario, lab/transitions.py's
boots): a warm boot keeps `power_cycle` faults, a boot after the power was removed clears them;
an init-failed GPU is on the PCI bus but not in nvidia-smi, and its kernel line (no Xid) is what
fleetfix's xid probe reports as a GPU failure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetfix.knowledge.recovery import RecoveryAction, read_recovery_action, read_xid154
from fleetfix.lab import transitions
from fleetfix.lab.state import FleetState, NodeState
from fleetfix.probes import probe_registry
from fleetfix.probes.gpu_failures import GpuFailureKind
from tests.lab.support import call, offline_fleet

XID = probe_registry().get("xid")


@pytest.fixture
def fleet(tmp_path: Path) -> FleetState:
    return offline_fleet("cold-cycle", tmp_path)


def boot(node: NodeState, level: str) -> None:
    """A whole reboot of `node`: warm (`reboot`) or after the power was removed."""
    transitions.begin_reboot(node, time.time(), 0.0, level)
    transitions.finish_reboot(node, time.time())


def kinds(node: NodeState) -> list[tuple[str, str]]:
    return [(f.kind, f.recovery) for f in node.faults]


def gpu_count(fleet: FleetState, name: str) -> tuple[int, int, str]:
    """nvidia-smi -L lines, lspci GPUs, and -q -x's attached_gpus."""
    listed = call(fleet, name, "nvidia-smi", "-L").stdout.count("GPU ")
    on_bus = call(fleet, name, "lspci").stdout.count("3D controller")
    xml = call(fleet, name, "nvidia-smi", "-q", "-x").stdout
    attached = xml.partition("<attached_gpus>")[2].partition("<")[0]
    return listed, on_bus, attached


def test_a_gpu_that_failed_to_initialise_is_on_the_bus_but_not_in_nvidia_smi(
    fleet: FleetState,
) -> None:
    assert gpu_count(fleet, "gpu004") == (7, 8, "7")
    assert "Gres=gpu:h100:8" in call(fleet, "gpu004", "scontrol", "show", "node", "gpu004").stdout
    dmesg = call(fleet, "gpu004", "dmesg").stdout
    assert "NVRM: GPU 0000:d1:00.0: RmInitAdapter failed! (0x23:0x65:1426)" in dmesg
    assert "Xid" not in dmesg
    facts = XID.read(call(fleet, "gpu004", "dmesg", "-T").stdout)
    assert facts.count == 0 and facts.codes == ()  # no Xid line ...
    [failure] = facts.gpu_failures  # ... but the GPU's failure is a fact
    assert failure.kind is GpuFailureKind.INIT_FAILED
    assert (failure.bus_id, failure.message) == (
        "00000000:d1:00.0",
        "RmInitAdapter failed! (0x23:0x65:1426)",
    )
    assert facts.failed_gpus == ("00000000:d1:00.0",)


def test_an_init_failure_lasts_until_its_recovery_level(fleet: FleetState) -> None:
    fixed, gone = fleet.nodes["gpu004"], fleet.nodes["gpu008"]
    for node in (fixed, gone):
        boot(node, "reboot")
    assert kinds(fixed) == [] and gpu_count(fleet, "gpu004") == (8, 8, "8")
    assert "RmInitAdapter" not in call(fleet, "gpu004", "dmesg").stdout
    assert kinds(gone) == [("gpu_init_failed", "never")]
    boot(gone, "power_cycle")
    assert kinds(gone) == [("gpu_init_failed", "never")] and gone.power_cycles == 1
    assert gpu_count(fleet, "gpu008") == (7, 8, "7")
    boots = call(fleet, "gpu008", "journalctl", "-k", "-b", "-2").stdout
    assert "0000:43:00.0: RmInitAdapter failed!" in boots  # logged by every boot it fails in
    assert "0000:43:00.0: RmInitAdapter failed!" in call(fleet, "gpu008", "dmesg").stdout


def test_a_warm_reboot_keeps_what_needs_a_cold_cycle(fleet: FleetState) -> None:
    node = fleet.nodes["gpu002"]
    assert call(fleet, "gpu002", "nvidia-smi", "-L").rc == 15  # GPU 3 fell off the bus
    boot(node, "reboot")
    assert kinds(node) == [("xid", "power_cycle")]
    assert gpu_count(fleet, "gpu002") == (7, 8, "7")  # back on the bus, not initialised
    dmesg = call(fleet, "gpu002", "dmesg").stdout
    assert "NVRM: GPU 0000:61:00.0: RmInitAdapter failed!" in dmesg and "Xid" not in dmesg
    boot(node, "power_cycle")
    assert kinds(node) == [] and node.power_cycles == 1
    assert gpu_count(fleet, "gpu002") == (8, 8, "8")
    assert "RmInitAdapter" not in call(fleet, "gpu002", "dmesg").stdout


@pytest.mark.parametrize(
    ("name", "gpu", "action"),
    [("gpu006", 2, RecoveryAction.SYSTEM_REBOOT), ("gpu007", 4, RecoveryAction.BUS_RESET)],
)
def test_system_reboot_and_bus_reset_ask_for_a_cold_cycle(
    fleet: FleetState, name: str, gpu: int, action: RecoveryAction
) -> None:
    node = fleet.nodes[name]

    def reported() -> RecoveryAction | None:
        rows = call(fleet, name, "nvidia-smi", "--query-gpu=gpu_recovery_action", "--format=csv")
        return read_recovery_action(rows.stdout.splitlines()[1 + gpu])

    def xid154() -> list[RecoveryAction]:
        lines = call(fleet, name, "dmesg").stdout.splitlines()
        changes = [read_xid154(line) for line in lines if "): 154, " in line]
        return [change.action for change in changes if change is not None]

    assert reported() is action and xid154() == [action]
    query = call(fleet, name, "nvidia-smi", "-q", "-i", str(gpu)).stdout.splitlines()
    assert f"    GPU Recovery Action{' ' * 32}: {action.value}" in query
    boot(node, "reboot")
    assert reported() is action and xid154() == [action]  # a warm reboot does not give it
    assert node.truth(None)["recovery_actions"][gpu] == action.value
    boot(node, "power_cycle")
    assert reported() is RecoveryAction.NONE and xid154() == [] and kinds(node) == []
