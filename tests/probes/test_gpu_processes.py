"""The gpu_processes probe: compute-apps CSV (real samples) and the combined probe output."""

from __future__ import annotations

import re

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes.gpu_processes import PROBE, QUERY_FIELDS, GpuProcessesFacts
from tests.probes.cases import SAMPLES


def _parse(sample: str) -> GpuProcessesFacts:
    return PROBE.parse((SAMPLES / "query-compute-apps" / sample).read_text(encoding="utf-8"))


def _probe_output(query: str, query_rc: int, fuser: str, fuser_rc: int) -> str:
    """What the probe's command prints (synthetic: no real capture of it exists)."""
    return (
        f"### fleetfix query-compute-apps\n{query}### fleetfix end rc={query_rc}\n"
        f"### fleetfix fuser\n{fuser}### fleetfix end rc={fuser_rc}\n"
    )


FUSER_TABLE = (
    "                     USER        PID ACCESS COMMAND\n"
    "/dev/nvidia0:        root       2211 F.... dcgm-exporter\n"
)


def test_header_only_means_no_compute_processes() -> None:
    facts = _parse("nvgpuexp-h100-590.48.01-idle-empty.csv")
    assert (facts.count, facts.pids, facts.complete) == (0, (), True)
    assert (facts.query_ok, facts.fuser_ok) == (True, None)


def test_three_processes_with_header_and_units() -> None:
    facts = _parse("nvgpuexp-h100-590.48.01-load-3procs.csv")
    assert facts.pids == (11327, 11328, 11345)
    assert [p.used_memory_mib for p in facts.processes] == [2566, 1542, 15690]
    assert {p.gpu_bus_id for p in facts.processes} == {"00000000:00:09.0"}
    assert facts.processes[2].name == "./gpu_burn"


def test_combined_output_merges_fuser_holders() -> None:
    facts = _parse("synthetic-probe-output-2procs-fuser-persistenced.txt")
    # nvidia-persistenced holds the device files on every healthy node: a service, not a job.
    assert facts.pids == (11327, 11345)
    assert facts.count == 2
    assert facts.service_pids == (1503,)
    assert facts.compute_pids == (11327, 11345)
    assert facts.holder_pids == (1503, 11327)
    assert facts.holder_commands == ("memhog", "nvidia-persiste")
    by_pid = {p.pid: p for p in facts.processes}
    assert by_pid[11327].sources == ("query", "fuser")
    assert by_pid[11327].devices == ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm")
    assert by_pid[1503].sources == ("fuser",)
    assert by_pid[1503].gpu_uuid is None
    # "[Not Found]" (another PID namespace) and "[N/A]" are unknown, not empty/zero.
    assert (by_pid[11345].name, by_pid[11345].used_memory_mib) == (None, None)
    assert facts.complete is True


def test_noheader_csv_pasted_alone() -> None:
    facts = PROBE.parse("4242, python, GPU-aaaa, 0000:3B:00.0, 812 MiB\n")
    assert facts.processes[0].gpu_bus_id == "00000000:3b:00.0"
    assert facts.processes[0].used_memory_mib == 812


def test_nvidia_smi_failure_makes_the_facts_incomplete() -> None:
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    facts = PROBE.parse(_probe_output(failed, 9, FUSER_TABLE, 0))
    assert facts.query_ok is False
    assert facts.complete is False
    assert facts.errors[0] == "nvidia-smi exited 9"
    assert facts.pids == (2211,)  # fuser still saw the exporter


def test_fuser_missing_makes_the_facts_incomplete() -> None:
    facts = PROBE.parse(_probe_output("", 0, "sh: 1: fuser: not found\n", 127))
    assert (facts.query_ok, facts.fuser_ok, facts.complete) == (True, False, False)
    assert facts.count == 0


def test_fuser_without_holders_or_devices() -> None:
    facts = PROBE.parse(_probe_output("", 0, "", 1))
    assert (facts.count, facts.complete, facts.fuser_ok) == (0, True, True)
    no_devices = "Specified filename /dev/nvidia* does not exist.\n"
    assert PROBE.parse(_probe_output("", 0, no_devices, 1)).complete is True


def test_fuser_that_could_not_see_everything_is_incomplete() -> None:
    partial = FUSER_TABLE + "Cannot stat file /proc/4711/fd/3: Permission denied\n"
    facts = PROBE.parse(_probe_output("", 0, partial, 0))
    assert facts.pids == (2211,)
    assert facts.complete is False
    assert facts.errors == ("Cannot stat file /proc/4711/fd/3: Permission denied",)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no compute-apps or fuser output"),
        ("pid, process_name\n1, a\n2\n3, c\n", "1 values for 2 columns"),
        ("### fleetfix fuser\n/dev/nvidia0: what is this\n", "not a line of `fuser -v` output"),
        ("### fleetfix mystery\nabc\n", "unknown section"),
        ("name, used_gpu_memory [MiB]\npython, 10 MiB\n", "no pid column"),
    ],
)
def test_garbage_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


def test_command_prints_both_sources_between_markers() -> None:
    command = PROBE.command({})
    assert f"--query-compute-apps={','.join(QUERY_FIELDS)} --format=csv,noheader" in command
    assert "fuser -v /dev/nvidia* 2>&1 >/dev/null" in command
    assert command.count('echo "### fleetfix end rc=$?"') == 2
