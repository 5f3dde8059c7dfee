"""The HTML report: one self-contained file (inline CSS and SVG, no script, no external URL).

It opens from a ticket attachment on a laptop with no network: header with the outcome and
the hosts per verdict, findings, the hosts that need a look, the topology (the fabric, then
leaves > racks > hosts coloured by verdict, failing domains first and open, the rest folded),
the hosts table (failing hosts first, each with its verdict, reason, evidence and next step;
the rest folded), actions taken, busbw chart and a step timeline. Everything that came from a
host, an inventory or a playbook is escaped; a Content-Security-Policy forbids any fetch,
should anything ever slip through.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from fleetfix.report.html_hosts import host_reason, hosts_html
from fleetfix.report.html_map import host_map, leaves_in_order
from fleetfix.report.model import ActionRecord, HostReport, Report
from fleetfix.report.svg import (
    busbw_chart,
    esc,
    esc_text,
    fabric_map,
    timeline_chart,
    verdict_css,
)
from fleetfix.topology.findings import Finding, FindingCategory
from fleetfix.verdicts import VerdictKind

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
OUTCOME_CLASS: Mapping[str, str] = {"ok": "good", "check_changes": "warn", "incomplete": "warn"}
CATEGORY_TITLES: Mapping[FindingCategory, str] = {
    FindingCategory.CORRELATED_FAILURE: "correlated failure",
    FindingCategory.STRAGGLER: "straggler",
    FindingCategory.INTRA_NODE_MISMATCH: "intra-node topology",
}

STYLE = """
:root { --ink:#1f2328; --muted:#59636e; --line:#d0d7de; --bg:#f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  margin: 0; padding: 0 28px 40px; background: #fff; }
header { margin: 0 -28px 20px; padding: 18px 28px; border-bottom: 4px solid #c62828;
  background: #fff5f5; }
header.good { border-color: #2e7d32; background: #f3faf3; }
header.warn { border-color: #f9a825; background: #fffbea; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 10px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
.verdict { font-size: 20px; font-weight: 700; margin: 4px 0 10px; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 0; }
dl.meta dt { color: var(--muted); } dl.meta dd { margin: 0; }
.chips { list-style: none; padding: 0; margin: 12px 0 0; display: flex; flex-wrap: wrap; gap: 8px; }
.chip { padding: 3px 10px; border-radius: 12px; color: #fff; font-weight: 600; }
.swatch { display: inline-block; width: 14px; height: 14px; border-radius: 3px;
  vertical-align: -2px; margin-right: 5px; }
.suspect-swatch { background: #ffebee; border: 2px solid #b71c1c; }
.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 6px 18px; }
.legend small { color: var(--muted); }
.scroll { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px;
  background: var(--bg); }
svg text { font: 11px system-ui, sans-serif; fill: var(--ink); }
svg.map .switch rect { fill: #eceff1; stroke: #546e7a; stroke-width: 1.5; }
svg.map .switch text { font-weight: 600; font-size: 12px; }
svg.map .switch.suspect rect { fill: #ffebee; stroke: #b71c1c; stroke-width: 3; }
svg.map .switch.suspect text { fill: #b71c1c; }
svg.map .switch.none rect { stroke-dasharray: 4 3; fill: #fafafa; }
svg.map .uplink { stroke: #90a4ae; stroke-width: 1.5; }
svg.map { max-width: 100%; height: auto; }
svg.map a:hover .switch rect { stroke: #000; stroke-width: 2; }
svg.map text.count { fill: var(--muted); } svg.map text.count.failing { fill: #b71c1c;
  font-weight: 700; }
details.all-verdicts { margin: 2px 0 10px; } ul.every { list-style: none; padding: 0;
  columns: 2 420px; margin: 6px 0; } ul.every li { margin: 0 0 3px; break-inside: avoid; }
.hostmap { display: flex; flex-direction: column; gap: 8px; margin-top: 8px; }
.hostmap .leaf { border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; }
.hostmap div.leaf { border-left: 5px solid #c62828; }
.hostmap .leaf.suspect { border: 2px solid #b71c1c; border-left-width: 5px;
  background: #fff5f5; }
.hostmap span.suspect { color: #b71c1c; font-weight: 700; }
.hostmap summary, .hostmap .head { color: var(--ink); }
.hostmap .racks { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: flex-start;
  margin-top: 6px; }
.hostmap .rack { border: 1px solid var(--line); border-radius: 5px; padding: 3px 8px;
  background: var(--bg); max-width: 100%; }
.hostmap .rack.suspect { border: 2px solid #b71c1c; }
.hostmap .boxes { display: flex; flex-wrap: wrap; gap: 3px; max-width: 660px; margin: 4px 0; }
a.host { display: inline-block; min-width: 78px; padding: 1px 6px; border-radius: 3px;
  font-size: 11px; text-decoration: none; white-space: nowrap; }
a.host:hover { outline: 2px solid #000; }
a.host.held, .v-held { text-shadow: 0 0 2px #000, 0 0 3px #000; }
.n, .v { padding: 0 7px; border-radius: 9px; font-size: 12px; font-weight: 600;
  white-space: nowrap; }
svg .bar rect { fill: #1565c0; } svg .bar.slow rect { fill: #c62828; }
svg .bar.suspect rect { fill: #ef6c00; }
svg .bar.slow text { fill: #b71c1c; font-weight: 700; }
svg line.median { stroke: #37474f; stroke-dasharray: 5 4; }
svg line.axis { stroke: #90a4ae; } svg text.tick, svg text.median { fill: var(--muted); }
.findings { padding-left: 20px; } .findings li { margin-bottom: 10px; }
.tag { display: inline-block; font-size: 11px; font-weight: 700; text-transform: uppercase;
  padding: 1px 7px; border-radius: 4px; background: #eceff1; margin-right: 6px; }
.tag.hold { background: #b71c1c; color: #fff; }
.muted { color: var(--muted); }
.attention li { margin-bottom: 4px; }
td.why { max-width: 520px; white-space: pre-wrap; overflow-wrap: anywhere; }
table.hosts tr.host-row > :nth-child(n+11):nth-child(-n+12) { white-space: nowrap; }
table.failing td.why { color: #b71c1c; font-weight: 600; }
table.failing tr.host-row > td { border-top: 2px solid var(--line); }
tr.judged > td { padding: 0 8px 6px 28px; border-bottom: none; }
ul.evidence-lines { margin: 2px 0; padding-left: 18px; }
ul.evidence-lines li { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 13px; }
p.next { margin: 4px 0; padding: 3px 10px; border-left: 4px solid #0b57d0;
  background: #eef4ff; overflow-wrap: anywhere; }
details.fine-hosts { margin-top: 10px; }
#actions em { font-style: normal; color: #1b5e20; }
#actions .bad em { color: #b71c1c; font-weight: 700; }
a.ref { text-decoration: none; }
table { border-collapse: collapse; width: 100%; margin: 6px 0; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { background: var(--bg); font-weight: 600; }
table.hosts tr > :nth-child(n+4):nth-child(-n+10), table.hosts tr > :nth-child(13) {
  text-align: right; font-variant-numeric: tabular-nums; }
tr.evidence > td { padding: 0 8px 6px 28px; border-bottom: 1px solid var(--line); }
tr.host-row > td { border-bottom: none; }
.status { font-weight: 700; }
.status.failed, .status.held, .status.unreachable { color: #b71c1c; }
.status.changed { color: #8d6e00; } .status.ok { color: #1b5e20; }
details > summary { cursor: pointer; color: #0b57d0; }
.step { margin: 8px 0; padding: 6px 10px; border-left: 4px solid #b0bec5; background: var(--bg); }
.step.failed, .step.unreachable { border-color: #c62828; } .step.changed { border-color: #f9a825; }
.step.ok { border-color: #2e7d32; } .step.ignored { border-color: #ad1457; }
ul.pass { list-style: none; margin: 4px 0; padding: 0; }
ul.pass li { margin: 2px 0; padding: 2px 10px; border-left: 4px solid #2e7d32; }
ul.pass li.changed { border-color: #f9a825; } ul.pass code { font-size: 12px; }
pre { white-space: pre-wrap; word-break: break-word; background: #fff;
  border: 1px solid var(--line); padding: 6px 8px; margin: 4px 0; max-height: 320px;
  overflow: auto; font-size: 12px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.stop { padding: 10px 14px; background: #b71c1c; color: #fff; border-radius: 6px;
  font-weight: 600; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""


def render_html(report: Report) -> str:
    """The whole report as one HTML document."""
    anchors = {h.name: f"host-{index}" for index, h in enumerate(report.hosts)}
    title = f"fleetfix {report.run_id}: {_verdict(report)}"
    hosts = hosts_html(report, anchors)
    body = "".join(
        (
            _header(report),
            _safety(report),
            _findings(report.findings),
            _attention(report, anchors),
            _topology(report, anchors),
            hosts.hosts,
            _actions(report, anchors),
            _busbw(report),
            _timeline(report),
            hosts.texts,
            "<footer>Written by fleetfix. This file is self-contained: it needs no network."
            "</footer>",
        )
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}{verdict_css()}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _verdict(report: Report) -> str:
    words = report.outcome.replace("_", " ").upper()
    return f"{words} (exit {report.exit_code})" if report.exit_code is not None else words


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if at is not None else "-"


def _header(report: Report) -> str:
    css = OUTCOME_CLASS.get(report.outcome, "bad")
    took = (
        f"{report.finished - report.started:.1f}s"
        if report.started is not None and report.finished is not None
        else "-"
    )
    meta = [
        ("playbook", report.playbook),
        ("plays", ", ".join(report.plays) or "-"),
        ("started", _when(report.started)),
        ("finished", _when(report.finished)),
        ("duration", took),
        ("mode", "check (dry run): nothing was changed" if report.check else "live"),
    ]
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in meta)
    return (
        f'<header class="{css}"><h1>fleetfix run <code>{esc(report.run_id)}</code></h1>'
        f'<p class="verdict">{esc(_verdict(report))}</p><dl class="meta">{rows}</dl>'
        f"{_chips(report)}</header>"
    )


def _chips(report: Report) -> str:
    chips = "".join(
        f'<li class="chip v-{kind.value}">{count} {esc_text(kind.label)}</li>'
        for kind, count in _present(report).items()
    )
    return f'<ul class="chips" aria-label="hosts by verdict">{chips}</ul>'


def _present(report: Report) -> dict[VerdictKind, int]:
    """Hosts per verdict, of the verdicts some host has, worst first."""
    counts = report.status_counts()
    return {kind: counts[kind.value] for kind in VerdictKind if counts[kind.value]}


def _safety(report: Report) -> str:
    if not report.safety_stops and not report.interrupted:
        return ""
    items = [f'<p class="stop">SAFETY STOP: {esc(reason)}</p>' for reason in report.safety_stops]
    if report.interrupted:
        items.append('<p class="stop">INTERRUPTED: finished steps are kept.</p>')
    return f'<section id="safety">{"".join(items)}</section>'


def _findings(findings: tuple[Finding, ...]) -> str:
    if not findings:
        return (
            '<section id="findings"><h2>Findings</h2><p class="muted">No correlated failures, '
            "stragglers or topology mismatches.</p></section>"
        )
    items = "".join(_finding(f) for f in findings)
    return f'<section id="findings"><h2>Findings</h2><ol class="findings">{items}</ol></section>'


def _finding(finding: Finding) -> str:
    tags = f'<span class="tag">{esc(CATEGORY_TITLES[finding.category])}</span>'
    if finding.hold_disruptive:
        tags += '<span class="tag hold">disruptive actions held</span>'
    extra = ""
    if finding.p_value is not None:
        extra += f' <span class="muted">(p = {finding.p_value:.2g}, Bonferroni-corrected)</span>'
    hosts = ""
    if len(finding.failed) > 1:
        hosts = (
            f"<details><summary>{len(finding.failed)} hosts</summary>"
            f"<p><code>{esc(', '.join(finding.failed))}</code></p></details>"
        )
    return f"<li>{tags}<strong>{esc(finding.message)}</strong>{extra}{hosts}</li>"


def _attention(report: Report, anchors: Mapping[str, str]) -> str:
    """Every failed, held, unreachable or left host with its reason, hosts sharing a reason on
    one line: what failed and why, on the first screen."""
    by_reason: dict[str, list[HostReport]] = {}
    for host in sorted(report.hosts, key=lambda h: h.status.rank):
        reason = host_reason(host)
        if reason is not None:
            by_reason.setdefault(reason, []).append(host)
    if not by_reason:
        return ""
    items = "".join(
        f"<li>{_host_links(hosts, anchors)}: {esc(reason)}</li>"
        for reason, hosts in by_reason.items()
    )
    return (
        f'<section id="attention"><h2>Needs a look</h2><ul class="attention">{items}</ul></section>'
    )


def _host_links(hosts: list[HostReport], anchors: Mapping[str, str]) -> str:
    return ", ".join(
        f'<a href="#{esc(anchors.get(h.name, ""))}"><strong>{esc(h.name)}</strong></a> '
        f'<span class="v v-{h.status.value}">{esc_text(h.status.label)}</span>'
        for h in hosts
    )


def _legend(report: Report) -> str:
    """The verdicts present, each with its colour and meaning; every verdict one click away."""
    items = [
        f'<li><span class="swatch v-{kind.value}"></span>{esc_text(kind.label)} '
        f"<small>{esc_text(kind.meaning)}</small></li>"
        for kind in _present(report)
    ]
    if report.suspects():
        items.append(
            '<li><span class="swatch suspect-swatch"></span>suspect switch <small>named by a '
            "correlated-failure finding</small></li>"
        )
    every = "".join(
        f'<li><span class="swatch v-{kind.value}"></span><b>{esc_text(kind.label)}</b> '
        f"{esc_text(kind.meaning)}{' <em>(fails the run)</em>' if kind.failing else ''}</li>"
        for kind in VerdictKind
    )
    return (
        f'<ul class="legend" aria-label="legend">{"".join(items)}</ul>'
        '<details class="all-verdicts"><summary>all verdicts, worst first</summary>'
        f'<ul class="every">{every}</ul></details>'
    )


def _topology(report: Report, anchors: Mapping[str, str]) -> str:
    """The fabric (spines above leaves), then each leaf's racks and hosts: leaves and racks
    with a failing host open and first, the others folded to a line."""
    leaves = leaves_in_order(report)
    leaf_anchors = {leaf.node.name: f"leaf-{index}" for index, leaf in enumerate(leaves)}
    kinds = {h.name: h.status for h in report.hosts}
    fabric = fabric_map(report.tree, kinds, set(report.suspects()), leaf_anchors)
    return (
        '<section id="topology"><h2>Topology</h2>'
        f"{_legend(report)}{_scrolling(fabric)}"
        '<p class="muted">Where the failures are: each leaf with a failing host, worst first, '
        "and its racks that hold one, every host of them in a box (it links to the host's row; "
        "hover for its verdict and reason).</p>"
        f"{host_map(report, leaves, anchors, leaf_anchors)}</section>"
    )


def _scrolling(picture: str) -> str:
    return f'<div class="scroll">{picture}</div>' if picture else ""


def _busbw(report: Report) -> str:
    busbw = report.busbw
    if not busbw:
        return ""
    slow = {h for f in report.findings_of(FindingCategory.STRAGGLER) for h in f.failed}
    suspect = {h.name for h in report.hosts if h.held}
    note = (
        f'<p class="muted">Showing the 300 lowest of {len(busbw)} hosts.</p>'
        if len(busbw) > 300
        else ""
    )
    return (
        '<section id="busbw"><h2>nccl-tests bus bandwidth</h2>'
        '<ul class="legend" aria-label="busbw legend"><li><span class="swatch" '
        'style="background:#1565c0"></span>host</li><li><span class="swatch" '
        'style="background:#c62828"></span>straggler <small>named by a finding</small></li>'
        '<li><span class="swatch" style="background:#ef6c00"></span>under a suspect switch '
        '<small>the switch, not the node</small></li></ul><p class="muted">Average busbw per '
        "host, slowest first; the median dashed.</p>"
        f'{note}<div class="scroll">{busbw_chart(busbw, slow, suspect)}</div></section>'
    )


def _actions(report: Report, anchors: Mapping[str, str]) -> str:
    """One row per host: its actions in order, each with its outcome; the commands are one
    click away, in the host's evidence."""
    if not report.actions:
        return (
            '<section id="actions"><h2>Actions taken</h2>'
            '<p class="muted">No mutating action ran.</p></section>'
        )
    per_host: dict[str, list[ActionRecord]] = {}
    for action in report.actions:
        per_host.setdefault(action.host, []).append(action)
    order = {h.name: index for index, h in enumerate(report.hosts)}
    hosts = sorted(per_host, key=lambda h: (not any(a.bad for a in per_host[h]), order.get(h, 0)))
    rows = "".join(_action_row(h, per_host[h], anchors.get(h, "")) for h in hosts)
    return (
        '<section id="actions"><h2>Actions taken</h2><p class="muted">Per host, in order; '
        "open a host for the commands.</p><table><thead><tr><th>Host</th><th>Actions</th>"
        f"</tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _action_row(host: str, actions: list[ActionRecord], anchor: str) -> str:
    """The host's actions in order, the same action with the same outcome in a row once with
    how many times (`nccl_tests failed verification (3 times)`)."""
    runs: list[tuple[str, str, bool, int]] = []
    for action in actions:
        done = (action.action or action.step, action.outcome, action.bad)
        if runs and runs[-1][:3] == done:
            runs[-1] = (*done, runs[-1][3] + 1)
        else:
            runs.append((*done, 1))
    items = " · ".join(_action(*run) for run in runs)
    return f'<tr><td><a href="#{esc(anchor)}">{esc_text(host)}</a></td><td>{items}</td></tr>'


def _action(name: str, outcome: str, bad: bool, times: int) -> str:
    """`name <em>outcome</em>`; a bad outcome wrapped to be drawn in red (the usual one is
    plain: 64 hosts x 3 actions of wrapper add up)."""
    words = f"{esc_text(name)} <em>{esc_text(outcome)}</em>" + (
        f" ({times} times)" if times > 1 else ""
    )
    return f'<span class="bad">{words}</span>' if bad else words


def _timeline(report: Report) -> str:
    return (
        '<section id="timeline"><h2>Timeline</h2><p class="muted">Each bar is one step on one '
        f'host, from start to finish.</p><div class="scroll">{timeline_chart(report)}</div>'
        "</section>"
    )


__all__ = ["render_html"]
