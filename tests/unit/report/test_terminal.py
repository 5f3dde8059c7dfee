"""The terminal report: topology tree with status, findings, actions; plain text off a TTY."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from fleetfix.report.model import LeafNode, Report, SpineNode
from fleetfix.report.terminal import TerminalReport, render_terminal


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
    assert "1 unreachable · 7 held · 8 ok" in spine
    leaf = next(line for line in lines if "leaf-03" in line and "held" in line)
    assert "SUSPECT LEAF" in leaf and "7 held · 1 ok" in leaf
    assert any("gpu017  held" in line for line in lines)
    # Leaves of 8 hosts are listed whole; the order is the tree's.
    assert text.index("leaf-01") < text.index("gpu001  ok") < text.index("leaf-02")
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
    assert "39 ok" in text
    assert "n001" not in text
    assert "none: no correlated failures" in text


def test_renderable_works_with_console_print(report: Report) -> None:
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(TerminalReport(report))
    assert "TOPOLOGY" in out.getvalue()
