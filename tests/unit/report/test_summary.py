"""The end-of-run summary on synthetic verdicts: groups worst first, host ranges, the job and
the owner shown, the next step per failing group, plain and unwrapped off a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from fleetfix.report.summary import (
    RunPlace,
    detail,
    group_lines,
    hostlist,
    left_lines,
    summary_lines,
)
from fleetfix.report.terminal import output_console
from fleetfix.verdicts import Verdict, VerdictKind

RUN = "20261206-172845-94b964"
PLACE = RunPlace(
    run_id=RUN,
    playbook="playbooks/xid79.yml",
    inventory=("inventories/lab.ini",),
    retry_file=f".fleetfix/retry/{RUN}.txt",
    json_report="demo-report.json",
    exit_code=2,
)
DEFERRED = (
    "deferred: job(s) 48213 still running on gpu005 after 14s: the next run finishes the work"
)
OWNED = "left alone: owned by bob: reseat GPU 4, ticket OPS-1187"
RMA = (
    "fleetfix: xid79; persists after a cold power cycle; RMA candidate: run the field"
    f" diagnostic (run {RUN})"
)


def demo_verdicts() -> list[Verdict]:
    """The demo's ending: two fixed, one deferred, one RMA, bob's node, eleven healthy."""
    healthy = [1, 2, 4, 6, 8, 9, 10, 12, 13, 15, 16]
    return [
        *(Verdict(f"gpu{n:03d}", VerdictKind.HEALTHY, "no fault found") for n in healthy),
        Verdict("gpu011", VerdictKind.FIXED, "repaired by reboot"),
        Verdict("gpu003", VerdictKind.FIXED, "repaired by reboot"),
        Verdict("gpu005", VerdictKind.DEFERRED, DEFERRED),
        Verdict("gpu007", VerdictKind.NEEDS_RMA, RMA),
        Verdict("gpu014", VerdictKind.LEFT_ALONE, OWNED),
    ]


def plain(lines: list[str]) -> list[str]:
    return [line.rstrip() for line in lines]


def test_hostlist_compresses_runs_keeping_the_width() -> None:
    hosts = ["gpu004", "gpu001", "gpu002", "gpu003", "gpu006", "login1", "gpu010"]
    assert hostlist(hosts) == "gpu[001-004,006,010],login1"
    assert hostlist(["gpu9", "gpu10", "gpu11"]) == "gpu9,gpu[10-11]"  # widths differ
    assert hostlist(["a1b", "a2b", "a3b"]) == "a[1-3]b"
    assert hostlist(["gpu007"]) == "gpu007"
    assert hostlist([]) == ""


def test_a_long_hostlist_is_capped_and_counts_the_hosts_left_out() -> None:
    hosts = [f"gpu{n:04d}" for n in range(0, 4000, 2)]  # 2,000 hosts, no two in a row
    shown = hostlist(hosts, limit=60)
    assert len(shown) < 90
    assert shown.startswith("gpu[0000,0002,")
    named = shown.partition(" ... and ")[0].removeprefix("gpu[").removesuffix("]").split(",")
    more = int(shown.rpartition(" and ")[2].split()[0])
    assert named[0] == "0000" and named[-1] != "3998"
    assert len(named) + more == 2000


def test_groups_are_worst_first_with_the_job_and_the_owner() -> None:
    lines = plain([line.plain for line in group_lines(demo_verdicts(), RUN)])
    assert lines == [
        "  needs RMA 1: gpu007 (xid79; persists after a cold power cycle; RMA candidate: run the"
        " field diagnostic)",
        "  deferred 1: gpu005 (job(s) 48213 still running on gpu005 after 14s: the next run"
        " finishes the work)",
        "  left alone 1: gpu014 (owned by bob: reseat GPU 4, ticket OPS-1187)",
        "  fixed 2: gpu003, gpu011",
        "  healthy 11: gpu[001-002,004,006,008-010,012-013,015-016]",
    ]


def test_a_big_failing_group_lists_its_hosts_not_their_reasons() -> None:
    sick = [Verdict(f"gpu{n:03d}", VerdictKind.UNHEALTHY, "Xid 79") for n in range(1, 41)]
    (line,) = group_lines(sick)
    assert line.plain == "  unhealthy 40: gpu[001-040]"


def test_detail_drops_what_the_line_already_says() -> None:
    owned = Verdict("gpu014", VerdictKind.LEFT_ALONE, OWNED)
    rma = Verdict("gpu007", VerdictKind.NEEDS_RMA, RMA)
    assert detail(owned) == "owned by bob: reseat GPU 4, ticket OPS-1187"
    assert detail(rma, RUN).endswith("run the field diagnostic")
    assert detail(rma, "another-run").endswith(f"(run {RUN})")  # another run's id stays


def test_next_steps_name_the_retry_file_the_rma_payload_and_the_owner() -> None:
    text = "\n".join(line.plain for line in summary_lines(demo_verdicts(), PLACE))
    retry = f".fleetfix/retry/{RUN}.txt"
    command = f"fleetfix run playbooks/xid79.yml -i inventories/lab.ini --limit @{retry}"
    assert f"  deferred gpu005: {command}" in text
    assert "  needs RMA gpu007: open the RMA ticket with the evidence in demo-report.json" in text
    assert "  left alone gpu014: ask the owner" in text
    assert f"retry file: {retry} (the 3 failing hosts)" in text
    assert text.index("SUMMARY") < text.index("NEXT STEPS")
    assert "exit 2" in text.splitlines()[1]


def test_without_a_json_report_the_rma_payload_is_the_report_command() -> None:
    place = RunPlace(run_id=RUN, playbook="p.yml", inventory=("a.ini", "b.yml"))
    verdicts = [*demo_verdicts(), Verdict("gpu020", VerdictKind.UNREACHABLE, "timed out")]
    text = "\n".join(line.plain for line in summary_lines(verdicts, place))
    assert f"fleetfix report {RUN} --report rma.json" in text
    assert "retry file" not in text  # none was written: no command points at one
    assert "unreachable gpu020: fleetfix run p.yml -i a.ini -i b.yml --limit gpu020" in text


def test_a_clean_run_needs_no_next_step() -> None:
    verdicts = [Verdict(f"n{n}", VerdictKind.HEALTHY) for n in range(6)]
    text = "\n".join(line.plain for line in summary_lines(verdicts, PLACE))
    assert "healthy 6: n[0-5]" in text
    assert "NEXT STEPS" not in text
    assert summary_lines([], PLACE) == []


def test_left_lines_list_every_failing_host_by_name() -> None:
    lines = [line.plain for line in left_lines(demo_verdicts(), RUN)]
    assert lines == [
        f"  gpu005: {DEFERRED}",
        "  gpu007: needs RMA: xid79; persists after a cold power cycle; RMA candidate: run the"
        " field diagnostic",
        f"  gpu014: {OWNED}",
    ]


def test_off_a_terminal_the_summary_is_plain_and_unwrapped() -> None:
    out = io.StringIO()
    console = output_console(out)
    long_reason = "owned by bob: " + "reseat GPU 4 " * 30
    verdicts = [*demo_verdicts(), Verdict("gpu099", VerdictKind.NEEDS_HUMAN, long_reason)]
    for line in summary_lines(verdicts, PLACE):
        console.print(line)
    text = out.getvalue()
    assert "\x1b[" not in text
    (human,) = [line for line in text.splitlines() if line.startswith("  needs a human 1:")]
    assert len(human) > 120 and human.endswith("...)")  # one line, cut on a word, not wrapped
    command = next(line for line in text.splitlines() if "--limit @" in line)
    assert command.endswith(f"@.fleetfix/retry/{RUN}.txt")


def test_on_a_terminal_the_summary_has_colour() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system="standard")
    for line in summary_lines(demo_verdicts(), PLACE):
        console.print(line)
    assert "\x1b[" in out.getvalue()
    assert "needs RMA 1" in out.getvalue()
