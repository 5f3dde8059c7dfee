"""The lab prints what real nodes print (issue 18): every emulated output against a real capture.

A `real-forms` lab (one node per kind of machine, src/fleetfix/lab/scenarios/real-forms.yml) runs
the real commands over SSH, through the node sandbox and the tool shims, and each output is held
against a capture in tests/fixtures/samples/:

* rf01, an H200 SXM passed through to a Firecracker VM on the open 580.159.04 module, is the
  emulated twin of tests/fixtures/samples/real-nodes/h200-sxm-vm-580.159.04: byte for byte,
  once the values that differ between two machines are masked (UUIDs, serials, PDI, bus and
  slot ids, timestamps, temperatures, power draws, PCIe throughput, free memory, module
  addresses, the driver's build stamp and compiler);
* the other nodes, where only a capture of another machine exists, against its structure: a
  GB200 NVL72 tray's topo -m (escapes, columns, NIC rows, legends), an 8-GPU NV18 topo -m and
  a GB200 `nvlink -s` for the B200, a container's dmesg refusal.

Every built-in probe's own command also runs on every node, and fleetfix's parser must read it
(or say the node does not have the tool, where its environment lacks it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fleetfix.lab.build import build_fleet
from fleetfix.lab.control import LabHandle
from fleetfix.lab.scenario_file import load_scenario
from fleetfix.lab.state import FleetState
from fleetfix.probes import BUILTIN_PROBES, probe_registry
from fleetfix.probes.base import verdict
from tests.lab.support import Result, call, run, running_lab
from tests.lab.test_formats import sample

REAL = "real-nodes/h200-sxm-vm-580.159.04"
VM = "rf01"
QUERY_GPU = (
    "nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,driver_version,persistence_mode,pstate,"
    "mig.mode.current,ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
    "remapped_rows.pending,remapped_rows.failure,temperature.gpu,power.draw,memory.total"
    " --format=csv"
)
QUERY_APPS = (
    "nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory"
    " --format=csv,noheader"
)

_UUID = re.compile(r"GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")
_SMI_TIME = re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}")
_BUS_ID = re.compile(r"0{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d")
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|-?\d+(?:\.\d+)?")
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_QUERY_VALUES = frozenset(
    {
        "Serial Number",
        "GPU PDI",
        "Board ID",
        "Module Id",
        "Bus",
        "Device",
        "Tx Throughput",
        "Rx Throughput",
        "Free",
        "GPU Current Temp",
        "GPU T.Limit Temp",
        "GPU Shutdown T.Limit Temp",
        "GPU Slowdown T.Limit Temp",
        "GPU Max Operating T.Limit Temp",
        "Memory Current Temp",
        "Average Power Draw",
        "Instantaneous Power Draw",
    }
)
"""-q keys whose values belong to the machine (ids, slots, sensors), not to the form."""
_XML_VALUES = frozenset(
    {
        "serial",
        "pdi",
        "board_id",
        "module_id",
        "pci_bus",
        "pci_device",
        "tx_util",
        "rx_util",
        "free",
        "gpu_temp",
        "gpu_temp_tlimit",
        "gpu_temp_max_tlimit_threshold",
        "gpu_temp_slow_tlimit_threshold",
        "gpu_temp_max_gpu_tlimit_threshold",
        "memory_temp",
        "average_power_draw",
        "instant_power_draw",
    }
)


def _mask(value: str) -> str:
    """Numbers (decimal or hex) become `#`; units, words and spacing stay."""
    return _NUMBER.sub("#", value)


def _common(text: str) -> str:
    return _BUS_ID.sub("<bus>", _SMI_TIME.sub("<time>", _UUID.sub("<uuid>", text)))


def normalise_query(text: str) -> str:
    """`nvidia-smi -q`: the values of _QUERY_VALUES masked (key, column and unit stay)."""
    out = []
    for line in _common(text).splitlines():
        key, colon, value = line.partition(" : ")
        masked = colon and key.strip() in _QUERY_VALUES
        out.append(f"{key}{colon}{_mask(value)}" if masked else line)
    return "\n".join(out) + "\n"


def normalise_xml(text: str) -> str:
    def element(match: re.Match[str]) -> str:
        tag, value = match.group(1), match.group(2)
        return f"<{tag}>{_mask(value) if tag in _XML_VALUES else value}</{tag}>"

    return re.sub(r"<(\w+)>([^<]*)</\1>", element, _common(text))


def normalise_table(text: str) -> str:
    """The default table: a GPU's temperature and power draw (right-aligned) masked."""
    text = re.sub(r" +\d+(?=C )", " #", _common(text))
    return re.sub(r" +\d+(?=W /)", " #", text)


