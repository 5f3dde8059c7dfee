"""The pci_gpus probe on real lspci captures (gpud testdata, shared/samples/MANIFEST.md) and on
the sysfs form the probe falls back to where pciutils is missing (the real H200 VM had none)."""

from __future__ import annotations

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes.pci_gpus import PROBE, PciGpusFacts
from tests.probes.cases import SAMPLES


def _sample(name: str) -> PciGpusFacts:
    return PROBE.parse((SAMPLES / "lspci" / name).read_text(encoding="utf-8"))


def test_lspci_nn_counts_the_gpus_not_the_nvswitches_or_nics() -> None:
    facts = _sample("gpud-lspci-nn-azure-8xa100-sxm4-80gb-cx6-vf.txt")
    assert facts.count == 8  # six NVSwitch bridges [0680] and the ConnectX VFs do not count
    assert {g.device_id for g in facts.gpus} == {"20b2"}
    assert facts.gpus[0].slot == "0001:00:00.0"
    assert facts.source == "paste"


def test_plain_lspci_of_a_gb200_tray_counts_its_four_gpus() -> None:
    facts = _sample("gpud-lspci-gb200-4gpu-2941-cx7-bf3.txt")
    assert facts.count == 4  # Grace's NVIDIA root ports are PCI bridges, not GPUs
    assert all(g.device_id is None for g in facts.gpus)  # plain lspci prints no ids


def test_the_probe_command_output_with_a_lost_gpu() -> None:
    text = (
        "### fleetfix lspci\n"
        "0000:1b:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB]"
        " [10de:2330] (rev a1)\n"
        "0000:43:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB]"
        " [10de:2330] (rev ff)\n"
        "0000:05:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)\n"
    )
    facts = PROBE.parse(text)
    assert (facts.count, facts.source) == (2, "lspci")
    assert [g.lost for g in facts.gpus] == [False, True]


def test_sysfs_fallback_counts_display_class_functions() -> None:
    text = (
        "### fleetfix sysfs\n"
        "0000:00:06.0 0x030200 0x2335\n"  # an H200 passed through to a VM
        "0000:00:07.0 0x068000 0x22a3\n"  # an NVSwitch
    )
    facts = PROBE.parse(text)
    assert (facts.count, facts.source) == (1, "sysfs")
    assert facts.gpus[0].device_id == "2335"


def test_a_node_without_nvidia_functions_has_none() -> None:
    assert PROBE.parse("### fleetfix sysfs\n").count == 0


def test_garbage_is_refused_with_its_line() -> None:
    with pytest.raises(ProbeParseError, match="at line 2"):
        PROBE.parse("### fleetfix lspci\nbash: lspci: Permission denied\n")
