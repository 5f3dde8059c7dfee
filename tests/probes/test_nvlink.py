"""The nvlink probe against every real `nvidia-smi nvlink` sample."""

from __future__ import annotations

import re

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes.nvlink import PROBE, NvlinkFacts
from tests.probes.cases import SAMPLES


def _text(sample: str) -> str:
    return (SAMPLES / "nvlink" / sample).read_text(encoding="utf-8")


def _parse(sample: str) -> NvlinkFacts:
    return PROBE.parse(_text(sample))


def test_8xa100_all_links_up() -> None:
    facts = _parse("gpud-nvlink-status-8xa100-sxm4-80gb-12links-25gbs.txt")
    assert [gpu.index for gpu in facts.gpus] == list(range(8))
    assert {len(gpu.links) for gpu in facts.gpus} == {12}
    assert {gpu.active_links for gpu in facts.gpus} == {12}
    assert facts.link_speeds_gbps == (25.0,)
    assert facts.gpus[7].uuid == "GPU-754035b4-4708-efcd-b261-623aea38bcad"
    assert (facts.inactive_links, facts.gpus_with_inactive_links) == ((), ())
    assert (facts.status_seen, facts.errors_seen, facts.complete) == (True, False, True)


def test_v100_inactive_links() -> None:
    facts = _parse("issue-azhpcdiag-73-nvlink-s-v100-inactive-links.txt")
    assert facts.inactive_links == ((3, 3), (3, 5))
    assert facts.gpus_with_inactive_links == (3,)
    gpu = facts.gpus[0]
    assert gpu.uuid is None  # the poster wrote "UUID: ..."
    assert [link.speed_gbps for link in gpu.links] == [25.781, 25.781, 25.781, None, 25.781, None]
    assert facts.complete is False  # the poster's "...." elision


def test_gpu_with_all_links_inactive() -> None:
    facts = _parse("siboehm-bench-nvlink-s-3xa6000-bridge-one-inactive.txt")
    assert facts.gpus[2].all_links_inactive is True
    assert facts.gpus[2].links == ()
    assert facts.gpus_with_inactive_links == (2,)
    assert facts.gpus[0].active_links == 4
    assert facts.link_speeds_gbps == (14.062,)


def test_error_counters() -> None:
    facts = _parse("stas-mleng-nvlink-e-h100-masked-uuid-elided.txt")
    assert (facts.status_seen, facts.errors_seen, facts.complete) == (False, True, False)
    links = facts.gpus[0].links
    assert [link.index for link in links] == [0, 1, 17]
    assert dict(links[2].errors) == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
    assert links[0].active is None  # `-e` alone says nothing about link state


def test_status_and_errors_merge_per_gpu() -> None:
    facts = _parse("synthetic-probe-output-2gpu-status-and-errors-link3-inactive.txt")
    assert (facts.status_seen, facts.errors_seen, facts.complete) == (True, True, True)
    link3 = facts.gpus[1].links[3]
    assert (link3.active, link3.speed_gbps) == (False, None)
    assert link3.errors["crc_errors"] == 1742
    assert facts.gpus[1].error_total == 1757
    assert facts.gpus_with_link_errors == (1,)
    assert facts.inactive_links == ((1, 3),)


def test_output_cut_mid_line_is_partial() -> None:
    text = _text("gpud-nvlink-status-8xa100-sxm4-80gb-12links-25gbs.txt")
    cut = text[: text.index("Link 11: 25 GB/s", text.index("GPU 7")) + len("Link 11: 2")]
    facts = PROBE.parse(cut)
    assert facts.complete is False
    assert len(facts.gpus[7].links) == 11


def test_nvidia_smi_failure_is_named() -> None:
    with pytest.raises(ProbeParseError, match="nvidia-smi failed: Failed to initialize NVML"):
        PROBE.parse("Failed to initialize NVML: Driver/library version mismatch\n")


def test_link_at_zero_speed_is_down() -> None:
    facts = PROBE.parse("GPU 0: X (UUID: GPU-1)\n\t Link 0: 0 GB/s\n\t Link 1: 25 GB/s\n")
    assert facts.inactive_links == ((0, 0),)


def test_nvlink_info_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="reads nvlink -s and -e"):
        _parse("issue-k8stestinfra-371-nvlink-info-gb200-trunc.txt")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("         Link 0: 25 GB/s\nGPU 0: A (UUID: GPU-1)\n", "before any 'GPU N:' header"),
        (
            "GPU 0: A (UUID: GPU-1)\n Link 0: fast\n Link 1: 25 GB/s\n",
            "not a line of nvidia-smi nvlink",
        ),
        ("random words\n", "no 'GPU N:' section"),
    ],
)
def test_garbage_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


def test_command_runs_status_and_errors() -> None:
    command = PROBE.command({})
    assert "nvidia-smi nvlink -s" in command
    assert "nvidia-smi nvlink -e" in command
    assert command.index("nvlink-status") < command.index("nvlink-errors")
    # each tool's exit status follows its output, so empty-and-0 can be told from a failure
    assert command.count('echo "### fleetfix end rc=$?"') == 2
    assert command.index('nvlink -s 2>&1; echo "### fleetfix end rc=$?"') > 0


def test_a_gpu_without_nvlink_prints_nothing_and_has_zero_links() -> None:
    """The real H200 in a VM (older command: markers only) and the command's output now."""
    real = (SAMPLES / "real-nodes/h200-sxm-vm-580.159.04/probe-nvlink.txt").read_text()
    for text in (real, _text("synthetic-probe-output-no-nvlink-empty-rc0.txt")):
        facts = PROBE.read(text)
        assert (facts.gpus, facts.link_count, facts.has_nvlink) == ((), 0, False)
        assert (facts.status_seen, facts.errors_seen, facts.complete) == (True, True, True)
        assert facts.inactive_links == ()


def test_links_are_counted() -> None:
    facts = _parse("gpud-nvlink-status-8xa100-sxm4-80gb-12links-25gbs.txt")
    assert (facts.link_count, facts.has_nvlink) == (96, True)
    inactive = _parse("siboehm-bench-nvlink-s-3xa6000-bridge-one-inactive.txt")
    assert inactive.has_nvlink is True  # GPU 2 lists no link: all its links are inactive


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # nvidia-smi failed: its own words, or only its exit status
        (
            _text("synthetic-probe-output-driver-not-loaded-rc9.txt"),
            "nvidia-smi nvlink -s exited 9: NVIDIA-SMI has failed",
        ),
        (_text("synthetic-probe-output-empty-rc255.txt"), "nvidia-smi nvlink -s exited 255"),
        (
            "### fleetfix nvlink-status\nbash: line 1: nvidia-smi: command not found\n"
            "### fleetfix end rc=127\n",
            "exited 127: bash: line 1: nvidia-smi: command not found",
        ),
        # only the second tool failed: its links are unknown, so nothing is read
        (
            "### fleetfix nvlink-status\n### fleetfix end rc=0\n"
            "### fleetfix nvlink-errors\n### fleetfix end rc=4\n",
            "nvidia-smi nvlink -e exited 4: no output",
        ),
        # the older command, where only nvidia-smi's words tell
        (
            "### fleetfix nvlink-status\nFailed to initialize NVML: Driver/library version "
            "mismatch\n### fleetfix nvlink-errors\n",
            "nvidia-smi failed: Failed to initialize NVML",
        ),
        ("\n\n", "empty output"),  # a paste of nothing is no evidence of anything
    ],
)
def test_a_failing_nvidia_smi_is_a_failure_not_zero_links(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.read(text)
