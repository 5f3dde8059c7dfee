"""The HTML report's host map: leaves, their racks under them, the hosts in each rack, by verdict.

Built to read at 1,000 hosts. First, where the failures are: each leaf with a failing host
(worst verdict first), showing only its racks with a failing host (or a suspect one), every
host of such a rack in its box. Then the rest of the fleet, folded: every leaf's other racks
in a closed `<details>` per leaf, each rack a closed `<details>` whose summary counts its hosts
by verdict. So every failing host's box comes before any folded rack, and a healthy fleet is a
few summary lines. A box links to the host's row in the hosts table; its tooltip is the host's
verdict and reason. Plain HTML boxes, not SVG: they wrap to the page's width and fold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleetfix.report.model import LeafNode, Report, SpineNode
from fleetfix.report.svg import esc, esc_text, worst
from fleetfix.topology.graph import NO_LEAF, NO_SPINE, natural_key
from fleetfix.verdicts import Verdict, VerdictKind

NO_RACK = "(no rack)"


@dataclass(frozen=True, slots=True)
class Rack:
    """One rack's hosts under one leaf (a rack cabled to two leaves shows under each).
    `shown`: it has a failing host, or a finding names it a suspect."""

    name: str
    hosts: tuple[str, ...]
    worst: VerdictKind
    shown: bool


@dataclass(frozen=True, slots=True)
class Leaf:
    """A leaf, the spine it is filed under, and its racks: shown first, worst first.
    `shown`: a rack of it is, or a finding names the leaf a suspect."""

    node: LeafNode
    spine: str
    racks: tuple[Rack, ...]
    worst: VerdictKind
    shown: bool
    suspect: bool


@dataclass(frozen=True, slots=True)
class _Context:
    """What every part of the map reads: the verdicts, the suspects, the anchors."""

    verdicts: Mapping[str, Verdict]
    suspects: Collection[tuple[str, str]]
    anchors: Mapping[str, str]

    def kind(self, host: str) -> VerdictKind:
        verdict = self.verdicts.get(host)
        return verdict.kind if verdict is not None else VerdictKind.NOT_RUN


def leaves_in_order(report: Report) -> list[Leaf]:
    """Every leaf of the report's tree with its racks; shown leaves first (worst verdict,
    then name), then the others in the tree's order."""
    context = _Context({h.name: h.verdict for h in report.hosts}, set(report.suspects()), {})
    racks = {h.name: h.domains.get("rack", NO_RACK) for h in report.hosts}
    leaves = [_leaf(spine, leaf, context, racks) for spine in report.tree for leaf in spine.leaves]
    shown = sorted(
        (leaf for leaf in leaves if leaf.shown),
        key=lambda leaf: (leaf.worst.rank, natural_key(leaf.node.name)),
    )
    return shown + [leaf for leaf in leaves if not leaf.shown]


def _leaf(spine: SpineNode, leaf: LeafNode, context: _Context, racks: Mapping[str, str]) -> Leaf:
    members: dict[str, list[str]] = {}
    for host in leaf.hosts:
        members.setdefault(racks.get(host, NO_RACK), []).append(host)
    built = [_rack(name, hosts, context) for name, hosts in members.items()]
    built.sort(key=lambda rack: (not rack.shown, rack.worst.rank, natural_key(rack.name)))
    suspect = ("leaf", leaf.name) in context.suspects
    return Leaf(
        leaf,
        spine.name,
        tuple(built),
        worst(rack.worst for rack in built),
        suspect or any(rack.shown for rack in built),
        suspect,
    )


def _rack(name: str, hosts: list[str], context: _Context) -> Rack:
    kinds = [context.kind(host) for host in hosts]
    shown = any(kind.failing for kind in kinds) or ("rack", name) in context.suspects
    return Rack(name, tuple(hosts), worst(kinds), shown)


def host_map(
    report: Report,
    leaves: Sequence[Leaf],
    anchors: Mapping[str, str],
    leaf_anchors: Mapping[str, str],
) -> str:
    """Where the failures are (the shown leaves, in the order given, with their shown racks),
    then the rest of the fleet folded by leaf (the tree's order).

    `anchors`: host -> the id of its row in the hosts table; `leaf_anchors`: leaf -> the id
    its group gets (the fabric picture links there: a shown leaf's open group, else its fold).
    """
    context = _Context({h.name: h.verdict for h in report.hosts}, set(report.suspects()), anchors)
    shown = "".join(
        _shown_leaf(leaf, context, leaf_anchors.get(leaf.node.name, ""))
        for leaf in leaves
        if leaf.shown
    )
    cabled = [(spine.name, node.name) for spine in report.tree for node in spine.leaves]
    rest = "".join(
        _folded_leaf(leaf, context, "" if leaf.shown else leaf_anchors.get(leaf.node.name, ""))
        for leaf in sorted(leaves, key=lambda leaf: cabled.index((leaf.spine, leaf.node.name)))
    )
    if not shown and not rest:
        return '<p class="muted">No hosts.</p>'
    failing = f'<div class="hostmap">{shown}</div>' if shown else _NO_FAILURES
    others = (
        '<p class="muted">The rest of the fleet, folded by leaf and rack:</p>'
        f'<div class="hostmap">{rest}</div>'
        if rest
        else ""
    )
    return failing + others