def normalise_csv(text: str) -> str:
    rows = [line.split(", ") for line in _common(text).splitlines()]
    header = rows[0]
    masked = {i for i, name in enumerate(header) if name.startswith(("temperature", "power"))}
    for row in rows[1:]:
        for index in masked:
            row[index] = _mask(row[index])
    return "\n".join(", ".join(row) for row in rows) + "\n"


def normalise_modules(text: str) -> str:
    """/proc/modules (and the probe's version block): addresses, build stamp, compiler."""
    text = re.sub(r"Live 0x[0-9a-f]{16}", "Live 0x#", text)
    text = re.sub(r"(Release Build  )\([^)]*\)  .*$", r"\1(#)  #", text, flags=re.M)
    return re.sub(r"^(GCC version:  gcc version ).*$", r"\1#", text, flags=re.M)


def identity(text: str) -> str:
    return text


def mask_cpu_affinity(text: str) -> str:
    """topo -m with each GPU row's CPU Affinity cell masked (the machine's CPU count)."""
    rows = text.split("\n")
    column = _ESCAPE.sub("", rows[0]).split("\t").index("CPU Affinity")
    for number, row in enumerate(rows):
        cells = row.split("\t")
        if row.startswith("GPU") and len(cells) > column:
            cells[column] = "#"
            rows[number] = "\t".join(cells)
    return "\n".join(rows)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with running_lab("real-forms", tmp_path_factory.mktemp("state")) as handle:
        yield handle


async def _ok(lab: LabHandle, node: str, command: str) -> Result:
    result = await run(lab, node, command)
    assert result.rc == 0, (node, command, result)
    return result


# -- the H200 VM against its real twin, byte for byte ----------------------------------------


CAPTURES: list[tuple[str, str, Callable[[str], str]]] = [
    ("nvidia-smi", "nvidia-smi.txt", normalise_table),
    ("nvidia-smi -L", "nvidia-smi-L.txt", _common),
    ("nvidia-smi -q", "nvidia-smi-q.txt", normalise_query),
    ("nvidia-smi -q -x", "nvidia-smi-q-x.txt", normalise_xml),
    ("nvidia-smi -q -d ROW_REMAPPER", "nvidia-smi-q-d-row-remapper.txt", normalise_query),
    ("nvidia-smi topo -m", "nvidia-smi-topo-m.txt", identity),
    ("nvidia-smi nvlink -s", "nvidia-smi-nvlink-s.txt", identity),
    ("nvidia-smi nvlink -e", "nvidia-smi-nvlink-e.txt", identity),
    (QUERY_GPU, "nvidia-smi-query-gpu.txt", normalise_csv),
    (QUERY_APPS, "nvidia-smi-query-compute-apps.txt", identity),
    ("cat /proc/modules", "proc-modules.txt", normalise_modules),
    ("cat /proc/driver/nvidia/version", "driver-version.txt", normalise_modules),
]


@pytest.mark.parametrize(
    ("command", "capture", "normalise"), CAPTURES, ids=[c[1].removesuffix(".txt") for c in CAPTURES]
)
async def test_the_vm_node_prints_its_real_twin(
    lab: LabHandle, command: str, capture: str, normalise: Callable[[str], str]
) -> None:
    real = sample(f"{REAL}/{capture}")
    ours = (await _ok(lab, VM, command)).stdout
    assert normalise(ours) == normalise(real)


def test_the_normalisers_mask_only_values() -> None:
    """The masks keep what a form is: a changed key, unit, column or escape still differs."""
    real = sample(f"{REAL}/nvidia-smi-q.txt")
    assert normalise_query(real) != normalise_query(real.replace("Bus Id   ", "Bus ID   "))
    assert normalise_query(real) != normalise_query(real.replace("39 C", "39 F"))
    shifted = real.replace(
        "Driver Version                                         :", "Driver Version :"
    )
    assert normalise_query(real) != normalise_query(shifted)
    xml = sample(f"{REAL}/nvidia-smi-q-x.txt")
    assert normalise_xml(xml) != normalise_xml(xml.replace("<pdi>", "<gpu_pdi>"))
    assert "\x1b[4m" in sample(f"{REAL}/nvidia-smi-topo-m.txt")
    modules = sample(f"{REAL}/proc-modules.txt")
    assert normalise_modules(modules) != normalise_modules(modules.replace("(O)", "(OE)"))


