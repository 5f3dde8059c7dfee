"""Inline SVG pictures for the HTML report: the topology map, the busbw chart, the timeline.

Every string that reaches the markup goes through `esc` (host names and step names come from
inventories and playbooks; nothing here trusts them). No external reference of any kind.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from fleetfix.report.model import LeafNode, Report, SpineNode, StepRecord
from fleetfix.topology.graph import NO_LEAF, NO_SPINE, natural_key
from fleetfix.verdicts import VerdictKind

HOST_COLOURS: Mapping[VerdictKind, tuple[str, str]] = {
    # verdict -> (fill, text colour): reds for what needs someone, ambers for what the next run
    # finishes, browns for what is someone else's, green/teal for healthy and fixed; held is
    # drawn striped over red.
    VerdictKind.UNREACHABLE: ("#4a148c", "#ffffff"),
    VerdictKind.NEEDS_RMA: ("#7f0000", "#ffffff"),
    VerdictKind.NEEDS_HUMAN: ("#b71c1c", "#ffffff"),
    VerdictKind.HELD: ("#c62828", "#ffffff"),
    VerdictKind.UNHEALTHY: ("#d84315", "#ffffff"),
    VerdictKind.FAILED: ("#e53935", "#ffffff"),
    VerdictKind.DEFERRED: ("#ef6c00", "#ffffff"),
    VerdictKind.LEFT_ALONE: ("#5d4037", "#ffffff"),
    VerdictKind.LEFT_OUT: ("#8d6e63", "#ffffff"),
    VerdictKind.DRAINED: ("#78909c", "#ffffff"),
    VerdictKind.INTERRUPTED: ("#455a64", "#ffffff"),
    VerdictKind.FIXED: ("#00796b", "#ffffff"),
    VerdictKind.CHANGED: ("#9e9d24", "#ffffff"),
    VerdictKind.HEALTHY: ("#2e7d32", "#ffffff"),
    VerdictKind.NOT_RUN: ("#cfd8dc", "#37474f"),
}
STEP_COLOURS: Mapping[str, str] = {
    "ok": "#2e7d32",
    "changed": "#f9a825",
    "failed": "#c62828",
    "unreachable": "#4a148c",
    "skipped": "#b0bec5",
    "rescued": "#00838f",
    "ignored": "#ad1457",
}
HELD_PATTERN = "held-stripes"
HOST_W, HOST_H, GAP = 104, 18, 4
PER_COLUMN = 16
LEAF_PAD, LEAF_H = 10, 34
SPINE_Y, LEAF_Y = 16, 110
HOSTS_Y = LEAF_Y + LEAF_H + 18
MAX_BARS = 300


def esc(value: object) -> str:
    """`value` safe anywhere in the markup, attribute values included."""
    return escape(str(value), quote=True)


def esc_text(value: object) -> str:
    """`value` safe as an element's text (not an attribute value): quotes need no escaping
    there, and shell commands are full of them."""
    return escape(str(value), quote=False)


def held_pattern_defs() -> str:
    """The diagonal stripes that mark a held host (failed, remediation held)."""
    return (
        f'<defs><pattern id="{HELD_PATTERN}" width="8" height="8" '
        'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="8" height="8" fill="#b71c1c"/>'
        '<rect width="4" height="8" fill="#5d0000"/></pattern></defs>'
    )


# -- topology map ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _LeafBox:
    leaf: LeafNode
    spine: str
    x: int
    width: int


def topology_map(report: Report, anchors: Mapping[str, str]) -> str:
    """Spines above leaves above hosts, hosts coloured by status; suspects outlined.

    `anchors`: host -> the id of its row in the hosts table (each host box links there).
    """
    boxes = _layout(report.tree)
    if not boxes:
        return '<p class="muted">No hosts.</p>'
    width = boxes[-1].x + boxes[-1].width + GAP * 4
    rows = max(min(len(b.leaf.hosts), PER_COLUMN) for b in boxes)
    height = HOSTS_Y + rows * (HOST_H + GAP) + 12
    spines = _spine_positions(boxes)
    suspects = report.suspects()
    statuses = {h.name: h.status for h in report.hosts}
    parts = [
        f'<svg class="map" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="topology map: spines, leaves and hosts coloured by status">',
        held_pattern_defs(),
    ]
    parts.extend(_uplinks(boxes, spines))
    parts.extend(_spine_box(name, x, suspects.get(("spine", name))) for name, x in spines.items())
    for box in boxes:
        parts.append(_leaf_box(box, suspects.get(("leaf", box.leaf.name))))
        parts.extend(_host_boxes(box, statuses, anchors))
    parts.append("</svg>")
    return "".join(parts)


def _layout(tree: Sequence[SpineNode]) -> list[_LeafBox]:
    boxes: list[_LeafBox] = []
    x = GAP * 4
    for spine in tree:
        for leaf in spine.leaves:
            columns = math.ceil(len(leaf.hosts) / PER_COLUMN) or 1
            width = max(128, columns * (HOST_W + GAP) - GAP + 2 * LEAF_PAD)
            boxes.append(_LeafBox(leaf, spine.name, x, width))
            x += width + GAP * 5
    return boxes


def _spine_positions(boxes: list[_LeafBox]) -> dict[str, int]:
    """Each drawn spine's centre x: over the leaves filed under it, else spread evenly."""
    names = {b.spine for b in boxes if b.spine != NO_SPINE}
    names |= {s for b in boxes for s in b.leaf.spines}
    centres: dict[str, int] = {}
    for name in sorted(names, key=natural_key):
        mine = [b for b in boxes if b.spine == name]
        if mine:
            centres[name] = (mine[0].x + mine[-1].x + mine[-1].width) // 2
    spare = [n for n in sorted(names, key=natural_key) if n not in centres]
    right = boxes[-1].x + boxes[-1].width
    for index, name in enumerate(spare, start=1):
        centres[name] = right * index // (len(spare) + 1)
    return centres


