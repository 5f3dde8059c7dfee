"""The emulated tools print what the real ones print: checked against shared/samples/.

These call the emulators in-process on a freshly built fleet (no server), and compare
structure, names and spacing with real captured outputs.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.lab.state import FleetState
from tests.lab.support import call, offline_fleet

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "samples"
SAMPLES = Path("/work/shared/samples")
if not SAMPLES.is_dir():  # the fixtures copy travels with the repository
    SAMPLES = FIXTURES


def sample(name: str) -> str:
    """A real capture: from shared/samples, or the repository's copy (which also keeps the
    captures shared/samples does not have, e.g. tests/fixtures/samples/real-nodes)."""
    for root in (SAMPLES, FIXTURES):
        path = root / name
        if path.is_file():
            return path.read_text(encoding="utf-8")
    pytest.fail(f"real sample {name} is missing (copy it under tests/fixtures/samples/)")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> FleetState:
    return offline_fleet("mixed-faults", tmp_path_factory.mktemp("mixed"))


@pytest.fixture(scope="module")
def xid_fleet(tmp_path_factory: pytest.TempPathFactory) -> FleetState:
    return offline_fleet("xid79", tmp_path_factory.mktemp("xid79"))


def _paths(element: ET.Element, prefix: str = "") -> Iterator[str]:
    for child in element:
        path = f"{prefix}/{child.tag}"
        yield path
        yield from _paths(child, path)


def _sample_gpu_paths() -> set[str]:
    paths: set[str] = set()
    for path in (SAMPLES / "nvidia-smi-xml").glob("*.xml"):
        root = ET.fromstring(path.read_text(encoding="utf-8").split("\n", 2)[2])
        for gpu in root.iter("gpu"):
            paths.update(_paths(gpu))
    return paths


def test_xml_parses_and_counts_gpus(fleet: FleetState) -> None:
    reply = call(fleet, "gpu002", "nvidia-smi", "-q", "-x")
    assert reply.rc == 0
    assert reply.stdout.startswith(
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
    )
    root = ET.fromstring(reply.stdout.split("\n", 2)[2])
    gpus = root.findall("gpu")
    assert len(gpus) == 8 and root.findtext("attached_gpus") == "8"
    assert root.findtext("driver_version") == "550.90.07"
    first = gpus[0]
    assert first.get("id") == "00000000:1B:00.0" == first.findtext("pci/pci_bus_id")
    assert first.findtext("product_name") == "NVIDIA H100 80GB HBM3"
    assert re.fullmatch(
        r"GPU-[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}", first.findtext("uuid") or ""
    )
    assert gpus[3].findtext("ecc_errors/volatile/dram_correctable") == "12"
    assert gpus[3].findtext("ecc_errors/aggregate/dram_correctable") == "52"
    assert first.findtext("fb_memory_usage/total") == "81559 MiB"


def test_xml_layout_is_nvidia_smis(fleet: FleetState) -> None:
    text = call(fleet, "gpu001", "nvidia-smi", "-q", "-x").stdout
    assert "\t\t<product_name>" in text and "    <" not in text
    assert text.count("\t</gpu>\n\n") == 8 and text.endswith("\n</nvidia_smi_log>\n")
    assert "<processes>\n\t\t</processes>" in text


def test_every_xml_element_exists_in_a_real_sample(fleet: FleetState) -> None:
    text = call(fleet, "gpu024", "nvidia-smi", "-q", "-x").stdout
    root = ET.fromstring(text.split("\n", 2)[2])
    ours = {p for gpu in root.iter("gpu") for p in _paths(gpu)}
    unknown = ours - _sample_gpu_paths()
    assert not unknown, f"elements no real nvidia-smi sample has: {sorted(unknown)[:10]}"


def test_xml_reports_faults(fleet: FleetState) -> None:
    root = ET.fromstring(call(fleet, "gpu006", "nvidia-smi", "-q", "-x").stdout.split("\n", 2)[2])
    gpu4 = root.findall("gpu")[4]
    assert gpu4.findtext("remapped_rows/remapped_row_pending") == "Yes"
    assert gpu4.findtext("gpu_reset_status/reset_required") == "Yes"
    off = ET.fromstring(call(fleet, "gpu012", "nvidia-smi", "-q", "-x").stdout.split("\n", 2)[2])
    assert {g.findtext("persistence_mode") for g in off.findall("gpu")} == {"Disabled"}
    busy = ET.fromstring(call(fleet, "gpu024", "nvidia-smi", "-q", "-x").stdout.split("\n", 2)[2])
    process = busy.findall("gpu")[5].find("processes/process_info")
    assert process is not None and process.findtext("process_name") == "python3"


def _q_keys(text: str) -> set[str]:
    return {line.split(":", 1)[0].strip() for line in text.splitlines() if line.startswith("    ")}


def test_query_text_keys_are_real_and_aligned(fleet: FleetState) -> None:
    text = call(fleet, "gpu001", "nvidia-smi", "-q").stdout
    real = set()
    for name in (
        "gpud-e2e-a10-550.127.05-q-full.txt",
        "gpud-8xrtx4090-535.154.05-q-full-2busy.txt",
    ):
        real |= _q_keys(sample(f"nvidia-smi-q/{name}"))
    assert _q_keys(text) - real == set()
    lines = text.splitlines()
    assert lines[:4] == ["", "==============NVSMI LOG==============", "", lines[3]]
    assert all(line.index(":") == 42 for line in lines if " : " in line)
    assert (
        "GPU 00000000:1B:00.0" in lines
        and text.count("    Processes                             : None") == 8
    )


def test_query_display_filter(fleet: FleetState) -> None:
    text = call(fleet, "gpu002", "nvidia-smi", "-q", "-d", "ECC").stdout
    assert "    ECC Errors" in text and "Product Name" not in text
    assert call(fleet, "gpu002", "nvidia-smi", "-q", "-d", "BOGUS").rc == 2


def test_default_table_matches_real_layout(fleet: FleetState) -> None:
    ours = call(fleet, "gpu001", "nvidia-smi").stdout.splitlines()
    real = [
        line[4:] for line in sample("nvidia-smi-table/bitdeer-8xh100-550.90.07.txt").splitlines()
    ]
    assert ours[1:2] == real[:1] and ours[3:8] == real[2:7]
    assert re.fullmatch(
        r"\| NVIDIA-SMI 550\.90\.07 +Driver Version: 550\.90\.07 +CUDA Version: 12\.4 +\|", ours[2]
    )
    assert len(ours[2]) == len(real[1])
    for mine, theirs in zip(ours[8:11], real[7:10], strict=True):
        assert [m.start() for m in re.finditer(r"\|", mine)] == [
            m.start() for m in re.finditer(r"\|", theirs)
        ]
    assert ours[8].startswith(
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:1B:00.0 Off |"
    )
    assert "No running processes found" in ours[-2]


def test_table_lists_processes(fleet: FleetState) -> None:
    table = call(fleet, "gpu024", "nvidia-smi").stdout.splitlines()
    rows = [line for line in table if "python3" in line]
    assert len(rows) == 1 and re.match(
        r"\|    5   N/A  N/A +\d+      C   python3 +30211MiB \|", rows[0]
    )
    assert len(rows[0]) == 91


def test_query_gpu_headers_match_real_capture(fleet: FleetState) -> None:
    real = list(
        csv.reader(
            io.StringIO(sample("query-gpu-csv/nvgpuexp-h100-590.48.01-idle-allfields.csv")),
            skipinitialspace=True,
        )
    )
    headers = dict(zip([h.split(" [")[0] for h in real[0]], real[0], strict=True))
    values = dict(zip(real[0], real[1], strict=True))
    wanted = list(headers)
    reply = call(fleet, "gpu001", "nvidia-smi", f"--query-gpu={','.join(wanted)}", "--format=csv")
    assert reply.rc == 0, f"lab rejects a field the real tool accepts: {reply.stdout}"
    ours = list(csv.reader(io.StringIO(reply.stdout), skipinitialspace=True))
    assert ours[0] == [headers[name] for name in wanted]
    for header, value in zip(ours[0], ours[1], strict=True):
        unit = re.search(r" (MiB|W|%|MHz|us)$", values[header])
        if unit and not values[header].startswith("["):
            assert value.endswith(unit.group(0)) or value.startswith("["), (header, value)


def test_query_gpu_forms(fleet: FleetState) -> None:
    nounits = call(
        fleet,
        "gpu001",
        "nvidia-smi",
        "--query-gpu=gpu_name,memory.used,power.draw",
        "--format=csv,nounits",
    )
    assert nounits.stdout.splitlines()[0] == "name, memory.used [MiB], power.draw [W]"
    assert re.fullmatch(r"NVIDIA H100 80GB HBM3, 0, \d+\.\d\d", nounits.stdout.splitlines()[1])
    bare = call(fleet, "gpu001", "nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader")
    assert len(bare.stdout.splitlines()) == 8 and bare.stdout.startswith("0, GPU-")
    bad = call(fleet, "gpu001", "nvidia-smi", "--query-gpu=index,bogus", "--format=csv")
    assert bad.rc == 2 and bad.stdout.startswith('Field "bogus" is not a valid field to query.')


def test_compute_apps_header_matches_real_capture(fleet: FleetState) -> None:
    real = sample("query-compute-apps/nvgpuexp-h100-590.48.01-load-3procs.csv").splitlines()
    fields = "timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory"
    reply = call(fleet, "gpu024", "nvidia-smi", f"--query-compute-apps={fields}", "--format=csv")
    ours = reply.stdout.splitlines()
    assert ours[0] == real[0]
    stamp = r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}"
    gpu = r"NVIDIA H100 80GB HBM3, 00000000:C3:00\.0, \d{13}, GPU-[-0-9a-f]+"
    assert re.fullmatch(rf"{stamp}, {gpu}, \d+, python3, 30211 MiB", ours[1])
    idle = call(fleet, "gpu001", "nvidia-smi", f"--query-compute-apps={fields}", "--format=csv")
    assert idle.stdout == sample("query-compute-apps/nvgpuexp-h100-590.48.01-idle-empty.csv")


def test_topology_matrix_uses_tabs_and_real_legend(fleet: FleetState) -> None:
    text = call(fleet, "gpu001", "nvidia-smi", "topo", "-m").stdout
    lines = text.splitlines()
    assert lines[0].startswith("\tGPU0\tGPU1") and lines[0].endswith(
        "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    )
    gpu0 = lines[1].split("\t")
    assert gpu0[:9] == ["GPU0", " X ", *["NV18"] * 7] and gpu0[-4:] == [
        "0-55,112-167",
        "0",
        "",
        "N/A",
    ]
    real = sample(
        "topo/unresolved-sglang-issue-copy-8xh100-nv18-8nic-pix-node-570.133.20-complete.txt"
    )
    assert (
        lines[lines.index("Legend:") : -1]
        == real.splitlines()[real.splitlines().index("Legend:") :]
    )
    # The copy above lost the output's last line; an exact capture ends the NIC legend with a
    # blank line (a GB200 tray's bytes, pinned by sha256 in their source test).
    exact = sample("topo/aiconfigurator-gb200-nvl72-tray-4gpu-6nic-ansi.txt")
    assert text.endswith("  NIC7: mlx5_7\n\n") and exact.endswith("  NIC5: mlx5_5\n\n")
    degraded = call(fleet, "gpu019", "nvidia-smi", "topo", "-m").stdout.splitlines()
    assert degraded[3].split("\t")[1] == "NV16"


def test_nvlink_status_and_errors(fleet: FleetState) -> None:
    status = call(fleet, "gpu019", "nvidia-smi", "nvlink", "-s").stdout.splitlines()
    assert status[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert status[1] == "\t Link 0: 26.562 GB/s"
    assert "\t Link 5: <inactive>" in status[2 * 19 :][:19]
    errors = call(fleet, "gpu019", "nvidia-smi", "nvlink", "-e", "-i", "2").stdout.splitlines()
    assert errors[1:5] == [
        "\t Link 0: Replay Errors: 0",
        "\t Link 0: Recovery Errors: 0",
        "\t Link 0: CRC Errors: 0",
        "",
    ]
    assert "\t Link 5: CRC Errors: 2351" in errors


def test_ibstat_layout_matches_real(fleet: FleetState) -> None:
    ours = call(fleet, "gpu021", "ibstat").stdout.splitlines()
    real = sample("ibstat/gpud-ibstat-h100-cx7-ndr-some-down.txt").splitlines()

    def shape(rows: list[str]) -> list[str]:
        return [re.sub(r":.*", ":", row) for row in rows[:17]]

    assert shape(ours) == shape(real)
    assert ours[8:10] == ["\t\tState: Active", "\t\tPhysical state: LinkUp"]
    mlx5_3 = ours[ours.index("CA 'mlx5_3'") :]
    assert mlx5_3[8:11] == ["\t\tState: Down", "\t\tPhysical state: Polling", "\t\tRate: 10"]


def test_xid_lines_have_the_real_shape(xid_fleet: FleetState) -> None:
    text = call(xid_fleet, "gpu003", "dmesg").stdout
    xid = "NVRM: Xid (PCI:0000:52:00): 79, pid='<unknown>', name=<unknown>, "
    assert xid + "GPU has fallen off the bus." in text
    assert re.search(r"^\[ *\d+\.\d{6}\] NVRM: Xid \(PCI:0000:52:00\): 79", text, re.M)
    ctime = call(xid_fleet, "gpu003", "dmesg", "-T").stdout
    assert re.search(r"^\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\] NVRM: Xid", ctime, re.M)
    iso = call(xid_fleet, "gpu003", "journalctl", "-k", "-o", "short-iso", "--no-pager").stdout
    assert re.search(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000 gpu003 kernel: NVRM: Xid \(PCI:0000:52:00\): 79,",
        iso,
        re.M,
    )
    assert iso.startswith("-- Journal begins at ")
    assert "Xid" not in call(xid_fleet, "gpu001", "dmesg").stdout


def test_lsmod_spacing_matches_real(fleet: FleetState) -> None:
    ours = call(fleet, "gpu001", "lsmod").stdout.splitlines()
    real = [
        line.strip()
        for line in sample("misc/issue-gpud-pr39-lsmod-peermem-yaml-indented.txt").splitlines()
    ]
    assert ours[0] == "Module                  Size  Used by"
    assert real[0] in ours
    assert any(
        re.fullmatch(r"nvidia {14}56717312  \d+ nvidia_uvm,nvidia_modeset,nvidia_peermem", line)
        for line in ours
    )


def test_scontrol_node_has_real_fields(fleet: FleetState) -> None:
    ours = call(fleet, "gpu031", "scontrol", "show", "node", "gpu031").stdout
    real = sample("slurm/issue-awsome-195-scontrol-show-node-idle-drain-gres-mismatch-24.05.txt")
    keys = {re.sub(r"=.*", "", item) for item in real.split() if "=" in item}
    assert keys == {re.sub(r"=.*", "", item) for item in ours.split() if "=" in item}
    assert "   State=IDLE+DRAIN ThreadsPerCore=2" in ours
    assert re.search(
        r"^   Reason=fleetfix: xid79 \[run 2024-10-21\] \[root@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\]$",
        ours,
        re.M,
    )


def test_sinfo_views(fleet: FleetState) -> None:
    default = call(fleet, "gpu001", "sinfo").stdout.splitlines()
    assert default[0] == "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"
    assert "gpu*         up   infinite      1  drain gpu031" in default
    nodes = call(
        fleet, "gpu001", "sinfo", "-N", "-h", "-n", "gpu030,gpu031", "-o", "%N %T %E"
    ).stdout
    assert nodes == "gpu030 down Not responding\ngpu031 drained fleetfix: xid79 [run 2024-10-21]\n"


def test_nccl_tests_output_matches_real_format(fleet: FleetState) -> None:
    text = call(
        fleet, "gpu001", "all_reduce_perf", "-b", "512M", "-e", "8G", "-f", "2", "-g", "8"
    ).stdout
    real = sample("nccl-tests/coreweave-pr43-gb200-nvl72-72gpu-allreduce-tail.txt").splitlines()
    lines = text.splitlines()
    assert lines[12:15] == real[2:5]
    half = r" +[\d.]+ +[\d.]+ +[\d.]+ +0"
    assert re.fullmatch(r" {3}536870912 {5}134217728 {5}float {5}sum {6}-1" + half * 2, lines[15])
    assert [len(line) for line in lines[15:20]] == [len(line) for line in real[5:10]]
    average_line = lines[-3]
    assert lines[-4:] == ["# Out of bounds values : 0 OK", average_line, "#", ""]
    assert average_line.startswith("# Avg bus bandwidth    : ") and average_line.endswith(" ")
    assert 300 < float(average_line.split(":")[1]) < 482


def test_slow_and_missing_gpus_change_nccl(fleet: FleetState) -> None:
    def average(node: str) -> float:
        text = call(fleet, node, "all_reduce_perf", "-b", "1G", "-e", "1G", "-g", "8").stdout
        line = next(row for row in text.splitlines() if row.startswith("# Avg bus bandwidth"))
        return float(line.split(":")[1])

    assert average("gpu022") < 0.5 * average("gpu001")
    failed = call(fleet, "gpu018", "all_reduce_perf", "-b", "8", "-e", "1M", "-g", "8")
    assert (
        failed.rc == 1
        and "gpu018: Test CUDA failure common.cu:891 'invalid device ordinal'" in failed.stdout
    )


def test_lost_gpu_reporting(xid_fleet: FleetState) -> None:
    reply = call(xid_fleet, "gpu003", "nvidia-smi", "-L")
    assert (
        reply.rc == 15
        and "Unable to determine the device handle for GPU0000:52:00.0" in reply.stderr
    )
    assert len(reply.stdout.splitlines()) == 7
    root = ET.fromstring(
        call(xid_fleet, "gpu003", "nvidia-smi", "-q", "-x").stdout.split("\n", 2)[2]
    )
    assert root.findtext("attached_gpus") == "8" and len(root.findall("gpu")) == 7
    assert "(rev ff)" in call(xid_fleet, "gpu003", "lspci").stdout


def test_dcgmi_table_matches_real_layout(fleet: FleetState) -> None:
    real = sample(
        "dcgmi/unresolved-gpumemtest-page-diag-r4-persistence-fail-memtest-pass.txt"
    ).splitlines()
    ours = call(fleet, "gpu012", "dcgmi", "diag", "-r", "1")
    lines = ours.stdout.splitlines()
    assert ours.rc == 1 and lines[:4] == real[:4]
    start = lines.index(
        "| Persistence Mode          | Fail                                           |"
    )
    assert lines[start : start + 6] == real[9:15]
    healthy = call(fleet, "gpu001", "dcgmi", "diag", "-r", "3").stdout.splitlines()
    assert (
        "+-----  Stress  ------------+------------------------------------------------+" in healthy
    )
    assert (
        "| Targeted Stress           | Pass - All                                     |" in healthy
    )
    remap = call(fleet, "gpu006", "dcgmi", "diag", "-r", "2").stdout.replace("GPU 4", "GPU 3")
    fragment = sample("dcgmi/stas-mleng-diag-r3-deployment-row-remap-pending-fragment.txt")
    assert "\n".join(fragment.splitlines()[-2:]) in remap


def test_dcgmi_json_is_the_dcgm3_document(fleet: FleetState) -> None:
    document = json.loads(call(fleet, "gpu004", "dcgmi", "diag", "-r", "2", "-j").stdout)
    categories = document["DCGM GPU Diagnostic"]["test_categories"]
    assert [c["category"] for c in categories] == ["Deployment", "Integration", "Hardware"]
    deployment = [t for t in categories[0]["tests"] if t is not None]
    assert deployment[0] == {
        "name": "Denylist",
        "results": [{"gpu_ids": "0,1,2,3,4,5,6,7", "status": "PASS"}],
    }
    memory = categories[2]["tests"][0]
    assert memory["name"] == "GPU Memory" and memory["results"][1]["status"] == "FAIL"
    assert "volatile double-bit ECC" in memory["results"][1]["warnings"][0]["warning"]
    missing_driver = call(fleet, "gpu013", "dcgmi", "diag", "-r", "1")
    assert missing_driver.rc == 255 and "Unable to connect to host engine" in missing_driver.stdout
