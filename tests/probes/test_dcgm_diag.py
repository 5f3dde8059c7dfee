"""The dcgm_diag probe: dcgmi diag tables and JSON, the health table, and refusals."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import verdict
from fleetfix.probes.dcgm_diag import (
    PROBE,
    DcgmDiagFacts,
    DiagResult,
    MessageKind,
    Overall,
    Source,
    Status,
    diag_command,
    is_passive,
)
from tests.probes.absent import REAL_NODE, SHELLS, bare_path, run, shell_says
from tests.probes.cases import SAMPLES


def _sample(name: str) -> DcgmDiagFacts:
    return PROBE.parse((SAMPLES / "dcgmi" / name).read_text(encoding="utf-8"))


def test_persistence_fail_with_wrapped_error_text() -> None:
    facts = _sample("unresolved-gpumemtest-page-diag-r4-persistence-fail-memtest-pass.txt")
    assert (facts.source, facts.overall, facts.complete) == (Source.TABLE, Overall.FAIL, True)
    assert facts.failed_tests == ("Persistence Mode",)
    assert facts.failed_gpus == (0,)
    persistence = next(test for test in facts.tests if test.name == "Persistence Mode")
    (message,) = persistence.messages
    assert message.kind is MessageKind.ERROR
    # dcgmi cut the text mid-word every 45 characters; the pieces join back exactly.
    assert message.text.startswith("Persistence mode for GPU 0 is currently disabled. The DCGM")
    assert "requires peristence mode to be enabled" in message.text
    assert message.text.endswith('by running "nvidia-smi -i <gpuId> -pm 1 " as root.')
    assert "Memtest" not in facts.skipped_tests
    assert "Pulse Test" in facts.skipped_tests


def test_row_remap_pending_fragment_fails_on_gpu_3() -> None:
    facts = _sample("stas-mleng-diag-r3-deployment-row-remap-pending-fragment.txt")
    assert facts.overall is Overall.FAIL
    assert facts.failed_gpus == (3,)
    assert facts.messages[0].text == (
        "GPU 3 has uncorrectable memory errors and row remappings are pending"
    )
    assert facts.complete is False


def test_table_printed_twice_is_read_once() -> None:
    facts = _sample("gnosia93-diag-r3-3.3.9-570-2x2bb5-all-skip-duplicated.txt")
    assert len(facts.tests) == 15
    assert (facts.overall, facts.complete) == (Overall.PASS, True)
    assert facts.skipped_tests == (
        "PCIe",
        "GPU Memory",
        "Targeted Stress",
        "Targeted Power",
        "Memory Bandwidth",
        "EUD Test",
    )
    assert (facts.dcgm_version, facts.driver_version) == ("3.3.9", "570.172.08")
    assert facts.device_ids == ("2bb5", "2bb5")


def test_dcgm4_per_gpu_rows_and_cut_last_row() -> None:
    facts = _sample("issue-dcgm-253-diag-4.2.3-per-gpu-format-l40s-trunc.txt")
    software = next(test for test in facts.tests if test.name == "software")
    assert software.results == tuple(DiagResult(Status.PASS, gpu=gpu) for gpu in range(4))
    assert [test.name for test in facts.tests] == ["software"]  # `| memory | Pass` is cut
    assert (facts.overall, facts.complete) == (Overall.INCOMPLETE, False)
    assert facts.device_ids == ("26b9",) * 4


def test_cut_table_without_failure_is_incomplete_not_pass() -> None:
    facts = _sample("issue-godcgm-52-diag-r2-3.3.1-t4-metadata-trunc.txt")
    assert facts.overall is Overall.INCOMPLETE
    assert (facts.dcgm_version, facts.device_ids) == ("3.3.1", ("1eb8",))


def test_per_gpu_fail_with_thermal_warning() -> None:
    facts = _sample("synthetic-diag-r2-table-3.x-8gpu-memory-fail-gpu0-thermal.txt")
    memory = next(test for test in facts.tests if test.name == "GPU Memory")
    assert memory.status is Status.FAIL
    assert {r.gpu for r in memory.results if r.status is Status.PASS} == set(range(1, 8))
    assert [r.gpu for r in memory.results if r.status is Status.FAIL] == [0]
    assert memory.messages[0].text.startswith("GPU 0 Thermal violations totaling 13.3 seconds")
    assert memory.messages[0].text.endswith("and any other components.")
    assert (facts.failed_tests, facts.failed_gpus, facts.overall) == (
        ("GPU Memory",),
        (0,),
        Overall.FAIL,
    )


def test_health_nvlink_down() -> None:
    facts = _sample("issue-nvsentinel-pr1481-dcgmi-health-nvlink-down-a100-pcie-elided.txt")
    assert (facts.source, facts.overall) == (Source.HEALTH, Overall.FAIL)
    (nvlink,) = facts.tests
    assert (nvlink.name, nvlink.results) == ("NVLINK", (DiagResult(Status.FAIL, gpu=0),))
    assert [m.text for m in nvlink.messages] == [
        "GPU 0's NvLink link 0 is currently down ...",
        "GPU 0's NvLink link 1 is currently down ...",
    ]
    assert facts.failed_gpus == (0,)


def test_json_dcgm4_entities_summary_and_metadata() -> None:
    facts = _sample("synthetic-diag-r2-json-4.x-memory-fail-gpu1.json")
    assert (facts.source, facts.overall) == (Source.JSON, Overall.FAIL)
    assert (facts.failed_tests, facts.warned_tests, facts.failed_gpus) == (
        ("memory",),
        ("pcie",),
        (1,),
    )
    memory = next(test for test in facts.tests if test.name == "memory")
    assert memory.messages[0].error_id == 36
    assert memory.messages[0].gpu == 1
    assert (facts.dcgm_version, facts.driver_version) == ("4.2.3", "550.90.07")
    assert facts.device_ids == ("2330", "2330")


def test_json_dcgm3_gpu_id_lists_and_null_entries() -> None:
    facts = _sample("synthetic-diag-r1-json-3.x-gpu-ids-pass.json")
    assert facts.overall is Overall.PASS
    assert [test.name for test in facts.tests] == [
        "Denylist",
        "NVML Library",
        "Persistence Mode",
        "software",
    ]
    assert [r.gpu for r in facts.tests[0].results] == [0, 1, 2, 3]
    assert facts.tests[-1].messages[0].kind is MessageKind.INFO


def test_json_runtime_error_means_the_diag_did_not_run() -> None:
    facts = _sample("synthetic-diag-json-runtime-error-paused.json")
    assert facts.overall is Overall.ERROR
    assert facts.runtime_error == "Error: Diagnostic could not be run while DCGM is paused."


def test_json_level_one_error_object_and_warn_status() -> None:
    text = """{"DCGM Diagnostic": {"version": "3.3.9", "test_categories": [
      {"category": "Deployment", "tests": [{"name": "Persistence Mode", "results": [
        {"gpu_id": 2, "status": "Fail", "warnings": [
          {"warnings": "Persistence mode for GPU 2 is disabled.", "error_id": 29}]}]}]},
      {"category": "Stress", "tests": [{"name": "Targeted Power", "results": [
        {"gpu_id": "0", "status": "Warn", "info": "GPU 0 max power 299.5 W"}]}]}]}}"""
    facts = PROBE.parse(text)
    assert (facts.overall, facts.failed_gpus, facts.warned_tests) == (
        Overall.FAIL,
        (2,),
        ("Targeted Power",),
    )
    persistence = facts.tests[0]
    assert persistence.messages[0].error_id == 29
    assert facts.tests[1].messages[0].kind is MessageKind.INFO


def test_plain_error_line_is_a_run_that_did_not_happen() -> None:
    facts = PROBE.parse("Error: Unable to connect to host engine. Host engine connection invalid\n")
    assert (facts.source, facts.overall) == (Source.ERROR, Overall.ERROR)
    assert facts.runtime_error is not None and "host engine" in facts.runtime_error


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("some random words\n", "not dcgmi diag output"),
        ('{"DCGM Diagnostic": {"test_categories": [', "truncated"),
        ('{"something": 1}', "no 'DCGM Diagnostic' object"),
        ('{"DCGM Diagnostic": {"version": "4.2.3"}}', "no test and no runtime_error"),
        ('{"iterations": [], "Overall Result": "Pass"}', "iterated runs"),
        (
            '{"DCGM Diagnostic": {"test_categories": [{"category": "x", "tests": '
            '[{"name": "t", "results": [{"status": "Exploded"}]}]}]}}',
            "unknown result status",
        ),
        (
            "| Diagnostic                | Result                                         |\n"
            "| Denylist                  | Maybe                                          |\n"
            "+---------------------------+------------------------------------------------+\n",
            "unknown result",
        ),
        ("+---+---+\n+---+---+\n", "without any result row"),
        (
            "| Denylist                  | Pass                                           |\n"
            "| broken row\n"
            "| NVML Library              | Pass                                           |\n",
            "malformed table line",
        ),
    ],
)
def test_garbage_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


LOOK_FOR_DCGMI = (
    'for t in dcgmi; do command -v "$t" >/dev/null 2>&1 || '
    '{ echo "### fleetfix not-installed $t"; exit 0; }; done; '
)


def test_command() -> None:
    assert PROBE.command({}) == LOOK_FOR_DCGMI + "dcgmi diag -r 1 -j 2>&1"
    assert PROBE.command({"level": "software", "gpus": "0,1", "format": "table"}) == (
        LOOK_FOR_DCGMI + "dcgmi diag -r software -i 0,1 2>&1"
    )
    assert diag_command({"level": 3, "gpus": "0,1", "format": "table"}) == (
        LOOK_FOR_DCGMI + "dcgmi diag -r 3 -i 0,1 2>&1"
    )
    assert diag_command({"level": "1; reboot"}) == (
        LOOK_FOR_DCGMI + "dcgmi diag -r '1; reboot' -j 2>&1"
    )


def test_the_real_node_without_dcgm_has_dcgmi_not_installed() -> None:
    parsed = verdict(PROBE, (REAL_NODE / "probe-dcgm_diag.txt").read_text(encoding="utf-8"))
    assert (parsed.absent, parsed.facts) == ("dcgmi", None)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_command_on_a_node_without_dcgmi_says_not_installed(shell: str, tmp_path: Path) -> None:
    for command in (PROBE.command({}), diag_command({"level": "3"})):
        done = run(command, shell, bare_path(tmp_path))
        assert (done.returncode, done.stdout) == (0, "### fleetfix not-installed dcgmi\n")
        with pytest.raises(ToolNotInstalled) as raised:
            PROBE.parse(done.stdout)
        assert raised.value.tool == "dcgmi"


@pytest.mark.parametrize("shell", SHELLS)
def test_a_shells_command_not_found_is_not_installed(shell: str) -> None:
    with pytest.raises(ToolNotInstalled, match="dcgm_diag: dcgmi is not installed"):
        PROBE.parse(shell_says(shell, "dcgmi"))


@pytest.mark.parametrize("level", [2, "3", "4", "pcie", "memory", "1; reboot"])
def test_the_probe_runs_no_active_level(level: object) -> None:
    """Active levels are the dcgm_diag action's, which the engine gates (out of scheduling)."""
    done = subprocess.run(
        ["sh", "-c", PROBE.command({"level": level})],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )
    assert (done.returncode, done.stdout) == (64, "")
    assert f"dcgmi diag -r {level} is an active test: run it with the dcgm_diag action" in (
        done.stderr
    )
    assert not is_passive(str(level)) and is_passive("1") and is_passive("Short")


def test_gpu_named_in_the_message_label() -> None:
    table = (
        "| memory                    | Fail                                           |\n"
        "|                           | GPU0: Fail                                     |\n"
        "| Warning: GPU0             | Memory error detected                          |\n"
        "+---------------------------+------------------------------------------------+\n"
    )
    facts = PROBE.parse(table)
    (memory,) = facts.tests
    assert memory.messages[0].gpu == 0
    assert (facts.failed_gpus, facts.complete) == ((0,), True)


def test_healthy_health_report_passes() -> None:
    report = (
        "+---------------------------+----------------------------------------------------------+\n"
        "| Health Monitor Report                                                                |\n"
        "+===========================+==========================================================+\n"
        "| Overall Health            | Healthy                                                  |\n"
        "+---------------------------+----------------------------------------------------------+\n"
    )
    facts = PROBE.parse(report)
    assert (facts.source, facts.overall, facts.complete, facts.tests) == (
        Source.HEALTH,
        Overall.PASS,
        True,
        (),
    )
    warning = report.replace("Healthy", "Warning")
    assert PROBE.parse(warning).overall is Overall.WARN
    assert PROBE.parse(report.replace("Healthy", "Failure")).overall is Overall.FAIL