def _uplinks(boxes: list[_LeafBox], spines: Mapping[str, int]) -> list[str]:
    lines = []
    for box in boxes:
        targets = box.leaf.spines or ((box.spine,) if box.spine in spines else ())
        for spine in targets:
            if spine in spines:
                lines.append(
                    f'<line class="uplink" x1="{box.x + box.width // 2}" y1="{LEAF_Y}" '
                    f'x2="{spines[spine]}" y2="{SPINE_Y + 30}"/>'
                )
    return lines


def _spine_box(name: str, centre: int, suspect: object) -> str:
    x = centre - 70
    css = "switch suspect" if suspect else "switch"
    label = f"{name}  SUSPECT" if suspect else name
    return (
        f'<g class="{css}"><title>spine {esc(name)}</title>'
        f'<rect x="{x}" y="{SPINE_Y}" width="140" height="30" rx="5"/>'
        f'<text x="{centre}" y="{SPINE_Y + 20}" text-anchor="middle">{esc(label)}</text></g>'
    )


def _leaf_box(box: _LeafBox, suspect: object) -> str:
    leaf = box.leaf
    css = "switch suspect" if suspect else ("switch none" if leaf.name == NO_LEAF else "switch")
    label = f"{leaf.name}  SUSPECT" if suspect else leaf.name
    centre = box.x + box.width // 2
    return (
        f'<g class="{css}"><title>leaf {esc(leaf.name)}: {len(leaf.hosts)} hosts</title>'
        f'<rect x="{box.x}" y="{LEAF_Y}" width="{box.width}" height="{LEAF_H}" rx="5"/>'
        f'<text x="{centre}" y="{LEAF_Y + 22}" text-anchor="middle">{esc(label)}</text></g>'
    )


def _host_boxes(
    box: _LeafBox, statuses: Mapping[str, VerdictKind], anchors: Mapping[str, str]
) -> list[str]:
    out = []
    for index, host in enumerate(box.leaf.hosts):
        column, row = divmod(index, PER_COLUMN)
        x = box.x + LEAF_PAD + column * (HOST_W + GAP)
        y = HOSTS_Y + row * (HOST_H + GAP)
        status = statuses.get(host, VerdictKind.NOT_RUN)
        # Coloured by its class (host_box_css), not by attributes on each of 64 boxes.
        out.append(
            f'<a href="#{esc(anchors.get(host, ""))}" class="host {status.value}">'
            f"<title>{esc_text(host)}: {esc_text(status.label)}</title>"
            f'<rect x="{x}" y="{y}" width="{HOST_W}" height="{HOST_H}" rx="3"/>'
            f'<text x="{x + 6}" y="{y + 13}">{esc_text(_short(host, 15))}</text></a>'
        )
    return out


def host_box_css() -> str:
    """The stylesheet rules that colour the map's host boxes by status (HOST_COLOURS; a held
    host striped)."""
    rules = []
    for status, (fill, ink) in HOST_COLOURS.items():
        paint = f"url(#{HELD_PATTERN})" if status is VerdictKind.HELD else fill
        box = f"svg.map a.host.{status.value}"
        rules.append(f"{box} rect {{ fill: {paint}; }} {box} text {{ fill: {ink}; }}")
    return "\n".join(rules) + "\n"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# -- busbw chart -----------------------------------------------------------------------------


