"""Board layouts and driver forms (scenario `boards`): what the lab prints and enforces.

In-process, on a freshly built fleet: nvidia-smi's recovery action and reset fields by driver
version, Xid 154 in the kernel log, bus-off Xid 79 and SXid records, SRAM and row-remap RMA
flags, nccl-tests' #wrong column, and Fabric Manager's reset and fabric-state rules per board.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fleetfix.errors import LabError
from fleetfix.lab.scenario_file import load_scenario
from fleetfix.lab.state import FleetState
from tests.lab.support import call, offline_fleet
from tests.lab.test_formats import _paths, _q_keys, _sample_gpu_paths, sample

RESET_ALL = "0,1,2,3,4,5,6,7"


@pytest.fixture
def fleet(tmp_path: Path) -> FleetState:
    return offline_fleet("boards", tmp_path)


def _xml(fleet: FleetState, node: str) -> ET.Element:
    return ET.fromstring(call(fleet, node, "nvidia-smi", "-q", "-x").stdout.split("\n", 2)[2])


def _csv(fleet: FleetState, node: str, fields: str) -> list[list[str]]:
    text = call(fleet, node, "nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader").stdout
    return list(csv.reader(io.StringIO(text), skipinitialspace=True))


def _fabric(fleet: FleetState, node: str) -> list[str]:
    return [row[0] for row in _csv(fleet, node, "fabric.state")]


def _q(depth: int, key: str, value: str, width: int = 55) -> str:
    """One `nvidia-smi -q` line: colon at column 55 from driver 580 (42 before)."""
    return f"{'    ' * depth + key:<{width}}: {value}\n"


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "case.yml"
    path.write_text(text, encoding="utf-8")
    return path


# -- scenario keys ---------------------------------------------------------------------------


def test_nodes_take_their_own_board_driver_and_model(fleet: FleetState) -> None:
    hardware = {n: (s.spec.board, s.spec.driver, s.spec.gpus) for n, s in fleet.nodes.items()}
    assert hardware["bd01"] == ("hgx-a100", "580.95.05", 8)
    assert hardware["bd02"] == ("hgx-h100", "580.95.05", 8)
    assert hardware["bd12"] == ("hgx-b200", "610.43.02", 8)
    assert hardware["bd13"] == ("gb200-nvl", "580.95.05", 4)
    assert call(fleet, "bd01", "nvidia-smi", "-L").stdout.startswith(
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-"
    )
    assert "Device 1af1" in call(fleet, "bd01", "lspci").stdout
    assert "22a3" not in call(fleet, "bd04", "lspci", "-nn").stdout  # PCIe: no NVSwitch


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("board: hgx-h100\n    sxid: {code: 12028}", None),
        ("board: pcie\n    sxid: {code: 12028}", "no NVSwitch that reports SXid"),
        ("board: hgx-b200\n    sxid: {code: 12028}", "no NVSwitch that reports SXid"),
        ("board: pcie\n    fabric_manager: stopped", "runs no nvidia-fabricmanager"),
        ("xid: {code: 95, form: bus-off}", "only for Xid 79"),
        ("xid: {code: 95, action: recover-imex}", "needs an IMEX board"),
        ("board: hgx-h101", "unknown board 'hgx-h101'"),
        ("board: pcie\n    nvlink_down: {gpu: 0, link: 0}", "link 0 does not exist"),
    ],
)
def test_board_keys_are_checked_against_the_board(
    tmp_path: Path, body: str, message: str | None
) -> None:
    path = _scenario(
        tmp_path,
        f"fleet: {{racks: 1, leaves: 1, nodes_per_rack: 1}}\nnodes:\n  gpu001:\n    {body}\n",
    )
    if message is None:
        load_scenario(path)
        return
    with pytest.raises(LabError, match=re.escape(message)) as caught:
        load_scenario(path)
    assert f"{path}:" in caught.value.render()


# -- driver forms: recovery action, deprecated reset flags, Xid 154 ---------------------------


def test_580_reports_the_recovery_action_alone(fleet: FleetState) -> None:
    """The real 580.159.04 capture: no GPU Reset Status, keys at column 55."""
    text = call(fleet, "bd02", "nvidia-smi", "-q", "-i", "3").stdout
    assert "GPU Reset Status" not in text
    assert _q(2, "vGPU Heterogeneous Mode", "N/A") + _q(1, "GPU Recovery Action", "Reset") in text
    actions = [row[0] for row in _csv(fleet, "bd03", "gpu_recovery_action")]
    assert actions == ["None"] * 4 + ["Reboot"] + ["None"] * 3
    gpu = _xml(fleet, "bd03").findall("gpu")[4]
    assert gpu.findtext("gpu_recovery_action") == "Reboot" and gpu.find("gpu_reset_status") is None


def test_570_deprecates_the_reset_flags_before_the_recovery_action(tmp_path: Path) -> None:
    """A 570.124.06 log: both reset fields deprecated, then GPU Recovery Action (column 42)."""
    path = _scenario(
        tmp_path,
        "fleet: {racks: 1, leaves: 1, nodes_per_rack: 1, board: hgx-h100, "
        'driver_version: "570.124.06"}\nnodes:\n  gpu001:\n    xid: {code: 95, gpu: 3}\n',
    )
    from fleetfix.lab.build import build_fleet  # noqa: PLC0415 - only these tests build by path

    built = build_fleet(load_scenario(path), tmp_path, 1767225600.0)
    text = call(built, "gpu001", "nvidia-smi", "-q", "-i", "3").stdout
    deprecated = "Requested functionality has been deprecated"
    assert (
        "    GPU Reset Status\n"
        + _q(2, "Reset Required", deprecated, 42)
        + _q(2, "Drain and Reset Recommended", deprecated, 42)
        + _q(1, "GPU Recovery Action", "Reset", 42)
    ) in text


def test_v13_xml_elements_all_exist_in_a_real_sample(fleet: FleetState) -> None:
    text = call(fleet, "bd02", "nvidia-smi", "-q", "-x").stdout
    assert '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">' in text
    root = ET.fromstring(text.split("\n", 2)[2])
    ours = {p for gpu in root.iter("gpu") for p in _paths(gpu)}
    assert not ours - _sample_gpu_paths()


def test_590_query_has_the_real_590_keys(tmp_path: Path) -> None:
    path = _scenario(
        tmp_path,
        "fleet: {racks: 1, leaves: 1, nodes_per_rack: 1, board: hgx-h100, "
        'driver_version: "590.48.01"}\n',
    )
    from fleetfix.lab.build import build_fleet  # noqa: PLC0415 - only this test builds by path

    built = build_fleet(load_scenario(path), tmp_path, 1767225600.0)
    text = call(built, "gpu001", "nvidia-smi", "-q").stdout
    real = sample("nvidia-smi-q/nvgpuexp-h100-vm-590.48.01-idle-q.txt")
    assert _q_keys(text) == _q_keys(real)
    assert all(line.index(":") == 55 for line in text.splitlines() if " : " in line)
    assert "GPU Reset Status" not in text and "    GPU Recovery Action" in text


def test_xid154_follows_the_xid_in_the_drivers_wording(fleet: FleetState) -> None:
    a100 = call(fleet, "bd01", "dmesg").stdout
    assert re.search(
        r"\] NVRM: Xid \(PCI:0000:43:00\): 95, .*\n\[[ \d.]+\] NVRM: Xid \(PCI:0000:43:00\): 154, "
        r"GPU recovery action changed from 0x0 \(None\) to 0x1 \(GPU Reset Required\)\n",
        a100,
    )
    assert "to 0x2 (Node Reboot Required)" in call(fleet, "bd03", "dmesg").stdout
    assert "154, GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)" in (
        call(fleet, "bd12", "dmesg").stdout
    )
    imex = call(fleet, "bd13", "dmesg").stdout
    assert "145, pid='<unknown>', name=<unknown>, RLW_RXPIPE Nonfatal XC0 i0 Link 11" in imex
    assert "to 0x5 (Recover IMEX Domain)" in imex


# -- kernel log forms -------------------------------------------------------------------------


def test_bus_off_xid79_has_no_xid_line(fleet: FleetState) -> None:
    text = call(fleet, "bd07", "dmesg").stdout
    assert "): 79," not in text
    match = re.search(
        r"^(\[ *[\d.]+\] )NVRM: The NVIDIA GPU 0000:52:00\.0\n(.*)\n(.*)$", text, re.M
    )
    assert match is not None
    indent = " " * len(match.group(1))
    assert match.group(2) == indent + "NVRM: (PCI ID: 10de:2330) installed in this system has"
    assert match.group(3) == indent + "NVRM: fallen off the bus and is not responding to commands."
    assert "NVRM: GPU at PCI:0000:52:00: GPU-" in text
    short = call(fleet, "bd08", "dmesg").stdout
    assert (
        "NVRM: GPU 0000:d1:00.0: GPU has fallen off the bus.\n" in short and "): 79," not in short
    )
    journal = call(fleet, "bd07", "journalctl", "-k", "-o", "cat").stdout
    assert "NVRM: The NVIDIA GPU 0000:52:00.0\nNVRM: (PCI ID: 10de:2330)" in journal


def test_short_xid79_line_is_the_real_one(tmp_path: Path) -> None:
    path = _scenario(
        tmp_path,
        "fleet: {racks: 1, leaves: 1, nodes_per_rack: 1}\nnodes:\n"
        "  gpu001: {xid: {code: 79, gpu: 1, form: xid-short}}\n",
    )
    from fleetfix.lab.build import build_fleet  # noqa: PLC0415 - only these tests build by path

    built = build_fleet(load_scenario(path), tmp_path, 1767225600.0)
    real = sample("dmesg-xid/nvsentinel-155-comment-xid79-line.txt").strip()
    ours = [line for line in call(built, "gpu001", "dmesg").stdout.splitlines() if "Xid" in line]
    assert [line.split("] ", 1)[1] for line in ours] == [real.replace("0000:44:00", "0000:43:00")]


def test_sxid_records_and_a_fatal_one_stops_cuda_until_reset(fleet: FleetState) -> None:
    text = call(fleet, "bd09", "dmesg").stdout
    assert re.search(
        r"\] nvidia-nvswitch2: SXid \(PCI:0000:07:00\.0\): 12028, Non-fatal, Link 61 egress "
        r"non-posted PRIV error \(First\)$",
        text,
        re.M,
    )
    assert "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 30 sourcetrack" in text
    node = fleet.nodes["bd09"]
    assert [f.to_data() for f in node.faults] == [
        {"kind": "sxid", "recovery": "reset", "gpu": 3, "code": 24007, "switch": 0}
    ]
    run = call(fleet, "bd09", "all_reduce_perf", "-g", "8")
    assert (
        run.rc == 1 and "'uncorrectable NVLink error detected during the execution'" in run.stdout
    )
    call(fleet, "bd09", "systemctl", "stop", "nvidia-dcgm")
    assert call(fleet, "bd09", "nvidia-smi", "-r", "-i", "3").rc == 0
    assert node.faults == [] and call(fleet, "bd09", "all_reduce_perf", "-g", "8").rc == 0


# -- memory faults for RMA rules --------------------------------------------------------------


def test_sram_threshold_exceeded(fleet: FleetState) -> None:
    text = call(fleet, "bd05", "nvidia-smi", "-q", "-d", "ECC", "-i", "2").stdout
    assert _q(3, "SRAM Uncorrectable SEC-DED", "1") in text
    assert _q(3, "SRAM Uncorrectable SEC-DED", "5") in text
    assert _q(3, "SRAM Threshold Exceeded", "Yes") in text
    assert _q(3, "SRAM L2", "5") in text
    gpu = _xml(fleet, "bd05").findall("gpu")[2]
    assert gpu.findtext("ecc_errors/aggregate/sram_threshold_exceeded") == "Yes"
    sram = "ecc.errors.uncorrected.aggregate.sram"
    assert _csv(fleet, "bd05", f"{sram},{sram}.thresholdExceeded")[2] == ["5", "Yes"]
    truth = fleet.truth()["nodes"]["bd05"]["faults"]
    assert truth == [
        {
            "kind": "sram",
            "gpu": 2,
            "volatile": 1,
            "aggregate": 5,
            "threshold_exceeded": True,
            "recovery": "never",
        }
    ]


def test_remap_failure_and_exhausted_banks(fleet: FleetState) -> None:
    text = call(fleet, "bd06", "nvidia-smi", "-q", "-d", "ROW_REMAPPER", "-i", "5").stdout
    assert _q(2, "Remapping Failure Occurred", "Yes") in text
    for label, count in (("Max", 2540), ("High", 10), ("Partial", 4), ("Low", 2), ("None", 4)):
        assert _q(3, label, f"{count} bank(s)") in text
    gpu = _xml(fleet, "bd06").findall("gpu")[5]
    assert gpu.findtext("remapped_rows/remapped_row_failure") == "Yes"
    assert gpu.findtext("remapped_rows/row_remapper_histogram/row_remapper_histogram_none") == (
        "4 bank(s)"
    )
    assert gpu.findtext("ecc_errors/unrepairable_memory") == "Yes"
    kinds = [f["kind"] for f in fleet.truth()["nodes"]["bd06"]["faults"]]
    assert kinds == ["xid", "row_remap_failure", "unrepairable_memory"]


def test_nccl_wrong_prints_the_count_in_exponent_form(fleet: FleetState) -> None:
    run = call(fleet, "bd12", "all_reduce_perf", "-b", "64M", "-e", "128M", "-g", "8")
    rows = [line for line in run.stdout.splitlines() if line and not line.startswith("#")]
    assert run.rc == 1 and len(rows) == 2
    assert all(line.split()[-5] == line.split()[-1] == "1.57286e+06" for line in rows)
    assert "# Out of bounds values : 4 FAILED" in run.stdout


# -- Fabric Manager: resets and fabric state per board -----------------------------------------


def test_hopper_reset_without_fabric_manager_needs_every_nvlink_peer(fleet: FleetState) -> None:
    call(fleet, "bd02", "systemctl", "stop", "nvidia-dcgm")
    alone = call(fleet, "bd02", "nvidia-smi", "-r", "-i", "3")
    assert alone.rc == 0, "Fabric Manager runs: a single GPU resets (persistence mode is on)"
    call(fleet, "bd02", "systemctl", "stop", "nvidia-fabricmanager")
    refused = call(fleet, "bd02", "nvidia-smi", "-r", "-i", "3")
    assert (
        refused.rc == 255 and "GPU 00000000:61:00.0: NVLink peers must be reset" in refused.stdout
    )
    assert refused.stdout.count("\n  GPU 0000") == 8  # the refused one and its 7 peers
    assert call(fleet, "bd02", "nvidia-smi", "-r", "-i", "0,1,2").rc == 255
    assert _fabric(fleet, "bd02") == ["Completed"] * 8, "a refused reset changes nothing"
    done = call(fleet, "bd02", "nvidia-smi", "-r", "-i", RESET_ALL)
    assert done.rc == 0 and done.stdout.count("was successfully reset.") == 8
    assert _fabric(fleet, "bd02") == ["Not Started"] * 8
    nccl = call(fleet, "bd02", "all_reduce_perf", "-g", "8")
    assert nccl.rc == 1 and "'system not yet initialized'" in nccl.stdout
    call(fleet, "bd02", "systemctl", "start", "nvidia-fabricmanager")
    assert _fabric(fleet, "bd02") == ["Completed"] * 8
    assert call(fleet, "bd02", "all_reduce_perf", "-g", "8").rc == 0


def test_fabric_manager_restart_without_reset_leaves_gpus_in_progress(fleet: FleetState) -> None:
    assert _fabric(fleet, "bd10") == ["In Progress"] * 8
    assert (
        "'system not yet initialized'" in call(fleet, "bd10", "all_reduce_perf", "-g", "8").stdout
    )
    call(fleet, "bd10", "systemctl", "stop", "nvidia-dcgm")
    assert call(fleet, "bd10", "nvidia-smi", "-r", "-i", "2").rc == 0
    assert _fabric(fleet, "bd10") == ["In Progress"] * 2 + ["Completed"] + ["In Progress"] * 5
    assert call(fleet, "bd10", "nvidia-smi", "-r").rc == 0
    assert _fabric(fleet, "bd10") == ["Completed"] * 8
    assert call(fleet, "bd10", "all_reduce_perf", "-g", "8").rc == 0
    call(fleet, "bd10", "systemctl", "restart", "nvidia-fabricmanager")
    assert _fabric(fleet, "bd10") == ["In Progress"] * 8
    text = call(fleet, "bd10", "nvidia-smi", "-q", "-i", "0").stdout
    assert "    Fabric\n" + _q(2, "State", "In Progress") + _q(2, "Status", "N/A") in text
    state = _xml(fleet, "bd10").find("gpu/fabric")
    assert state is not None and (state.findtext("state"), state.findtext("status")) == (
        "In Progress",
        "N/A",
    )


def test_stopped_fabric_manager_lets_only_persistent_gpus_start_cuda(fleet: FleetState) -> None:
    assert fleet.truth()["nodes"]["bd11"]["fabric"] == {
        "manager": "inactive",
        "imex": None,
        "gpus": ["Completed"] * 8,
    }
    assert call(fleet, "bd11", "all_reduce_perf", "-g", "8").rc == 0
    call(fleet, "bd11", "nvidia-smi", "-pm", "0", "-i", "1")
    assert (
        "'system not yet initialized'" in call(fleet, "bd11", "all_reduce_perf", "-g", "8").stdout
    )


def test_ampere_needs_fabric_manager_for_a_single_gpu_reset(fleet: FleetState) -> None:
    call(fleet, "bd01", "systemctl", "stop", "nvidia-dcgm")
    assert call(fleet, "bd01", "nvidia-smi", "-r", "-i", "1").rc == 0
    call(fleet, "bd01", "systemctl", "stop", "nvidia-fabricmanager")
    assert call(fleet, "bd01", "nvidia-smi", "-r", "-i", "1").rc == 255
    assert (
        "'system not yet initialized'" in call(fleet, "bd01", "all_reduce_perf", "-g", "8").stdout
    )
    assert call(fleet, "bd01", "nvidia-smi", "-r").rc == 0
    assert _fabric(fleet, "bd01") == ["[N/A]"] * 8, "Ampere GPUs do not register with a fabric"
    call(fleet, "bd01", "systemctl", "start", "nvidia-fabricmanager")
    assert call(fleet, "bd01", "all_reduce_perf", "-g", "8").rc == 0


@pytest.mark.parametrize("node", ["bd04", "bd13"])
def test_pcie_and_gb200_reset_one_gpu_without_a_local_fabric_manager(
    fleet: FleetState, node: str
) -> None:
    assert (
        call(fleet, node, "systemctl", "is-active", "nvidia-fabricmanager").stdout == "inactive\n"
    )
    assert call(fleet, node, "systemctl", "stop", "nvidia-fabricmanager").rc == 5
    call(fleet, node, "systemctl", "stop", "nvidia-dcgm")
    assert call(fleet, node, "nvidia-smi", "-r", "-i", "0").rc == 0


def test_gb200_recovers_its_imex_domain_by_restarting_imex(fleet: FleetState) -> None:
    assert fleet.truth()["nodes"]["bd13"]["recovery_actions"][1] == "Recover IMEX Domain"
    assert call(fleet, "bd13", "systemctl", "is-active", "nvidia-imex").rc == 0
    call(fleet, "bd13", "systemctl", "restart", "nvidia-imex")
    truth = fleet.truth()["nodes"]["bd13"]
    assert truth["faults"] == [] and truth["recovery_actions"] == ["None"] * 4
    clique = _csv(fleet, "bd13", "fabric.state,fabric.cliqueId")[0]
    assert clique[0] == "Completed" and clique[1].isdigit()