async def test_the_vm_node_has_the_real_tools_and_no_others(lab: LabHandle) -> None:
    """which.txt: what the real VM has; a missing tool is bash's own `command not found`."""
    which = sample(f"{REAL}/which.txt").splitlines()
    missing = [line.split()[0] for line in which if line.endswith(" missing")]
    found = (
        await _ok(lab, VM, f"for t in {' '.join(missing)}; do command -v $t; done; true")
    ).stdout
    assert found == ""
    for tool in ("nvidia-smi", "dmesg", "fuser"):
        assert (await _ok(lab, VM, f"command -v {tool}")).stdout.strip().endswith(f"/{tool}")
    lsmod = await run(lab, VM, "lsmod")
    assert (lsmod.rc, lsmod.stdout, lsmod.stderr) == (
        127,
        "",
        "bash: line 1: lsmod: command not found\n",
    )
    assert (await run(lab, VM, "scontrol show node rf01")).stderr == sample(
        f"{REAL}/scontrol.stderr.txt"
    )


async def test_the_vm_kernel_log_has_the_real_nvidia_lines(lab: LabHandle) -> None:
    """dmesg -T: the real line format, and each NVIDIA line the lab logs is one the real VM
    logged (its numbers and build stamp masked); the FBHUB line is that GPU's own."""

    def nvidia(text: str) -> set[str]:
        lines = [line.split("] ", 1)[1] for line in text.splitlines()]
        wanted = [line for line in lines if re.match(r"(NVRM|nvidia)", line)]
        return {_mask(normalise_modules(line)) for line in wanted}

    real = sample(f"{REAL}/dmesg.txt")
    ours = (await _ok(lab, VM, "dmesg -T")).stdout
    stamp = re.compile(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\] ")
    assert all(stamp.match(line) for line in ours.splitlines())
    own_gpu = {line for line in nvidia(real) if "FBHUB Interrupt" in line}
    assert own_gpu and nvidia(ours) == nvidia(real) - own_gpu


def _built(tmp_path: Path, fleet: str) -> FleetState:
    tmp_path.mkdir()
    path = tmp_path / "case.yml"
    path.write_text(f"fleet: {{racks: 1, leaves: 1, nodes_per_rack: 1, {fleet}}}\n", "utf-8")
    return build_fleet(load_scenario(path), tmp_path, 1767225600.0)


def test_topology_header_follows_the_driver(tmp_path: Path) -> None:
    """Underlined from 580 (a raw 590.48.01 capture of an H100 VM, escapes kept), plain before;
    no GPU NUMA ID column before 535 (a 525.105.17 capture): rows end in fewer cells."""
    vm590 = _built(
        tmp_path / "590", 'board: hgx-h100, environment: vm, driver_version: "590.48.01"'
    )
    ours = call(vm590, "gpu001", "nvidia-smi", "topo", "-m").stdout
    real = sample("topo/nvgpuexp-h100-vm-1gpu-590.48.01-raw-ansi.txt")
    assert mask_cpu_affinity(ours) == mask_cpu_affinity(real)
    plain = call(
        _built(tmp_path / "550", 'board: hgx-h100, driver_version: "550.90.07"'),
        "gpu001",
        "nvidia-smi",
        "topo",
        "-m",
    )
    assert plain.stdout.startswith("\tGPU0\tGPU1\t") and "\x1b" not in plain.stdout
    old = call(
        _built(tmp_path / "525", 'board: hgx-a100, driver_version: "525.105.17"'),
        "gpu001",
        "nvidia-smi",
        "topo",
        "-m",
    )
    real525 = sample("topo/oyanghd-8xa100-sxm-40g-nv12-10nic-525-tabs-complete.txt").split("\n")
    ours525 = old.stdout.split("\n")
    assert ours525[0].endswith("\tCPU Affinity\tNUMA Affinity") and real525[0].endswith(
        "\tCPU Affinity\tNUMA Affinity"
    )
    assert ours525[1].split("\t")[-2:] == ["0-55,112-167", "0"]
    assert (
        ours525[9].endswith("\t\t")
        and real525[9].endswith("\t\t")
        and not ours525[9].endswith("\t\t\t")
    )