def busbw_chart(
    busbw: Mapping[str, float], slow: set[str], suspect: frozenset[str] | set[str] = frozenset()
) -> str:
    """Horizontal bars, slowest first, with the fleet median dashed; stragglers in red, hosts
    under a suspect switch (`suspect`) in orange."""
    ordered = sorted(busbw.items(), key=lambda item: (item[1], natural_key(item[0])))
    shown = ordered[:MAX_BARS]
    top = max((v for _, v in ordered), default=0.0) or 1.0
    median = statistics.median(busbw.values()) if busbw else 0.0
    label_w, bar_w, row = 150, 620, 16
    height = len(shown) * row + 40
    scale = bar_w / top
    parts = [
        f'<svg class="bars" width="{label_w + bar_w + 90}" '
        f'height="{height}" role="img" aria-label="nccl-tests busbw per host">'
    ]
    for index, (host, value) in enumerate(shown):
        y = 10 + index * row
        css = "bar slow" if host in slow else ("bar suspect" if host in suspect else "bar")
        parts.append(
            f'<g class="{css}"><title>{esc(host)}: {value:.1f} GB/s</title>'
            f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">{esc(_short(host, 22))}</text>'
            f'<rect x="{label_w}" y="{y}" width="{max(1.0, value * scale):.1f}" '
            f'height="{row - 4}"/>'
            f'<text x="{label_w + value * scale + 4:.1f}" y="{y + 11}">{value:.1f}</text></g>'
        )
    mx = label_w + median * scale
    parts.append(
        f'<line class="median" x1="{mx:.1f}" y1="4" x2="{mx:.1f}" y2="{height - 22}"/>'
        f'<text class="median" x="{mx:.1f}" y="{height - 8}" text-anchor="middle">'
        f"median {median:.1f} GB/s</text></svg>"
    )
    return "".join(parts)


# -- timeline --------------------------------------------------------------------------------


def timeline_chart(report: Report) -> str:
    """One row per host, one bar per step from its start to its finish, coloured by status."""
    # A skipped step took no time: a bar for it would be a sliver carrying only bytes.
    steps = [s for s in report.timeline if s.finished is not None and s.status != "skipped"]
    if not steps:
        return '<p class="muted">No step timings were recorded.</p>'
    origin = report.started if report.started is not None else min(s.started or 0 for s in steps)
    end = max(s.finished or 0 for s in steps)
    span = max(end - origin, 1e-3)
    hosts = sorted({s.host for s in steps}, key=natural_key)
    label_w, plot_w, row = 150, 900, 14
    height = len(hosts) * row + 40
    parts = [
        f'<svg class="timeline" width="{label_w + plot_w + 20}"'
        f' height="{height}" role="img" aria-label="step timeline per host">'
    ]
    per_host: dict[str, list[StepRecord]] = {}
    for step in steps:
        per_host.setdefault(step.host, []).append(step)
    scale = plot_w / span
    for index, host in enumerate(hosts):
        # One group per host row: its label once, its bars without a y or the host's name
        # each (the row says whose they are) and, when ok, without a fill (the row's);
        # 64 hosts x 10 steps add up.
        bars = "".join(_segment(s, origin, scale, label_w) for s in per_host[host])
        parts.append(
            f'<g transform="translate(0 {8 + index * row})" fill="{STEP_COLOURS["ok"]}">'
            f'<text x="{label_w - 6}" y="10" text-anchor="end">{esc_text(_short(host, 22))}'
            f"</text>{bars}</g>"
        )
    parts.extend(_ticks(span, plot_w, label_w, height))
    parts.append("</svg>")
    return "".join(parts)


def _segment(step: StepRecord, origin: float, scale: float, left: int) -> str:
    start = (step.started or origin) - origin
    width = max(1.5, ((step.finished or origin) - (step.started or origin)) * scale)
    colour = STEP_COLOURS.get(step.status, "#607d8b")
    fill = "" if colour == STEP_COLOURS["ok"] else f' fill="{colour}"'
    return (
        f'<rect x="{left + start * scale:.0f}" width="{_num(width)}" height="11"{fill}>'
        f"<title>{esc_text(step.step)} ({esc_text(step.status)}, {step.duration:.2f}s)</title>"
        "</rect>"
    )


def _num(value: float) -> str:
    """A pixel length, to a tenth below 10 px, whole above (a tenth of a pixel shows only on
    a sliver)."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _ticks(span: float, plot_w: int, left: int, height: int) -> list[str]:
    out = [
        f'<line class="axis" x1="{left}" y1="{height - 28}" x2="{left + plot_w}" '
        f'y2="{height - 28}"/>'
    ]
    for i in range(6):
        x = left + plot_w * i / 5
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{height - 12}" text-anchor="middle">'
            f"{span * i / 5:.1f}s</text>"
        )
    return out


__all__ = [
    "HOST_COLOURS",
    "STEP_COLOURS",
    "busbw_chart",
    "esc",
    "esc_text",
    "held_pattern_defs",
    "host_box_css",
    "timeline_chart",
    "topology_map",
]
