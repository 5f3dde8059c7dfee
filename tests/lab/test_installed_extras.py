"""What a scenario may install on a node besides the NVIDIA stack, and the unit queries the
services probe needs: `systemctl show`, third-party users of `nvidia` (gdrdrv, nvidia_fs) and
monitoring units (dcgm-exporter, nvsm); and the classic board's reset rule.

In-process, on fleets built from the shipped scenarios (which install nothing extra: their
output stays what it was) and from a small scenario written here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import LabError
from fleetfix.lab import transitions
from fleetfix.lab.build import build_fleet
from fleetfix.lab.scenario_file import load_scenario
from fleetfix.lab.state import FleetState
from tests.lab.support import call, offline_fleet

SCENARIO = """\
fleet: {leaves: 1, racks: 1, nodes_per_rack: 2, board: hgx-h100, driver_version: "580.95.05"}
nodes:
  gpu001:
    third_party_modules: [gdrdrv, nvidia_fs]
    extra_units: [dcgm-exporter, nvsm]
"""


@pytest.fixture
def fleet(tmp_path: Path) -> FleetState:
    path = tmp_path / "extras.yml"
    path.write_text(SCENARIO)
    return offline_fleet(str(path), tmp_path / "state")


def test_systemctl_show_answers_load_state_for_the_services_probe(tmp_path: Path) -> None:
    boards = offline_fleet("boards", tmp_path)

    def load_state(node: str, unit: str) -> str:
        reply = call(boards, node, "systemctl", "show", "-p", "LoadState", "--value", unit)
        assert reply.rc == 0
        return reply.stdout

    assert load_state("bd02", "nvidia-fabricmanager") == "loaded\n"
    assert load_state("bd04", "nvidia-fabricmanager") == "not-found\n"
    assert load_state("bd13", "nvidia-imex") == "loaded\n"
    both = call(boards, "bd13", "systemctl", "show", "--property=LoadState,ActiveState", "dcgm")
    assert both.stdout == "LoadState=not-found\nActiveState=inactive\n"


def test_third_party_modules_use_nvidia_and_keep_it_loaded(fleet: FleetState) -> None:
    lsmod = call(fleet, "gpu001", "lsmod").stdout.splitlines()
    assert lsmod[1].split()[0] == "gdrdrv" and lsmod[2].split()[0] == "nvidia_fs"
    nvidia = next(line for line in lsmod if line.startswith("nvidia "))
    assert nvidia.split()[-1] == "gdrdrv,nvidia_fs,nvidia_uvm,nvidia_modeset,nvidia_peermem"
    for unit in ("dcgm-exporter", "nvsm", "nvidia-dcgm", "nvidia-fabricmanager"):
        call(fleet, "gpu001", "systemctl", "stop", unit)
    call(fleet, "gpu001", "systemctl", "stop", "nvidia-persistenced")
    for module in ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem"):
        assert call(fleet, "gpu001", "rmmod", module).rc == 0
    held = call(fleet, "gpu001", "rmmod", "nvidia")
    assert held.stderr == "rmmod: ERROR: Module nvidia is in use by: gdrdrv nvidia_fs\n"
    assert call(fleet, "gpu001", "rmmod", "gdrdrv", "nvidia_fs", "nvidia").rc == 0
    assert fleet.truth()["nodes"]["gpu001"]["faults"][-1] == {
        "kind": "modules_unloaded",
        "modules": [
            "nvidia_uvm",
            "nvidia_drm",
            "nvidia_modeset",
            "nvidia_peermem",
            "nvidia",
            "gdrdrv",
            "nvidia_fs",
        ],
    }
    assert call(fleet, "gpu001", "modprobe", "gdrdrv").rc == 0, "loads nvidia first"
    assert fleet.truth()["nodes"]["gpu001"]["modules"] == ["nvidia", "gdrdrv"]


def test_nodes_without_them_do_not_have_them(fleet: FleetState, tmp_path: Path) -> None:
    missing = call(fleet, "gpu002", "modprobe", "gdrdrv")
    assert missing.rc == 1 and "Module gdrdrv not found" in missing.stderr
    assert call(fleet, "gpu002", "systemctl", "is-active", "dcgm-exporter").stdout == "inactive\n"
    assert call(fleet, "gpu002", "systemctl", "start", "nvsm").rc == 5
    mixed = offline_fleet("mixed-faults", tmp_path / "mixed")
    assert all("gdrdrv" not in call(mixed, n, "lsmod").stdout for n in mixed.nodes)
    assert {u for n in mixed.nodes.values() for u in n.services} == {
        "nvidia-persistenced",
        "nvidia-fabricmanager",
        "nvidia-dcgm",
        "slurmd",
    }


def test_monitoring_units_hold_the_gpus_for_a_reset(fleet: FleetState) -> None:
    call(fleet, "gpu001", "systemctl", "stop", "nvidia-dcgm")
    assert call(fleet, "gpu001", "nvidia-smi", "-r", "-i", "0").rc == 255
    call(fleet, "gpu001", "systemctl", "stop", "dcgm-exporter")
    assert call(fleet, "gpu001", "nvidia-smi", "-r", "-i", "0").rc == 255
    call(fleet, "gpu001", "systemctl", "stop", "nvsm")
    assert call(fleet, "gpu001", "nvidia-smi", "-r", "-i", "0").rc == 0
    services = fleet.truth()["nodes"]["gpu001"]["services"]
    assert services["dcgm-exporter"] is False and services["nvsm"] is False


def test_a_reboot_brings_the_installed_modules_and_units_back(fleet: FleetState) -> None:
    node = fleet.nodes["gpu001"]
    call(fleet, "gpu001", "systemctl", "stop", "nvsm")
    transitions.finish_reboot(node, 0.0)
    truth = fleet.truth()["nodes"]["gpu001"]
    assert truth["modules"][-2:] == ["gdrdrv", "nvidia_fs"] and truth["services"]["nvsm"]


def test_the_classic_board_resets_with_fabric_manager_and_persistence_on(tmp_path: Path) -> None:
    """nvidia-smi -r: with Fabric Manager running each GPU can be reset individually, and the
    Fabric Manager guide leaves nvidia-persistenced running; only DCGM and processes hold."""
    classic = offline_fleet("mixed-faults", tmp_path)
    assert call(classic, "gpu006", "nvidia-smi", "-r", "-i", "4").rc == 255, "DCGM holds it"
    call(classic, "gpu006", "systemctl", "stop", "nvidia-dcgm")
    node = classic.nodes["gpu006"]
    assert node.unit_active("nvidia-fabricmanager") and node.gpus[4].persistence
    assert call(classic, "gpu006", "nvidia-smi", "-r", "-i", "4").rc == 0
    assert not node.gpus[4].remap_pending


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("third_party_modules: [gdrcopy]", "unknown module 'gdrcopy'"),
        ("extra_units: dcgm_exporter", "unknown unit 'dcgm_exporter'"),
    ],
)
def test_unknown_names_are_refused(tmp_path: Path, body: str, error: str) -> None:
    path = tmp_path / "bad.yml"
    fleet = "fleet: {leaves: 1, racks: 1, nodes_per_rack: 1}"
    path.write_text(f"{fleet}\nnodes:\n  gpu001:\n    {body}\n")
    with pytest.raises(LabError, match=error):
        build_fleet(load_scenario(str(path)), tmp_path, 0.0)
