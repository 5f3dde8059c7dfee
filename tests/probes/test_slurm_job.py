"""The slurm_job probe on real `scontrol show job` and `sacct -P` captures
(tests/fixtures/slurm-job/MANIFEST.md): state, exit code, nodes, times, and the errors."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from fleetfix.errors import JobNotFound, PlaybookError, ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import verdict
from fleetfix.probes.slurm_job import PROBE, SACCT_FIELDS, JobFacts, Source, parse_job

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-job"


def _text(name: str) -> str:
    return (CAPTURES / name).read_text(encoding="utf-8")


def _job(name: str, job: str | None = None) -> JobFacts:
    return parse_job(_text(name), job=job)


def test_running_four_node_job_expands_its_bracketed_node_list() -> None:
    facts = _job("mpi1-ccc-scontrol-running-4node-inti-2120448.txt")
    assert (facts.source, facts.job_id, facts.name, facts.user) == (
        Source.SCONTROL,
        "2120448",
        "MPI_PMV",
        "tabernera",
    )
    assert (facts.state, facts.reason, facts.exit_code) == ("RUNNING", None, (0, 0))
    assert facts.node_list == "inti[6012,6015,6018-6019]"
    assert facts.nodes == ("inti6012", "inti6015", "inti6018", "inti6019")
    assert (facts.num_nodes, facts.batch_host) == (4, "inti6012")
    assert facts.start == datetime(2023, 5, 17, 11, 21, 33)
    assert facts.end == datetime(2023, 5, 17, 11, 24, 33)
    assert facts.start.tzinfo is None  # Slurm's local time, kept naive


def test_running_two_node_job() -> None:
    facts = _job("mpi1-ccc-scontrol-running-2node-inti-2120494.txt")
    assert (facts.job_id, facts.nodes, facts.num_nodes) == (
        "2120494",
        ("inti6015", "inti6019"),
        2,
    )
    assert facts.start == datetime(2023, 5, 17, 11, 31, 46)


def test_failed_job_with_crlf_lines_and_a_prompt() -> None:
    facts = _job("bih-cluster-cheatsheet-scontrol-failed-exit130-crlf.txt")
    assert (facts.job_id, facts.name, facts.user) == ("225", "bash", "XXX")
    assert (facts.state, facts.reason, facts.exit_code) == ("FAILED", "NonZeroExitCode", (130, 0))
    assert (facts.node_list, facts.nodes, facts.batch_host) == ("med0301", ("med0301",), "med0301")
    assert (facts.start, facts.end) == (
        datetime(2020, 3, 23, 11, 34, 26),
        datetime(2020, 3, 23, 11, 50, 53),
    )


def test_pending_job_has_no_nodes_and_unknown_times() -> None:
    facts = _job("bih-cluster-faq-scontrol-pending-dependency-never-satisfied-crlf.txt")
    assert (facts.job_id, facts.state, facts.reason) == (
        "863089",
        "PENDING",
        "DependencyNeverSatisfied",
    )
    assert (facts.node_list, facts.nodes, facts.batch_host) == (None, (), None)
    assert (facts.start, facts.end, facts.num_nodes) == (None, None, 1)


def test_pending_node_count_range_gives_its_lower_bound() -> None:
    facts = _job("bih-cluster-faq-scontrol-pending-numnodes-range-crlf.txt")
    assert (facts.job_id, facts.reason, facts.num_nodes) == (
        "4225062",
        "QOSMaxCpuPerUserLimit",
        1,
    )
    assert facts.start == datetime(2022, 9, 19, 7, 53, 29)  # the scheduler's estimate


def test_one_line_form_timeout() -> None:
    facts = _job("slurm-mail-test-cli-scontrol-oneline-timeout-timelimit.txt")
    assert (facts.job_id, facts.name, facts.user) == ("3", "test.jcf", "root")
    assert (facts.state, facts.reason, facts.exit_code) == ("TIMEOUT", "TimeLimit", (0, 15))
    assert (facts.nodes, facts.batch_host, facts.num_nodes) == (("node01",), "node01", 1)
    assert facts.end == datetime(2023, 1, 21, 22, 43)


def test_job_gone_from_scontrol_is_read_from_sacct_with_the_pasted_columns() -> None:
    facts = _job("issue-slurm-mail-63-scontrol-invalid-then-sacct-cancelled-by.txt")
    assert (facts.source, facts.job_id, facts.name) == (Source.SACCT, "31178", "vada")
    assert (facts.state, facts.cancelled_by, facts.exit_code) == (
        "CANCELLED",
        "1060117793",
        (0, 0),
    )
    assert (facts.node_list, facts.nodes, facts.num_nodes) == (None, (), 1)
    assert (facts.start, facts.end) == (None, datetime(2022, 11, 2, 10, 37, 4))
    assert facts.user == "censored_user_name"


def test_brief_sacct_without_header_reads_the_allocation_not_its_steps() -> None:
    facts = _job("issue-ucloud-70-sacct-brief-parsable-noheader-failed-127.txt")
    assert (facts.source, facts.job_id, facts.state, facts.exit_code) == (
        Source.SACCT,
        "1655360",
        "FAILED",
        (127, 0),
    )
    assert (facts.name, facts.nodes, facts.num_nodes) == (None, (), None)


def test_sacct_with_a_header_picks_the_named_job() -> None:
    name = "issue-cluster-utils-87-sacct-parsable2-header-four-jobs.txt"
    facts = _job(name, job="239024")
    assert (facts.job_id, facts.state, facts.exit_code) == ("239024", "COMPLETED", (0, 0))
    assert (facts.nodes, facts.num_nodes) == (("galvani-cn001",), 1)
    with pytest.raises(ProbeParseError, match=r"sacct printed 4 jobs \(239023, 239024"):
        _job(name)


def test_a_job_neither_tool_knows_is_job_not_found() -> None:
    with pytest.raises(JobNotFound, match="Invalid job id specified") as raised:
        _job("issue-slurm-mail-63-scontrol-invalid-job-id-head.txt", job="31178")
    assert raised.value.job == "31178"
    seen = verdict(PROBE, _text("issue-slurm-mail-63-scontrol-invalid-job-id-head.txt"))
    assert seen.facts is None
    assert "Slurm does not know the job" in (seen.error or "")


def test_probe_reads_with_the_steps_job_parameter() -> None:
    text = _text("issue-cluster-utils-87-sacct-parsable2-header-four-jobs.txt")
    facts = PROBE.read(text, {"job": "239026"})
    assert facts.job_id == "239026"
    with pytest.raises(JobNotFound, match="job 4242"):
        PROBE.read(text, {"job": "4242"})


def test_probe_output_rows_are_read_in_the_commands_column_order() -> None:
    # A row written here in SACCT_FIELDS' order: no public capture of this exact command.
    row = "48213|train|alice|NODE_FAIL|1:0|2026-01-01T03:00:00|2026-01-01T04:00:00|gpu[001-002]"
    text = "slurm_load_jobs error: Invalid job id specified\n" + row + "\n"
    assert len(row.split("|")) == len(SACCT_FIELDS)
    facts = PROBE.read(text, {"job": "48213"})
    assert (facts.state, facts.exit_code, facts.nodes) == (
        "NODE_FAIL",
        (1, 0),
        ("gpu001", "gpu002"),
    )
    assert (facts.user, facts.num_nodes) == ("alice", 2)


@pytest.mark.parametrize("job", ["48213", "48213_7", "48213+1"])
def test_command_names_the_job_and_falls_back_to_sacct(job: str) -> None:
    command = PROBE.command({"job": job})
    assert f"scontrol show job {job} 2>&1 ||" in command
    assert f"sacct -j {job} -X -P -n -o {','.join(SACCT_FIELDS)}" in command


@pytest.mark.parametrize("job", [None, "", "48213; reboot", "abc", "1_2_3", "-1"])
def test_command_refuses_what_is_not_a_job_id(job: object) -> None:
    with pytest.raises(PlaybookError, match="job must be a Slurm job id"):
        PROBE.command({} if job is None else {"job": job})


def test_no_scontrol_on_the_node_is_not_installed() -> None:
    with pytest.raises(ToolNotInstalled):
        parse_job("### fleetfix not-installed scontrol\n")
    with pytest.raises(ToolNotInstalled):
        parse_job("bash: line 1: scontrol: command not found\n")


def test_neither_tool_answering_says_why() -> None:
    text = (
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
        "sacct: error: Problem talking to the database: Connection refused\n"
    )
    with pytest.raises(ProbeParseError, match="Slurm did not answer: slurm_load_jobs error: Un"):
        parse_job(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty output"),
        ("hello world\n", "at line 1"),
        ("$ scontrol show job 1\nsegfault here\nJobId=1 JobState=RUNNING\n", "at line 2"),
        ("JobId=1 JobName=x\n   JobState=RUNNING ExitCode=zero\n", "ExitCode is not N:S"),
        ("JobId=1 JobState=RUNNING StartTime=yesterday\n", "StartTime is not a time"),
        ("JobId=1 JobState=RUNNING NodeList=gpu[a-b]\n", "NodeList is not a Slurm hostlist"),
        ("JobId=1 JobName=x\n", "without JobState="),
        ("1|2|3\n", "3 fields where the columns are 8"),
        ("\x00\x01\x02binary\xff\n", "at line 1"),
    ],
)
def test_garbage_is_a_parse_error_naming_where(text: str, message: str) -> None:
    with pytest.raises(ProbeParseError, match=message):
        parse_job(text)
