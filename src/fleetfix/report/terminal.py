"""The terminal report after the PLAY RECAP: topology tree with status, findings, actions taken.

    console.print(TerminalReport(report))

Big leaves are summarised ("25 ok") and only the hosts that need a look are listed, so the
output stays readable for a thousand nodes. Plain text when the console is not a terminal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.text import Text
from rich.tree import Tree

from fleetfix.report.model import ActionRecord, LeafNode, Report
from fleetfix.topology.findings import Finding
from fleetfix.verdicts import VerdictKind

STATUS_STYLES: Mapping[VerdictKind, str] = {
    VerdictKind.UNREACHABLE: "bold magenta",
    VerdictKind.NEEDS_RMA: "bold red",
    VerdictKind.NEEDS_HUMAN: "bold red",
    VerdictKind.HELD: "bold red",
    VerdictKind.UNHEALTHY: "red",
    VerdictKind.FAILED: "red",
    VerdictKind.DEFERRED: "yellow",
    VerdictKind.LEFT_ALONE: "magenta",
    VerdictKind.LEFT_OUT: "magenta",
    VerdictKind.DRAINED: "cyan",
    VerdictKind.INTERRUPTED: "yellow",
    VerdictKind.FIXED: "bold green",
    VerdictKind.CHANGED: "green",
    VerdictKind.HEALTHY: "green",
    VerdictKind.NOT_RUN: "dim",
}
LIST_ALL_UP_TO = 8
LIST_AT_MOST = 20


class TerminalReport:
    """A rich renderable of the report's fleet view."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def __rich_console__(
        self, console: Console, options: ConsoleOptions
    ) -> Iterator[RenderableType]:
        yield Group(*sections(self.report))


def render_terminal(report: Report, console: Console) -> None:
    console.print(TerminalReport(report))


def sections(report: Report) -> list[RenderableType]:
    """The report's blocks in order: findings, topology, actions."""
    blocks: list[RenderableType] = [Text("")]
    blocks.append(Text("FINDINGS", style="bold"))
    blocks.extend(_finding(f) for f in report.findings)
    if not report.findings:
        blocks.append(Text("  none: no correlated failures, stragglers or mismatches", "green"))
    blocks.append(Text(""))
    blocks.append(topology_tree(report))
    if report.actions:
        blocks.append(Text(""))
        blocks.append(Text("ACTIONS TAKEN", style="bold"))
        blocks.extend(_action_line(a) for a in report.actions)
    return blocks


def topology_tree(report: Report) -> Tree:
    """spine -> leaf -> hosts, each with its status; suspect switches flagged."""
    statuses = {h.name: h.status for h in report.hosts}
    suspects = report.suspects()
    root = Tree(Text("TOPOLOGY", style="bold"))
    for spine in report.tree:
        label = _switch_label(
            "spine",
            spine.name,
            suspects,
            [h for leaf in spine.leaves for h in leaf.hosts],
            statuses,
        )
        branch = root.add(label)
        for leaf in spine.leaves:
            _add_leaf(branch, leaf, suspects, statuses)
    return root


def _add_leaf(
    branch: Tree,
    leaf: LeafNode,
    suspects: Mapping[tuple[str, str], Finding],
    statuses: Mapping[str, VerdictKind],
) -> None:
    node = branch.add(_switch_label("leaf", leaf.name, suspects, list(leaf.hosts), statuses))
    if len(leaf.hosts) <= LIST_ALL_UP_TO:
        shown = list(leaf.hosts)
    else:
        shown = [h for h in leaf.hosts if statuses.get(h) not in (VerdictKind.HEALTHY, None)]
    for host in shown[:LIST_AT_MOST]:
        status = statuses.get(host, VerdictKind.NOT_RUN)
        node.add(Text.assemble((host, "bold"), "  ", (status.label, STATUS_STYLES[status])))
    hidden = len(shown) - LIST_AT_MOST
    if hidden > 0:
        node.add(Text(f"... and {hidden} more", style="dim"))
    quiet = len(leaf.hosts) - len(shown)
    if quiet > 0:
        node.add(Text(f"{quiet} healthy", style="green"))


def _switch_label(
    kind: str,
    name: str,
    suspects: Mapping[tuple[str, str], Finding],
    hosts: list[str],
    statuses: Mapping[str, VerdictKind],
) -> Text:
    counts = Counter(statuses.get(h, VerdictKind.NOT_RUN) for h in hosts)
    label = Text.assemble((name, "bold"), "  ")
    summary = [(f"{counts[s]} {s.label}", STATUS_STYLES[s]) for s in VerdictKind if counts[s]]
    for index, (words, style) in enumerate(summary):
        label.append(words, style)
        if index < len(summary) - 1:
            label.append(" · ", "dim")
    if (kind, name) in suspects:
        label.append(f"   SUSPECT {kind.upper()}", "bold red reverse")
    return label


def _finding(finding: Finding) -> Text:
    text = Text("  * ", style="bold")
    style = "bold red" if finding.hold_disruptive else "yellow"
    text.append(finding.message, style)
    if finding.hold_disruptive:
        text.append("\n    disruptive actions in this domain are held for a human", "red")
    return text


def _action_line(action: ActionRecord) -> Text:
    style = "yellow" if action.planned else ("red" if action.bad else "green")
    name = action.action or action.step
    return Text.assemble("  ", (action.host, "bold"), f"  {name}  ", (action.outcome, style))


__all__ = ["STATUS_STYLES", "TerminalReport", "render_terminal", "sections", "topology_tree"]
