"""The topology probe against every real `nvidia-smi topo` sample, and compare_topology."""

from __future__ import annotations

import re

import pytest

from fleetfix.errors import InputError, ProbeParseError
from fleetfix.probes.base import to_data
from fleetfix.probes.topology import PROBE, ExpectedTopology, TopologyFacts, compare_topology
from tests.probes.cases import SAMPLES

HGX_H100 = "unresolved-sglang-issue-copy-8xh100-nv18-8nic-pix-node-570.133.20-complete.txt"
A100_TABS = "oyanghd-8xa100-sxm-40g-nv12-10nic-525-tabs-complete.txt"


def _text(sample: str) -> str:
    return (SAMPLES / "topo" / sample).read_text(encoding="utf-8")


def _parse(sample: str) -> TopologyFacts:
    return PROBE.parse(_text(sample))


def test_hgx_h100_nv18_with_pix_nics() -> None:
    facts = _parse(HGX_H100)
    assert (facts.complete, facts.gpu_count, facts.nic_count) == (True, 8, 8)
    assert facts.gpu_link_types == ("NV18",)
    assert facts.all_gpus_nvlinked is True
    gpu0 = facts.gpus[0]
    assert dict(gpu0.nvlinks) == {f"GPU{i}": 18 for i in range(1, 8)}
    assert (gpu0.closest_nics, gpu0.nic_link) == (("mlx5_0",), "PIX")
    assert (gpu0.cpu_affinity, gpu0.numa_affinity, gpu0.gpu_numa_id) == ("0-47,96-143", "0", None)
    assert facts.gpus[4].numa_affinity == "1"
    assert facts.matrix["NIC3"]["GPU3"] == "PIX"
    assert facts.matrix["GPU5"]["NIC4"] == "NODE"
    assert compare_topology(facts, ExpectedTopology(gpus=8, nics=8, gpu_link="NV18")) == ()


def test_real_tabs_and_nic_legend() -> None:
    facts = _parse(A100_TABS)
    assert facts.complete is True
    assert facts.nics["NIC9"] == "mlx5_9"
    assert facts.gpus[6].closest_nics == ("mlx5_6", "mlx5_7")
    assert facts.gpus[6].nic_link == "PXB"
    assert facts.gpus[2].cpu_affinity == "16-31,144-159"
    assert facts.legend["NV#"] == "Connection traversing a bonded set of # NVLinks"
    problems = compare_topology(facts, ExpectedTopology(gpus=8, gpu_link="NV18"))
    assert len(problems) == 28  # every one of the 8*7/2 pairs is NV12
    assert problems[0] == "GPU0-GPU1: expected NV18, seen NV12"


def test_spaces_read_like_tabs() -> None:
    text = _text(A100_TABS)
    assert to_data(PROBE.parse(text.replace("\t", "    "))) == to_data(PROBE.parse(text))


def test_netdev_nic_names_and_phb() -> None:
    facts = _parse("ssbandjl-s114-2xv100-4nic-roce-netdev-names-570.txt")
    assert facts.gpus[1].closest_nics == ("rocep137s0f0", "rocep137s0f1")
    assert facts.gpus[1].nic_link == "PHB"
    assert facts.gpu_link_types == ("SYS",)
    assert facts.all_gpus_nvlinked is False


def test_legacy_mlx5_columns_without_affinity_labels() -> None:
    facts = _parse("issue-ncclt-78-dgx2-16gpu-nv6-mlx5-legacy-trunc.txt")
    assert facts.gpu_count == 16
    assert facts.gpus[2].closest_nics == ("mlx5_1",)
    assert facts.gpus[0].numa_affinity is None
    assert facts.complete is False
    # The last row was cut mid-value ("0-23,4"): it is dropped, not read as a CPU list.
    assert "GPU4" not in facts.matrix
    assert facts.gpus[-1].name == "GPU3"


def test_cut_off_output_is_partial_and_never_confirms() -> None:
    facts = _parse("issue-nccl-933-8gpu-nv8-9nic-trunc.txt")
    assert facts.complete is False
    assert sorted(facts.matrix) == [f"GPU{i}" for i in range(7)]
    problems = compare_topology(facts, ExpectedTopology(gpus=8, gpu_link="NV8"))
    assert problems == ("topology output is incomplete (cut off or elided): cannot confirm it",)


def test_compare_against_a_golden_node() -> None:
    golden = _parse(HGX_H100)
    assert compare_topology(golden, golden) == ()
    degraded_text = (
        _text(HGX_H100)
        .replace(
            "GPU3    NV18    NV18    NV18     X      NV18    NV18",
            "GPU3    NV18    NV18    NV18     X      NV18    NV17",
            1,
        )
        .replace("GPU5    NV18    NV18    NV18    NV18", "GPU5    NV18    NV18    NV18    NV17", 1)
    )
    degraded = PROBE.parse(degraded_text)
    assert compare_topology(degraded, golden) == (
        "GPU3-GPU5: expected NV18, seen NV17",
        "GPU5-GPU3: expected NV18, seen NV17",
    )
    assert degraded.gpus[3].nvlinks["GPU5"] == 17


def test_expected_topology_from_inventory_vars() -> None:
    expected = ExpectedTopology.from_data(
        {"gpus": "8", "nics": 8, "gpu_link": "NV18", "links": {"GPU0-NIC0": "PIX"}}
    )
    assert expected == ExpectedTopology(
        gpus=8, nics=8, gpu_link="NV18", links={("GPU0", "NIC0"): "PIX"}
    )
    assert compare_topology(_parse(HGX_H100), expected) == ()
    wrong = ExpectedTopology(links={("GPU0", "NIC1"): "PIX"})
    assert compare_topology(_parse(HGX_H100), wrong) == ("GPU0-NIC1: expected PIX, seen NODE",)