_NO_FAILURES = '<p class="muted">No leaf or rack holds a failing host.</p>'


def _shown_leaf(leaf: Leaf, context: _Context, anchor: str) -> str:
    """A leaf with a failing host: open, with its shown racks open (every host in a box)."""
    racks = [rack for rack in leaf.racks if rack.shown]
    hosts = [host for rack in racks for host in rack.hosts]
    others = len(leaf.racks) - len(racks)
    more = f", {_many(others, 'more rack')} folded below" if others else ""
    head = (
        f"{_leaf_words(leaf)} {_counts(context.kind(h) for h in hosts)}"
        f' <span class="muted">{_many(len(hosts), "host")} in {_many(len(racks), "rack")}'
        f"{more}</span>"
    )
    body = "".join(_rack_group(rack, context) for rack in racks)
    css = "leaf suspect" if leaf.suspect else "leaf"
    return _domain(css, head, f'<div class="racks">{body}</div>', shown=True, anchor=anchor)


def _folded_leaf(leaf: Leaf, context: _Context, anchor: str) -> str:
    """A leaf's racks that are not shown above, folded (nothing when it has none)."""
    racks = [rack for rack in leaf.racks if not rack.shown]
    if not racks:
        return ""
    hosts = [host for rack in racks for host in rack.hosts]
    above = " (its failing racks are above)" if leaf.shown else ""
    head = (
        f"{_leaf_words(leaf)} {_counts(context.kind(h) for h in hosts)}"
        f' <span class="muted">{_many(len(hosts), "host")} in {_many(len(racks), "rack")}'
        f"{above}</span>"
    )
    body = "".join(_rack_group(rack, context) for rack in racks)
    return _domain("leaf", head, f'<div class="racks">{body}</div>', shown=False, anchor=anchor)


def _many(count: int, noun: str) -> str:
    """`1 rack`, `3 racks`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _leaf_words(leaf: Leaf) -> str:
    """`leaf leaf-03 SUSPECT up to spine-02`: the leaf, and the spines it is cabled to."""
    if leaf.node.name == NO_LEAF:
        return f"<b>{esc_text(NO_LEAF)}</b>"
    spines = leaf.node.spines or ((leaf.spine,) if leaf.spine != NO_SPINE else ())
    words = f"leaf <b>{esc_text(leaf.node.name)}</b>"
    if leaf.suspect:
        words += ' <span class="suspect">SUSPECT</span>'
    if spines:
        words += f' <span class="muted">up to {esc_text(", ".join(spines))}</span>'
    return words


def _rack_group(rack: Rack, context: _Context) -> str:
    boxes = "".join(_box(host, context) for host in rack.hosts)
    suspect = ("rack", rack.name) in context.suspects
    name = f"rack <b>{esc_text(rack.name)}</b>" if rack.name != NO_RACK else esc_text(NO_RACK)
    flag = ' <span class="suspect">SUSPECT</span>' if suspect else ""
    head = f"{name}{flag} {_counts(context.kind(h) for h in rack.hosts)}"
    css = "rack suspect" if suspect else "rack"
    return _domain(css, head, f'<div class="boxes">{boxes}</div>', shown=rack.shown)


def _domain(css: str, head: str, body: str, *, shown: bool, anchor: str = "") -> str:
    """A leaf or rack: open (a `<div>`) when `shown`, else folded to its head line (a closed
    `<details>`)."""
    where = f' id="{esc(anchor)}"' if anchor else ""
    if shown:
        return f'<div class="{css}"{where}><div class="head">{head}</div>{body}</div>'
    return f'<details class="{css}"{where}><summary>{head}</summary>{body}</details>'


def _box(host: str, context: _Context) -> str:
    """The host's box: coloured by its verdict's class, its tooltip the verdict and reason."""
    verdict = context.verdicts.get(host)
    kind = context.kind(host)
    reason = verdict.reason if verdict is not None and verdict.reason else kind.meaning
    tip = f"{host}: {kind.label}: {reason}"
    return (
        f'<a href="#{esc(context.anchors.get(host, ""))}" class="host {kind.value}" '
        f'title="{esc(tip)}">{esc_text(host)}</a>'
    )


def _counts(kinds: Iterable[VerdictKind]) -> str:
    """`2 needs RMA · 14 healthy`, worst first, each on its verdict's colour."""
    counts = Counter(kinds)
    return " ".join(
        f'<span class="n v-{kind.value}">{counts[kind]} {esc_text(kind.label)}</span>'
        for kind in sorted(counts, key=lambda k: k.rank)
    )


__all__ = ["NO_RACK", "Leaf", "Rack", "host_map", "leaves_in_order"]
