"""The nccl_tests probe against every nccl-tests and NCCL debug sample, and meets_threshold."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import verdict
from fleetfix.probes.nccl_tests import PROBE, NcclTestsFacts, meets_threshold
from tests.probes.absent import REAL_NODE, SHELLS, bare_path, run, shell_says
from tests.probes.cases import SAMPLES


def _sample(family: str, name: str) -> NcclTestsFacts:
    return PROBE.parse((SAMPLES / family / name).read_text(encoding="utf-8"))


def test_two_node_h100_run() -> None:
    facts = _sample("nccl-tests", "bitdeer-2node-16xh100-allreduce-mpi.txt")
    assert facts.avg_busbw == 443.007
    assert facts.max_busbw == 468.34
    assert (facts.wrong_total, facts.oob_values, facts.failed, facts.complete) == (
        0,
        0,
        False,
        True,
    )
    assert facts.hosts == ("host1", "host2")
    assert len(facts.ranks) == 16
    assert (facts.ranks[8].host, facts.ranks[8].device, facts.ranks[8].bus_id) == (
        "host2",
        0,
        "0x1b",
    )
    assert [row.size for row in facts.rows][:2] == [268435456, 536870912]
    header = facts.runs[0].header
    assert header is not None
    assert (header.ngpus, header.min_bytes, header.iters) == (1, 268435456, 20)
    assert meets_threshold(facts, 400.0) is True
    assert meets_threshold(facts, 450.0) is False


def test_open_mpi_tags_and_interleaved_nccl_info_are_skipped() -> None:
    facts = _sample("nccl-tests", "aws-eks-efa-2node-t4-ompi-prefixed-nccl-info.txt")
    assert len(facts.rows) == 31
    assert facts.avg_busbw == 1.15327
    assert facts.nccl_version == "2.12.7+cuda11.4"
    assert [rank.model for rank in facts.ranks] == ["Tesla T4", "Tesla T4"]
    assert facts.failed is False


def test_nccl_tests_2_18_tags_name_the_op() -> None:
    facts = _sample("nccl-tests", "eunomia-ncclebpf-rtx5090-2rank-socket-v2.18.0-mpi-tagged.txt")
    assert facts.ops == ("all_reduce_perf_mpi",)
    assert facts.tests_version == "2.18.0"
    assert facts.ranks[0].bus_id == "0000:02:00"
    assert facts.avg_busbw == 1.57614


def test_non_zero_pci_domain_bus_ids_in_a_cut_head() -> None:
    facts = _sample("nccl-tests", "issue-ncclt-294-2node-16xh100-domain-busid-head.txt")
    assert facts.ranks[4].bus_id == "0003:00:01"
    assert facts.hosts == ("h100-2", "h100-4")
    assert (facts.complete, facts.avg_busbw, facts.rows) == (False, None, ())
    assert meets_threshold(facts, 0.0) is False


def test_old_error_column_is_a_deviation_not_a_wrong_count() -> None:
    facts = _sample("nccl-tests", "issue-nccl-1244-2node-16xh20-nvls-error-column.txt")
    first = facts.rows[0]
    assert (first.redop, first.root) == ("sum", None)
    assert (first.out_of_place.wrong, first.out_of_place.max_error) == (None, 0.0)
    assert first.in_place.max_error == 4e-07
    assert facts.wrong_total is None
    assert len(facts.rows) == 8  # the ninth row is where the excerpt stops
    assert facts.complete is False


def test_header_less_legacy_tail() -> None:
    facts = _sample("nccl-tests", "issue-ncclt-44-2x2080ti-nvlink-legacy-tail.txt")
    assert len(facts.rows) == 13
    assert (facts.rows[0].redop, facts.rows[0].root) == (None, None)
    assert facts.rows[-1].in_place.busbw == 21.86
    assert (facts.avg_busbw, facts.complete) == (6.6, True)


def test_unhandled_cuda_error_fails_the_run() -> None:
    facts = _sample("nccl-tests", "issue-ncclt-322-multinode-unhandled-cuda-error-tail.txt")
    assert facts.failed is True
    assert sum("Test NCCL failure" in line for line in facts.failures) == 5
    assert sum("Test failure common.cu:915" in line for line in facts.failures) == 4
    assert len(facts.rows) == 5
    assert meets_threshold(facts, 1.0) is False


def test_nccl1_failure_with_prompt_and_old_rank_lines() -> None:
    facts = _sample("nccl-tests", "issue-ncclt-5-8xp100-nccl1-failure-legacy.txt")
    assert facts.ops == ("all_reduce_perf",)
    assert facts.nccl_version == "1.0"
    assert [rank.device for rank in facts.ranks] == list(range(8))
    assert (facts.ranks[0].group, facts.ranks[0].pid) == (None, None)
    assert facts.failures == ("NCCL failure all_reduce.cu:95 'unhandled cuda error'",)
    assert facts.runs[0].header is not None and facts.runs[0].header.ngpus == 8


def test_degraded_sys_topology_is_below_threshold_not_failed() -> None:
    facts = _sample("nccl-tests", "llminsights-a40-4gpu-sys-p2pdisabled-degraded-table-only.txt")
    assert (facts.failed, facts.complete, facts.avg_busbw) == (False, True, 1.40216)
    assert meets_threshold(facts, 20.0) is False
    healthy = _sample("nccl-tests", "llminsights-a40-2gpu-nv4-table-only.txt")
    assert meets_threshold(healthy, 20.0) is True


def test_wrong_values_fail_the_run() -> None:
    facts = _sample("nccl-tests", "synthetic-allreduce-wrong-values-oob-failed.txt")
    assert (facts.wrong_total, facts.oob_values, facts.failed) == (30, 30, True)
    assert meets_threshold(facts, 1.0) is False


def test_a_wrong_count_past_999999_in_exponent_form_fails_the_run() -> None:
    # Synthetic: no shared sample has a count >= 1e6. nccl-tests prints #wrong with
    # PRINT("  %6g", (double)wrongElts) since v2.13 (NVIDIA/nccl-tests 51af557, src/common.cu),
    # so 1572864 wrong elements print as `1.57286e+06`; the rows were printed with that format.
    facts = _sample("nccl-tests", "synthetic-allreduce-wrong-count-exponent-form-failed.txt")
    assert [(row.out_of_place.wrong, row.in_place.wrong) for row in facts.rows] == [
        (0, 0),
        (1572860, 1572860),
        (8388610, 8388610),
        (999999, 0),
    ]
    assert facts.wrong_total == 20922939
    assert (facts.failed, facts.complete, facts.oob_values) == (True, True, 0)
    assert meets_threshold(facts, 1.0) is False


def test_exponent_wrong_count_in_a_header_less_row() -> None:
    row = (
        "    16777216       4194304     float     sum      -1     82.7  202.97  355.20  1.57286e+06"
        "     83.5  200.96  351.68       0\n"
    )
    facts = PROBE.parse(row + "# Avg bus bandwidth    : 353.44\n")
    (parsed,) = facts.rows
    assert (parsed.out_of_place.wrong, parsed.out_of_place.max_error) == (1572860, None)
    assert (facts.wrong_total, facts.failed) == (1572860, True)
    # The old `error` column (%.0le, no fraction) stays a deviation, never a count.
    legacy = PROBE.parse(
        "     4      1   float   sum   47.54  0.00  0.00  1e+00   49.35  0.00  0.00  4e-07\n"
    )
    assert (legacy.rows[0].out_of_place.max_error, legacy.wrong_total) == (1.0, None)


def test_probe_command_output_splits_runs_per_op() -> None:
    facts = _sample("nccl-tests", "synthetic-probe-command-two-ops-8xh100.txt")
    assert facts.ops == ("all_reduce_perf", "all_gather_perf")
    assert [(run.op, run.row_count, run.complete) for run in facts.runs] == [
        ("all_reduce_perf", 8, True),
        ("all_gather_perf", 8, True),
    ]
    assert facts.avg_busbw == min(run.avg_busbw or 0.0 for run in facts.runs)
    assert {row.op for row in facts.rows} == {"all_reduce_perf", "all_gather_perf"}
    assert len(facts.ranks) == 8  # each run lists the same GPUs


def test_dev_shm_exhaustion_in_nccl_warnings() -> None:
    for name in (
        "issue-nccl-525-shm-posix-fallocate-enospc-2.9.6.txt",
        "issue-pytorch-ciinfra-490-dev-shm-extend-enospc-timestamped.txt",
    ):
        facts = _sample("nccl-debug", name)
        assert (facts.shm_exhausted, facts.failed, facts.complete) == (True, True, False)
    init_only = _sample("nccl-debug", "issue-ncclt-29-4node-32rank-init-complete.txt")
    assert (init_only.failed, init_only.complete, init_only.shm_exhausted) == (False, False, False)


def test_debug_log_with_header_reads_ranks() -> None:
    facts = _sample("nccl-debug", "issue-nccl-1812-4xa100-pcie-info-2.19.3-head.txt")
    assert facts.ops == ("all_reduce_perf",)
    assert len(facts.runs) == 1  # command line and "starting" line announce one run
    assert [rank.bus_id for rank in facts.ranks] == [
        "0000:01:00",
        "0000:02:00",
        "0000:81:00",
        "0000:82:00",
    ]
    assert facts.complete is False


def test_a_silent_op_is_an_incomplete_run() -> None:
    good = (SAMPLES / "nccl-tests" / "llminsights-a40-2gpu-nv4-table-only.txt").read_text()
    facts = PROBE.parse(f"+ all_reduce_perf -g 2\n{good}+ all_gather_perf -g 2\n")
    assert [run.op for run in facts.runs] == ["all_reduce_perf", "all_gather_perf"]
    assert (facts.complete, facts.avg_busbw) == (False, None)
    assert meets_threshold(facts, 1.0) is False


def test_meets_threshold_needs_complete_unfailed_output() -> None:
    facts = _sample("nccl-tests", "llminsights-a40-2gpu-nv4-table-only.txt")
    assert meets_threshold(facts, 47.4509) is True
    assert meets_threshold(replace(facts, failed=True), 1.0) is False
    assert meets_threshold(replace(facts, complete=False), 1.0) is False
    assert meets_threshold(replace(facts, avg_busbw=None), 0.0) is False


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("\n  \n", "empty output"),
        ("Warning: Permanently added 'x' to the list of known hosts.\nhello\n", "no nccl-tests"),
        (
            "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "  1024  256  float  sum  -1  5.0  0.2  0.2\n"
            "# Avg bus bandwidth    : 0.2\n",
            "malformed result row",
        ),
    ],
)
def test_garbage_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


def test_command() -> None:
    assert PROBE.command({"file": "/var/log/nccl out.txt"}) == "cat -- '/var/log/nccl out.txt'"
    command = PROBE.command({"ops": "all_reduce_perf,all_gather_perf", "gpus": "8"})
    assert command.startswith("for t in all_reduce_perf all_gather_perf; do command -v ")
    assert "; done; g=8; " in command
    assert """echo '+ all_reduce_perf -b 8M -e 1G -f 2' -g "$g";""" in command
    assert 'all_gather_perf -b 8M -e 1G -f 2 -g "$g" 2>&1' in command
    assert "nvidia-smi -L" in PROBE.command({})
    assert "/opt/nccl-tests/build/all_reduce_perf" in PROBE.command(
        {"bin_dir": "/opt/nccl-tests/build/"}
    )


def test_args_are_quoted_like_every_other_parameter() -> None:
    command = PROBE.command({"args": "-b 8 -e 1G; touch /tmp/x $(id)", "gpus": "8"})
    assert "all_reduce_perf -b 8 -e '1G;' touch /tmp/x '$(id)' -g \"$g\" 2>&1" in command
    listed = PROBE.command({"args": ["-b", "8 M"], "gpus": "8"})
    assert "all_reduce_perf -b '8 M' -g" in listed


def test_a_missing_library_fails_the_run() -> None:
    facts = PROBE.parse(
        "+ all_reduce_perf -g 8\nall_reduce_perf: error while loading shared libraries: "
        "libnccl.so.2: cannot open shared object file: No such file or directory\n"
    )
    assert (facts.ops, facts.failed, facts.complete) == (("all_reduce_perf",), True, False)


def test_the_real_node_without_nccl_tests_has_them_not_installed_never_facts() -> None:
    """It used to parse as facts: `avg busbw None GB/s`, a healthy-looking rc 0."""
    parsed = verdict(PROBE, (REAL_NODE / "probe-nccl_tests.txt").read_text(encoding="utf-8"))
    assert (parsed.absent, parsed.facts, parsed.data) == ("nccl-tests", None, None)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "binary", ["all_reduce_perf", "/opt/nccl-tests/build/all_reduce_perf", "alltoall_perf_mpi"]
)
def test_a_shells_command_not_found_is_not_installed(shell: str, binary: str) -> None:
    text = f"+ {binary} -b 8M -e 1G -f 2 -g 8\n{shell_says(shell, binary)}"
    with pytest.raises(ToolNotInstalled, match="nccl_tests: nccl-tests is not installed"):
        PROBE.parse(text)


def test_a_path_bash_cannot_find_is_not_installed() -> None:
    text = (
        "+ /opt/x/all_reduce_perf -g 8\n"
        "bash: line 1: /opt/x/all_reduce_perf: No such file or directory\n"
    )
    with pytest.raises(ToolNotInstalled):
        PROBE.parse(text)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_command_on_a_node_without_nccl_tests_runs_nothing(shell: str, tmp_path: Path) -> None:
    path = bare_path(tmp_path)
    perf = Path(path) / "all_reduce_perf"
    perf.write_text("#!/bin/sh\necho ran >&2\n", encoding="utf-8")
    perf.chmod(0o755)
    command = PROBE.command({"ops": "all_reduce_perf,all_gather_perf", "gpus": "1"})
    done = run(command, shell, path)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "### fleetfix not-installed all_gather_perf\n",
        "",
    )
    with pytest.raises(ToolNotInstalled) as raised:
        PROBE.parse(done.stdout)
    assert raised.value.tool == "nccl-tests"
