"""Inline SVG pictures for the HTML report: the fabric (spines above leaves), the busbw chart,
the timeline; and the verdict colours every part of the page paints with.

Every string that reaches the markup goes through `esc` (host names and step names come from
inventories and playbooks; nothing here trusts them). No external reference of any kind.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
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
HELD_STRIPES = "repeating-linear-gradient(45deg, #c62828 0 4px, #5d0000 4px 8px)"
"""How a held host is painted (a box, a chip, a swatch): red striped, failed and held."""
LEAF_W_MIN, LEAF_H, GAP = 84, 30, 4
FIT_UP_TO = 2400
"""A fabric picture up to this wide shrinks to the page's width; a wider one scrolls."""
SPINE_Y, LEAF_Y = 10, 84
BAR_Y = LEAF_Y + LEAF_H + 6
MAP_H = BAR_Y + 42
MAX_BARS = 300


def esc(value: object) -> str:
    """`value` safe anywhere in the markup, attribute values included."""
    return escape(str(value), quote=True)


def esc_text(value: object) -> str:
    """`value` safe as an element's text (not an attribute value): quotes need no escaping
    there, and shell commands are full of them."""
    return escape(str(value), quote=False)


def verdict_css() -> str:
    """The stylesheet rules that paint by verdict: the map's host boxes (`a.host.KIND`) and
    every chip and swatch (`.v-KIND`), from HOST_COLOURS; a held one striped."""
    rules = []
    for kind, (fill, ink) in HOST_COLOURS.items():
        paint = HELD_STRIPES if kind is VerdictKind.HELD else fill
        css = kind.value
        rules.append(f"a.host.{css}, .v-{css} {{ background: {paint}; color: {ink}; }}")
        rules.append(f"svg rect.v-{css} {{ fill: {fill}; }}")
    return "\n".join(rules) + "\n"


def worst(kinds: Iterable[VerdictKind]) -> VerdictKind:
    """The most urgent of `kinds` (NOT_RUN for none)."""
    return min(kinds, key=lambda kind: kind.rank, default=VerdictKind.NOT_RUN)


# -- the fabric: spines above leaves -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _LeafBox:
    leaf: LeafNode
    spine: str
    x: int
    width: int


def fabric_map(
    tree: Sequence[SpineNode],
    kinds: Mapping[str, VerdictKind],
    suspects: Collection[tuple[str, str]],
    leaf_anchors: Mapping[str, str],
) -> str:
    """Spines above leaves with their uplinks; under each leaf a bar of its hosts' verdicts
    (worst on the left) and how many fail. Suspect switches outlined.

    `kinds`: host -> its verdict; `suspects`: (kind, name) of suspect domains; `leaf_anchors`:
    leaf -> the id of its group in the map below (each leaf links there).
    """
    boxes = _layout(tree)
    if not boxes or all(b.leaf.name == NO_LEAF for b in boxes):
        return ""
    width = boxes[-1].x + boxes[-1].width + GAP * 4
    spines = _spine_positions(boxes)
    scrolls = ' style="max-width:none"' if width > FIT_UP_TO else ""
    parts = [
        f'<svg class="map" width="{width}" height="{MAP_H}" viewBox="0 0 {width} {MAP_H}"'
        f'{scrolls} role="img" aria-label="fabric: spines, leaves and their hosts\' verdicts">'
    ]
    parts.extend(_uplinks(boxes, spines))
    parts.extend(_spine_box(name, x, ("spine", name) in suspects) for name, x in spines.items())
    for box in boxes:
        leaf_kinds = [kinds.get(h, VerdictKind.NOT_RUN) for h in box.leaf.hosts]
        parts.append(
            _leaf_box(box, ("leaf", box.leaf.name) in suspects, leaf_anchors.get(box.leaf.name))
        )
        parts.append(_verdict_bar(box, leaf_kinds))
    parts.append("</svg>")
    return "".join(parts)


def _layout(tree: Sequence[SpineNode]) -> list[_LeafBox]:
    boxes: list[_LeafBox] = []
    x = GAP * 4
    for spine in tree:
        for leaf in spine.leaves:
            width = max(LEAF_W_MIN, 7 * len(leaf.name) + 20)
            boxes.append(_LeafBox(leaf, spine.name, x, width))
            x += width + GAP * 3
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


def _spine_box(name: str, centre: int, suspect: bool) -> str:
    x = centre - 70
    css = "switch suspect" if suspect else "switch"
    label = f"{name}  SUSPECT" if suspect else name
    return (
        f'<g class="{css}"><title>spine {esc_text(name)}</title>'
        f'<rect x="{x}" y="{SPINE_Y}" width="140" height="30" rx="5"/>'
        f'<text x="{centre}" y="{SPINE_Y + 20}" text-anchor="middle">{esc_text(label)}</text></g>'
    )


def _leaf_box(box: _LeafBox, suspect: bool, anchor: str | None) -> str:
    leaf = box.leaf
    css = "switch suspect" if suspect else ("switch none" if leaf.name == NO_LEAF else "switch")
    label = f"{leaf.name}  SUSPECT" if suspect else leaf.name
    centre = box.x + box.width // 2
    group = (
        f'<g class="{css}"><title>leaf {esc_text(leaf.name)}: {len(leaf.hosts)} hosts</title>'
        f'<rect x="{box.x}" y="{LEAF_Y}" width="{box.width}" height="{LEAF_H}" rx="5"/>'
        f'<text x="{centre}" y="{LEAF_Y + 20}" text-anchor="middle">{esc_text(label)}</text></g>'
    )
    return f'<a href="#{esc(anchor)}">{group}</a>' if anchor else group


def _verdict_bar(box: _LeafBox, kinds: Sequence[VerdictKind]) -> str:
    """The leaf's hosts as one bar, a segment per verdict, worst on the left, and below it how
    many of them fail."""
    counts = Counter(kinds)
    parts, x = [], float(box.x)
    for kind in sorted(counts, key=lambda k: k.rank):
        width = box.width * counts[kind] / max(len(kinds), 1)
        parts.append(
            f'<rect class="v-{kind.value}" x="{x:.1f}" y="{BAR_Y}" width="{width:.1f}" '
            f'height="8"><title>{counts[kind]} {esc_text(kind.label)}</title></rect>'
        )
        x += width
    failing = sum(n for kind, n in counts.items() if kind.failing)
    centre = box.x + box.width // 2
    parts.append(
        f'<text class="count" x="{centre}" y="{BAR_Y + 21}" text-anchor="middle">'
        f"{len(kinds)} hosts</text>"
    )
    if failing:
        parts.append(
            f'<text class="count failing" x="{centre}" y="{BAR_Y + 35}" text-anchor="middle">'
            f"{failing} failing</text>"
        )
    return "".join(parts)


def _short(text: str, limit: int) -> str:
    """A chart's label cut to `limit` characters (its tooltip has the whole name)."""
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
    "HELD_STRIPES",
    "HOST_COLOURS",
    "STEP_COLOURS",
    "busbw_chart",
    "esc",
    "esc_text",
    "fabric_map",
    "timeline_chart",
    "verdict_css",
    "worst",
]
