"""The HTML report: one self-contained file (inline CSS and SVG, no script, no external URL).

It opens from a ticket attachment on a laptop with no network: header with the outcome,
findings, an SVG topology map coloured by status, busbw chart, actions taken, a per-host table
with expandable evidence (commands and output excerpts) and a step timeline. Everything that
came from a host, an inventory or a playbook is escaped; a Content-Security-Policy forbids any
fetch, should anything ever slip through.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from fleetfix.report.html_hosts import host_reason, hosts_html
from fleetfix.report.model import ActionRecord, HostReport, Report
from fleetfix.report.svg import (
    HOST_COLOURS,
    busbw_chart,
    esc,
    esc_text,
    host_box_css,
    timeline_chart,
    topology_map,
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
.held-swatch { background: repeating-linear-gradient(45deg, #b71c1c 0 3px, #5d0000 3px 6px); }
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
svg.map a.host:hover rect { stroke: #000; stroke-width: 2; }
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
.attention li { margin-bottom: 4px; } td.why { color: #b71c1c; max-width: 520px; }
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
            _busbw(report),
            _actions(report, anchors),
            hosts.hosts,
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
        f"<title>{esc(title)}</title><style>{STYLE}{host_box_css()}</style></head>"
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
    chips = []
    for status, count in report.status_counts().items():
        if count:
            kind = VerdictKind(status)
            fill, ink = HOST_COLOURS[kind]
            chips.append(
                f'<li class="chip" style="background:{fill};color:{ink}">'
                f"{count} {esc(kind.label)}</li>"
            )
    return f'<ul class="chips" aria-label="hosts by status">{"".join(chips)}</ul>'


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
        f'<span class="status {esc(h.status.value)}">{esc(h.status.label)}</span>'
        for h in hosts
    )


def _legend() -> str:
    items = []
    for status in VerdictKind:
        fill, _ = HOST_COLOURS[status]
        swatch = (
            '<span class="swatch held-swatch"></span>'
            if status is VerdictKind.HELD
            else f'<span class="swatch" style="background:{fill}"></span>'
        )
        items.append(f"<li>{swatch}{esc(status.label)} <small>{esc(status.meaning)}</small></li>")
    items.append(
        '<li><span class="swatch" style="background:#ffebee;border:2px solid #b71c1c"></span>'
        "suspect switch <small>named by a correlated-failure finding</small></li>"
    )
    return f'<ul class="legend" aria-label="legend">{"".join(items)}</ul>'


def _topology(report: Report, anchors: Mapping[str, str]) -> str:
    return (
        '<section id="topology"><h2>Topology</h2>'
        f'{_legend()}<div class="scroll">{topology_map(report, anchors)}</div></section>'
    )


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