@pytest.mark.parametrize(
    "data",
    [{"gpus": "eight"}, {"gpu_link": "FAST"}, {"links": {"GPU0": "PIX"}}, {"links": {"a-b": "x"}}],
)
def test_expected_topology_refuses_nonsense(data: dict[str, object]) -> None:
    with pytest.raises(InputError, match="expected topology"):
        ExpectedTopology.from_data(data)


def test_nvidia_smi_failure_is_named() -> None:
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    with pytest.raises(ProbeParseError, match="nvidia-smi failed: NVIDIA-SMI has failed"):
        PROBE.parse(text)


def test_mangled_paste_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="not a CPU/NUMA list"):
        _parse("llmaction-8xh800-nv8-4nic-525-terminal-clipped.txt")


def test_p2p_matrix_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="topo -p2p"):
        _parse("issue-club3090-1229-2x5090-topo-p2p-rw.txt")


def test_shifted_columns_are_refused() -> None:
    text = _text(HGX_H100).replace("GPU2    NV18    NV18     X ", "GPU2    NV18     X ", 1)
    with pytest.raises(ProbeParseError, match="only a device's own cell is X") as info:
        PROBE.parse(text)
    assert info.value.line == 4


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("hello world\n", "not a `topo -m` header line"),
        ("Hello World\n", "'Hello' is not a device column"),
        (
            "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \nGPU9\tSYS\tSYS\n\nLegend:\n",
            "has no column",
        ),
        (
            "\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tFAST\t X \n\nLegend:\n",
            "'FAST' is not a link type",
        ),
    ],
)
def test_garbage_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


def test_command() -> None:
    assert PROBE.command({}) == "nvidia-smi topo -m"


REAL_H200 = SAMPLES / "real-nodes" / "h200-sxm-vm-580.159.04" / "probe-topology.txt"


def test_real_h200_single_gpu_with_ansi_header_and_gpu_numa_id() -> None:
    """One H200 in a VM: the header underlined with ESC[4m...ESC[0m (into a pipe), a `GPU NUMA
    ID` column read N/A, the empty cell nvidia-smi prints before it, no NIC, no NVLink."""
    facts = PROBE.read(REAL_H200.read_text(encoding="utf-8"))
    assert (facts.complete, facts.gpu_count, facts.nic_count) == (True, 1, 0)
    assert facts.devices == ("GPU0",)
    gpu = facts.gpus[0]
    assert (gpu.cpu_affinity, gpu.numa_affinity, gpu.gpu_numa_id) == ("0-15", "0", None)
    assert (gpu.nvlink_peers, gpu.closest_nics, gpu.nic_link) == (0, (), None)
    assert (facts.gpu_link_types, facts.all_gpus_nvlinked) == ((), False)
    assert compare_topology(facts, ExpectedTopology(gpus=1, nics=0)) == ()
    assert compare_topology(facts, ExpectedTopology(gpus=8)) == ("expected 8 GPUs, seen 1",)


def test_single_gpu_pcie_boards() -> None:
    """A PCIe H100 with one NIC behind the host bridge, and one alone in a VM: one GPU, no
    GPU pairs, so no NVLink is expected or reported."""
    with_nic = _parse("issue-sglang-24413-h100-pcie-1gpu-1nic-phb-575-kvm.txt")
    assert (with_nic.gpu_count, with_nic.nic_count, with_nic.complete) == (1, 1, True)
    assert (with_nic.gpus[0].nic_link, with_nic.gpus[0].gpu_numa_id) == ("PHB", None)
    assert with_nic.gpus[0].cpu_affinity == "0-251"
    alone = _parse("nvgpuexp-h100-vm-1gpu-590.48.01.txt")
    assert (alone.gpu_count, alone.nic_count, alone.gpu_link_types) == (1, 0, ())
    assert alone.gpus[0].cpu_affinity == "0-19"


def test_an_empty_tab_cell_keeps_its_column() -> None:
    """A GB200 NVL72 tray captured in a container (ANSI header): GPUs 2-3 have an empty CPU
    Affinity cell (none of their Grace's CPUs in the container's cpuset). Read by whitespace,
    their NUMA node 1 became a CPU list "1"; read by tabs it stays NUMA 1, CPUs unknown."""
    text = _text("aiconfigurator-gb200-nvl72-tray-4gpu-6nic-ansi.txt")
    facts = PROBE.read(text)
    assert [(g.cpu_affinity, g.numa_affinity, g.gpu_numa_id) for g in facts.gpus] == [
        ("0-35", "0", None),
        ("0-35", "0", None),
        (None, "1", None),
        (None, "1", None),
    ]
    assert (facts.gpu_count, facts.nic_count, facts.gpu_link_types) == (4, 6, ("NV18",))
    assert facts.complete is True
    assert compare_topology(facts, ExpectedTopology(gpus=4, nics=6, gpu_link="NV18")) == ()


def test_the_raw_ansi_capture_reads_as_its_stripped_copy() -> None:
    raw = _text("nvgpuexp-h100-vm-1gpu-590.48.01-raw-ansi.txt")
    assert "\x1b[4m" in raw
    assert PROBE.read(raw) == PROBE.read(_text("nvgpuexp-h100-vm-1gpu-590.48.01.txt"))