# -- other machines, against captures of their kind -------------------------------------------


async def test_gb200_tray_topology_is_the_real_trays(lab: LabHandle) -> None:
    """The real GB200 NVL72 tray (a container's cpuset: its second Grace's CPUs are empty)."""
    real = sample("topo/aiconfigurator-gb200-nvl72-tray-4gpu-6nic-ansi.txt")
    ours = (await _ok(lab, "rf04", "nvidia-smi topo -m")).stdout
    assert mask_cpu_affinity(ours) == mask_cpu_affinity(real)
    assert "\tNV18\t" in ours and ours.startswith("\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0")


async def test_b200_topology_and_nvlink_have_the_real_shape(lab: LabHandle) -> None:
    """HGX B200: the 8-GPU NV18 matrix of a real 8x H100 (NVSwitch all-to-all, one NIC per
    GPU); NVLink5 status as a real GB200's: 18 links of 53.125 GB/s."""
    topo = (await _ok(lab, "rf03", "nvidia-smi topo -m")).stdout
    real = sample(
        "topo/unresolved-sglang-issue-copy-8xh100-nv18-8nic-pix-node-570.133.20-complete.txt"
    )
    ours_rows = [_ESCAPE.sub("", line).split() for line in topo.splitlines()[:17]]
    real_rows = [line.split() for line in real.splitlines()[:17]]
    assert ours_rows[0] == real_rows[0]
    assert [row[:17] for row in ours_rows[1:]] == [row[:17] for row in real_rows[1:]]
    status = (await _ok(lab, "rf03", "nvidia-smi nvlink -s -i 0")).stdout.splitlines()
    gb200 = sample("nvlink/issue-k8stestinfra-371-nvlink-s-gb200-elided.txt").splitlines()[1:]
    assert status[0].startswith("GPU 0: NVIDIA B200 (UUID: GPU-") and len(status) == 19
    assert [line.split() for line in status[1:7]] == [line.split() for line in gb200[1:7]]
    assert status[18] == "\t Link 17: 53.125 GB/s"


async def test_single_pcie_cards_have_no_nvlink(lab: LabHandle) -> None:
    """H200 NVL, one card: `nvlink -s` and `-e` print nothing, exit 0 (as the real VM)."""
    for mode in ("-s", "-e"):
        assert (await _ok(lab, "rf02", f"nvidia-smi nvlink {mode}")).stdout == ""
    table = (await _ok(lab, "rf02", "nvidia-smi")).stdout
    assert "|   0  NVIDIA H200 NVL                On  |" in table and "/  600W |" in table
    topo = (await _ok(lab, "rf02", "nvidia-smi topo -m")).stdout.splitlines()
    real = sample("topo/issue-sglang-24413-h100-pcie-1gpu-1nic-phb-575-kvm.txt").splitlines()
    assert _ESCAPE.sub("", topo[0]).split() == real[0].split()
    assert len(topo[1].split("\t")) == 7 and topo[2].split("\t")[:3] == ["NIC0", "PIX", " X "]


async def test_container_dmesg_is_refused_as_real_containers_refuse_it(lab: LabHandle) -> None:
    refused = await run(lab, "rf05", "dmesg -T")
    real = sample("dmesg-other/issue-osbuild-composer-pr4094-dmesg-not-permitted-stderr-rc1.txt")
    assert (refused.rc, refused.stdout, refused.stderr) == (1, "", real)
    for tool in ("journalctl", "systemctl", "lsmod"):
        assert (await run(lab, "rf05", tool)).rc == 127
    assert (await _ok(lab, "rf05", "nvidia-smi -L")).stdout.count("\n") == 8


