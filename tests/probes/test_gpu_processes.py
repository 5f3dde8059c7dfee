"""The gpu_processes probe: compute-apps CSV (real samples) and the combined probe output."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from fleetfix.actions.base import ActionContext
from fleetfix.actions.gates import busy_reason
from fleetfix.errors import PlaybookError, ProbeParseError
from fleetfix.probes.gpu_processes import PROBE, QUERY_FIELDS, GpuProcessesFacts
from fleetfix.probes.nvidia_smi_text import MARKER_PREFIX
from tests.probes.cases import SAMPLES


def _parse(sample: str) -> GpuProcessesFacts:
    return PROBE.parse((SAMPLES / "query-compute-apps" / sample).read_text(encoding="utf-8"))


def _probe_output(query: str, query_rc: int, fuser: str, fuser_rc: int) -> str:
    """What the probe's command prints (synthetic: no real capture of it exists)."""
    return (
        f"### fleetfix query-compute-apps\n{query}### fleetfix end rc={query_rc}\n"
        f"### fleetfix fuser\n{fuser}### fleetfix end rc={fuser_rc}\n"
    )


PERSISTENCED = (
    "                     USER        PID ACCESS COMMAND\n"
    "/dev/nvidia0:        root       1503 F.... nvidia-persiste\n"
)
FUSER_TABLE = (
    "                     USER        PID ACCESS COMMAND\n"
    "/dev/nvidia0:        alice      2211 F.... python3\n"
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
    assert facts.pids == (2211,)  # fuser still saw the job


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
    assert 'fuser -v /dev/nvidia* >"$d/f" 2>&1' in command  # psmisc's PIDs go to stdout
    assert command.count(f"echo '{MARKER_PREFIX}end rc=137 stuck=1'") == 2
    assert command.count(f'echo "{MARKER_PREFIX}end rc=$(cat ') == 2


def test_command_bounds_each_tool_and_the_whole_probe() -> None:
    command = PROBE.command({})
    assert "timeout -k 2 15 nvidia-smi --query-compute-apps=" in command
    assert "timeout -k 2 15 $u fuser -v /dev/nvidia*" in command
    # The watchdog gives up on a tool stuck past SIGKILL well inside a 60 s step timeout.
    assert "( sleep 18; kill -9 $q $f )" in command
    tuned = PROBE.command({"nvidia_smi_timeout": "5", "fuser_timeout": 2.5})
    assert "timeout -k 2 5 nvidia-smi" in tuned
    assert "timeout -k 2 2.5 $u fuser" in tuned
    assert "( sleep 8; kill -9 $q $f )" in tuned


@pytest.mark.parametrize("value", [0, -1, "soon", True, float("nan"), 1e9, [], "15; rm"])
def test_command_refuses_a_timeout_that_is_not_seconds(value: object) -> None:
    with pytest.raises(PlaybookError, match="nvidia_smi_timeout must be a number of seconds"):
        PROBE.command({"nvidia_smi_timeout": value})


def _gate(facts: GpuProcessesFacts) -> str | None:
    context = ActionContext(host="gpu001", params={}, facts={"gpu_processes": facts}, vars={})
    return busy_reason(context)


@pytest.mark.parametrize(
    ("query", "query_end", "fuser", "fuser_end", "busy"),
    [
        ("", "rc=124", FUSER_TABLE, "rc=0", "GPU processes are running (pids 2211)"),
        ("Killed\n", "rc=137", PERSISTENCED, "rc=0", None),
        ("", "rc=137 stuck=1", PERSISTENCED, "rc=0", None),
        ("", "rc=124", "", "rc=124", "cannot tell"),
        ("", "rc=137 stuck=1", "", "rc=137 stuck=1", "cannot tell"),
        ("", "rc=124", PERSISTENCED + "Cannot stat file /proc/9/fd/3: Permission denied\n",
         "rc=0", "cannot tell"),
        ("", "rc=0", "", "rc=124", "cannot tell"),
        ("", "rc=0", "", "rc=0", None),
    ],
)  # fmt: skip
def test_idle_only_when_a_complete_source_says_so(
    query: str, query_end: str, fuser: str, fuser_end: str, busy: str | None
) -> None:
    text = (
        f"### fleetfix query-compute-apps timeout=15\n{query}### fleetfix end {query_end}\n"
        f"### fleetfix fuser timeout=15\n{fuser}### fleetfix end {fuser_end}\n"
    )
    reason = _gate(PROBE.parse(text))
    assert (reason if busy is None else (reason or "")[: len(busy)]) == busy


@pytest.mark.parametrize(
    ("end", "said", "error"),
    [
        ("rc=124", "", "nvidia-smi did not answer within 15s (stopped by timeout, rc=124)"),
        ("rc=137", "Killed\n", "nvidia-smi did not answer within 15s (killed with SIGKILL"),
        ("rc=137 stuck=1", "",
         "nvidia-smi did not answer within 15s and did not exit after SIGKILL (stuck in the"),
        ("rc=127", "timeout: failed to run command 'nvidia-smi': No such file or directory\n",
         "nvidia-smi is not installed (rc=127)"),
        ("rc=127", "sh: 1: timeout: not found\n",
         "`timeout` (coreutils) is not installed, so nvidia-smi was not run"),
    ],
)  # fmt: skip
def test_a_query_that_did_not_answer_says_why(end: str, said: str, error: str) -> None:
    text = f"### fleetfix query-compute-apps timeout=15\n{said}### fleetfix end {end}\n"
    facts = PROBE.parse(text)
    assert (facts.query_ok, facts.complete, facts.count) == (False, False, 0)
    assert facts.errors[0].startswith(error)
    assert facts.errors[1:] == ((said.strip(),) if said else ())


@pytest.mark.parametrize("end", ["rc=124", "rc=137", "rc=137 stuck=1", "rc=126"])
def test_a_fuser_that_did_not_answer_is_not_read_as_no_holders(end: str) -> None:
    # A half-printed table (or the shell's "Killed") is not read as rows, nor trusted as empty.
    text = (
        "### fleetfix query-compute-apps\n### fleetfix end rc=0\n"
        f"### fleetfix fuser\nKilled\n### fleetfix end {end}\n"
    )
    facts = PROBE.parse(text)
    assert (facts.fuser_ok, facts.complete, facts.holder_pids) == (False, False, ())
    assert facts.errors[0].startswith("fuser ")
    assert "Killed" in facts.errors


PERSISTENCED_STUB = (  # as psmisc writes it: the PID alone to stdout, the rest to stderr
    "echo '                     USER        PID ACCESS COMMAND' >&2\n"
    "printf '/dev/nvidia0:        root     ' >&2; printf ' %5d' 1503;"
    " echo ' F.... nvidia-persiste' >&2\n"
)


def _stub(directory: Path, name: str, body: str) -> None:
    tool = directory / name
    tool.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    tool.chmod(0o755)


def _run_probe(tools: Path, params: dict[str, object]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{tools}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    return subprocess.run(
        ["sh", "-c", PROBE.command(params)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


needs_timeout = pytest.mark.skipif(
    shutil.which("timeout") is None or shutil.which("mktemp") is None,
    reason="needs coreutils timeout and mktemp",
)


@needs_timeout
def test_a_hung_nvidia_smi_does_not_hide_fuser_in_a_real_shell(tmp_path: Path) -> None:
    _stub(tmp_path, "nvidia-smi", "exec tail -f /dev/null")  # never answers; TERM ends it
    _stub(tmp_path, "fuser", PERSISTENCED_STUB)
    done = _run_probe(tmp_path, {"nvidia_smi_timeout": 0.2, "fuser_timeout": 5})
    facts = PROBE.parse(done.stdout)
    assert done.returncode == 0
    assert (facts.query_ok, facts.fuser_ok, facts.holder_pids, facts.count) == (
        False,
        True,
        (1503,),
        0,
    )
    assert facts.errors[0].startswith("nvidia-smi did not answer within 0.2s")
    assert _gate(facts) is None  # the clean fuser scan vouches for the node


@needs_timeout
def test_a_tool_stuck_past_sigkill_is_given_up_on_in_a_real_shell(tmp_path: Path) -> None:
    # A process in uninterruptible sleep ignores SIGKILL, and `timeout` waits for it; stand in
    # for that with a `timeout` that never returns for nvidia-smi.
    pid_file = tmp_path / "stuck.pid"
    stuck = f"echo $$ > {pid_file}; trap '' TERM; exec tail -f /dev/null"
    real_timeout = shutil.which("timeout")
    _stub(tmp_path, "timeout", f'[ "$4" = nvidia-smi ] && {{ {stuck}; }}; exec {real_timeout} "$@"')
    _stub(tmp_path, "nvidia-smi", "exit 0")
    _stub(tmp_path, "fuser", "exec tail -f /dev/null")
    try:
        done = _run_probe(tmp_path, {"nvidia_smi_timeout": 0.2, "fuser_timeout": 0.2})
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    facts = PROBE.parse(done.stdout)
    assert (facts.query_ok, facts.fuser_ok, facts.complete) == (False, False, False)
    assert "did not exit after SIGKILL" in facts.errors[0]
    assert facts.errors[1].startswith("fuser did not answer within 0.2s (stopped by timeout")
    assert _gate(facts) == (
        "cannot tell whether GPU processes are running (process listing incomplete)"
    )


def test_psmisc_pids_after_the_table_are_matched_to_their_rows() -> None:
    """Captured without stdbuf, psmisc's buffered stdout puts the PIDs after the table."""
    text = (
        "### fleetfix query-compute-apps timeout=15\n### fleetfix end rc=0\n"
        "### fleetfix fuser timeout=15\n"
        "                     USER        PID ACCESS COMMAND\n"
        "/dev/nvidia0:        root     F.... nvidia-persiste\n"
        "/dev/nvidiactl:      root     F.... nvidia-persiste\n"
        "                     bob      f.... nvtop\n"
        "   1503   1503   4242\n"
        "### fleetfix end rc=0\n"
    )
    facts = PROBE.parse(text)
    assert facts.fuser_ok and facts.holder_pids == (1503, 4242)
    by_pid = {h.pid: h for h in facts.processes}
    assert by_pid[4242].user == "bob" and by_pid[4242].devices == ("/dev/nvidiactl",)
    assert by_pid[1503].devices == ("/dev/nvidia0", "/dev/nvidiactl")


def test_a_row_whose_pid_never_came_is_refused() -> None:
    text = (
        "### fleetfix fuser timeout=15\n"
        "/dev/nvidia0:        root     F.... nvidia-persiste\n"
        "### fleetfix end rc=0\n"
    )
    with pytest.raises(ProbeParseError, match="without a PID"):
        PROBE.parse(text)


def test_monitoring_and_mps_daemons_are_services_not_jobs() -> None:
    """dcgm-exporter, nvsm and the MPS daemons hold /dev/nvidia* on a healthy idle node (names
    as fuser cuts them to 15 characters); the reset and reload stop and restore them."""
    holders = (
        "                     USER        PID ACCESS COMMAND\n"
        "/dev/nvidia0:        root       3001 F.... dcgm-exporter\n"
        "/dev/nvidia0:        root       3002 F.... nvsm\n"
        "/dev/nvidia0:        root       3003 F.... nvidia-cuda-mps\n"
        "/dev/nvidia0:        alice      3004 F.... python3\n"
    )
    facts = PROBE.parse(_probe_output("", 0, holders, 0))
    assert facts.service_pids == (3001, 3002, 3003)
    assert facts.pids == (3004,)
    assert _gate(facts) == "GPU processes are running (pids 3004)"
    idle = PROBE.parse(
        _probe_output("", 0, holders.replace(holders.splitlines()[-1] + "\n", ""), 0)
    )
    assert idle.pids == () and _gate(idle) is None
