"""The terminal report after the PLAY RECAP: topology tree with status, findings, actions taken.

    console.print(TerminalReport(report))

Big leaves are summarised ("25 ok") and only the hosts that need a look are listed, so the
output stays readable for a thousand nodes. Plain text when the console is not a terminal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import TextIO

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
UNWRAPPED = 100_000
"""Off a terminal, lines are as long as they are: no renderable here pads to the width."""
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


def output_console(file: TextIO | None = None) -> Console:
    """The console the end of a run prints on: rich's own on a terminal; off one (a pipe,
    cron's mail, a log file), plain and unwrapped, so a finding or a reason stays on its line
    for grep instead of being cut at 80 columns."""
    console = Console(file=file, highlight=False)
    if console.is_terminal:
        return console
    return Console(file=file, highlight=False, soft_wrap=True, width=UNWRAPPED, no_color=True)


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
        blocks.extend(action_lines(report.actions))
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


def action_lines(actions: Iterable[ActionRecord]) -> list[Text]:
    """One line per host, action and outcome, hosts by name and each host's actions in the
    order first done: an action done twice with one outcome is one line, `done (2 times)` (the RMA
    node's second drain only rewrites its reason)."""
    counts: Counter[tuple[str, str, str]] = Counter()
    first: dict[tuple[str, str, str], ActionRecord] = {}
    for action in actions:
        key = (action.host, action.action or action.step, action.outcome)
        counts[key] += 1
        first.setdefault(key, action)
    keys = sorted(first, key=lambda key: _natural(key[0]))  # stable: order done within a host
    return [_action_line(first[key], counts[key]) for key in keys]


def _natural(host: str) -> tuple[str, int, str]:
    digits = host.rstrip("0123456789")
    number = host[len(digits) :]
    return (digits, int(number) if number else -1, host)


def _action_line(action: ActionRecord, count: int = 1) -> Text:
    style = "yellow" if action.planned else ("red" if action.bad else "green")
    name = action.action or action.step
    times = f" ({count} times)" if count > 1 else ""
    return Text.assemble(
        "  ", (action.host, "bold"), f"  {name}  ", (action.outcome + times, style)
    )


__all__ = [
    "STATUS_STYLES",
    "TerminalReport",
    "action_lines",
    "output_console",
    "render_terminal",
    "sections",
    "topology_tree",
]