def test_truth_names_each_nodes_board_and_environment(lab: LabHandle) -> None:
    nodes = lab.truth()["nodes"]
    seen = {name: (n["board"], n["environment"], n["without"]) for name, n in nodes.items()}
    assert seen == {
        "rf01": ("hgx-h200", "vm", []),
        "rf02": ("h200-nvl", "bare-metal", []),
        "rf03": ("hgx-b200", "bare-metal", []),
        "rf04": ("gb200-nvl", "bare-metal", []),
        "rf05": ("hgx-h100", "container", []),
        "rf06": ("hgx-h100", "bare-metal", ["slurm"]),
    }
    vm = nodes["rf01"]
    assert vm["services"] == {} and vm["persistence"] == [True]
    assert vm["modules"] == ["nvidia_uvm", "nvidia"] and vm["fabric"]["gpus"] == ["N/A"]


async def test_a_node_without_slurm_has_no_slurm_client(lab: LabHandle) -> None:
    gone = await run(lab, "rf06", "scontrol show node rf06; sinfo")
    assert gone.rc == 127
    assert gone.stderr == (
        "bash: line 1: scontrol: command not found\nbash: line 1: sinfo: command not found\n"
    )
    assert (await _ok(lab, "rf05", "scontrol show node rf06")).stdout.startswith("NodeName=rf06 ")


async def test_proc_modules_is_the_nodes_own_in_its_real_form(lab: LabHandle) -> None:
    """Bare metal: the kernel's form with counts and users (`nvidia ... 3 nvidia_uvm,...,`);
    unloading a module changes the node's /proc/modules, never the machine's."""
    text = (await _ok(lab, "rf06", "cat /proc/modules")).stdout
    line = re.compile(r"^\w+ \d+ (\d+ (?:[\w]+,)+|\d+ -) Live 0x[0-9a-f]{16}(?: \((P?OE?)\))?$")
    assert all(line.match(row) for row in text.splitlines()), text
    nvidia = next(row for row in text.splitlines() if row.startswith("nvidia "))
    assert " nvidia_uvm,nvidia_modeset,nvidia_peermem, Live " in nvidia and nvidia.endswith("(POE)")
    after = (await _ok(lab, "rf06", "rmmod nvidia_peermem && cat /proc/modules")).stdout
    assert "nvidia_peermem" not in after and " nvidia_uvm,nvidia_modeset, Live " in after
    open_module = (await _ok(lab, "rf03", "cat /proc/modules")).stdout
    assert re.search(r"^nvidia \d+ \d+ \S+ Live 0x[0-9a-f]{16} \(OE\)$", open_module, re.M)


# -- fleetfix's parsers read every emulated output ---------------------------------------------

ABSENT = {
    "rf01": {"ib", "ib_counters", "dcgm_diag", "nccl_tests", "slurm_node", "services"},
    "rf05": {"services"},
    "rf06": {"slurm_node"},
}
"""Probes whose tool the node's environment does not have (ToolNotInstalled, not facts)."""


@pytest.mark.parametrize("node", ["rf01", "rf02", "rf03", "rf04", "rf05", "rf06"])
async def test_every_probe_reads_what_the_node_prints(lab: LabHandle, node: str) -> None:
    registry = probe_registry()
    for name in BUILTIN_PROBES:
        probe = registry.get(name)
        result = await run(lab, node, probe.command({}), timeout=60)
        if lab.sandbox == "fallback" and name == "shm":  # refused there (docs/lab.md)
            assert result.rc == 126, result
            continue
        seen = verdict(probe, result.stdout)
        if name in ABSENT.get(node, set()):
            assert seen.absent is not None, (node, name, seen.error, result)
        elif node == "rf05" and name == "xid":  # no readable kernel log is not "no Xid"
            assert seen.facts is None and seen.error, (node, name, result)
        else:
            assert seen.error is None, (node, name, seen.error, result.stdout[-2000:])


def test_captures_keep_their_source() -> None:
    """Every capture these tests hold the lab against is listed with where it came from."""
    manifest = Path(__file__).resolve().parents[1] / "fixtures" / "samples" / "LAB-CAPTURES.md"
    text = manifest.read_text(encoding="utf-8")
    for name in (
        "topo/aiconfigurator-gb200-nvl72-tray-4gpu-6nic-ansi.txt",
        "topo/nvgpuexp-h100-vm-1gpu-590.48.01-raw-ansi.txt",
        "dmesg-other/issue-osbuild-composer-pr4094-dmesg-not-permitted-stderr-rc1.txt",
    ):
        assert name in text
