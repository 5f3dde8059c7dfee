"""The terminal report: topology tree with status, findings, actions; plain text off a TTY."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from fleetfix.report.model import ActionRecord, LeafNode, Report, SpineNode
from fleetfix.report.terminal import TerminalReport, action_lines, output_console, render_terminal


def plain(report: Report, width: int = 120) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    render_terminal(report, console)
    return out.getvalue()


def test_tree_findings_and_actions(report: Report) -> None:
    text = plain(report)
    lines = text.splitlines()
    assert "FINDINGS" in lines
    assert any("7 of 9 failures sit under leaf leaf-03" in line for line in lines)
    assert any("disruptive actions in this domain are held" in line for line in lines)
    assert any("gpu005: nccl-tests busbw 131.5 GB/s" in line for line in lines)
    assert "TOPOLOGY" in lines
    spine = next(line for line in lines if "spine-02" in line)
    assert "1 unreachable · 7 held · 8 healthy" in spine
    leaf = next(line for line in lines if "leaf-03" in line and "held" in line)
    assert "SUSPECT LEAF" in leaf and "7 held · 1 healthy" in leaf
    assert any("gpu017  held" in line for line in lines)
    # Leaves of 8 hosts are listed whole; the order is the tree's.
    assert text.index("leaf-01") < text.index("gpu001  healthy") < text.index("leaf-02")
    assert any("gpu005  clean_shm  done" in line for line in lines)
    assert "\x1b[" not in text  # no colour codes off a terminal


def test_big_leaves_list_only_the_hosts_that_need_a_look(report: Report) -> None:
    hosts = tuple(f"n{i:03d}" for i in range(40))
    statuses = {h.name: h for h in report.hosts}
    held = replace(statuses["gpu017"], name=hosts[0])
    fake_hosts = (held, *(replace(statuses["gpu001"], name=name) for name in hosts[1:]))
    big = replace(
        report,
        hosts=fake_hosts,
        tree=(SpineNode("spine-01", (LeafNode("leaf-big", hosts, ("spine-01",)),)),),
        findings=(),
        actions=(),
    )
    text = plain(big)
    assert "n000  held" in text
    assert "39 healthy" in text
    assert "n001" not in text
    assert "none: no correlated failures" in text


def test_renderable_works_with_console_print(report: Report) -> None:
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(TerminalReport(report))
    assert "TOPOLOGY" in out.getvalue()


def test_actions_are_listed_per_host_in_order_each_once_with_a_count() -> None:
    def done(host: str, action: str, *, verification_failed: bool = False) -> ActionRecord:
        return ActionRecord(
            host,
            action,
            action,
            failed=False,
            planned=False,
            verification_failed=verification_failed,
        )

    actions = (
        done("gpu007", "slurm_drain"),
        done("gpu003", "slurm_drain"),
        done("gpu007", "reboot", verification_failed=True),
        done("gpu003", "reboot"),
        done("gpu007", "slurm_drain"),  # the RMA node's reason rewritten: drained again
        done("gpu010", "slurm_drain"),
    )
    lines = [line.plain for line in action_lines(actions)]
    assert lines == [
        "  gpu003  slurm_drain  done",
        "  gpu003  reboot  done",
        "  gpu007  slurm_drain  done (2 times)",
        "  gpu007  reboot  failed verification",
        "  gpu010  slurm_drain  done",
    ]


def test_off_a_terminal_findings_are_not_wrapped(report: Report) -> None:
    long = replace(report.findings[0], message="leaf-03 " + "is a suspect " * 20)
    out = io.StringIO()
    render_terminal(replace(report, findings=(long,)), output_console(out))
    text = out.getvalue()
    assert "\x1b[" not in text
    line = next(line for line in text.splitlines() if "leaf-03 is a suspect" in line)
    assert line.rstrip().endswith("is a suspect") and len(line) > 200
    assert not any(len(line) > 300 for line in text.splitlines())  # no padding to the width
