"""The HTML report at 1,000 hosts (big_fleet.py): every failing host in sight before anything
folded, healthy racks and leaves folded to a line, the legend of the verdicts present, and the
evidence whole."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from html.parser import HTMLParser

import pytest

from fleetfix.report.html import render_html
from fleetfix.verdicts import VerdictKind
from tests.unit.report.big_fleet import (
    FAILING,
    HOSTS,
    LONG_EVIDENCE,
    OTHERS,
    big_fleet_report,
    leaf_of,
    rack_of,
)

TRACKED = frozenset({"details", "div", "section", "tr", "a", "table"})
"""Elements whose nesting the walk follows (in this page each is always closed)."""


@dataclass(frozen=True)
class Element:
    """An element of interest: where it starts in the document (0, 1, 2, ...), its tag and
    attributes, and the folds (`<details>` without `open`) around it, innermost last."""

    order: int
    tag: str
    attrs: dict[str, str]
    folds: tuple[str, ...]

    @property
    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    @property
    def folded(self) -> bool:
        return bool(self.folds)


class Walk(HTMLParser):
    """Every tracked element with the closed `<details>` (by class) it sits in."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[Element] = []
        self._open: list[tuple[str, str | None]] = []  # (tag, fold class when a closed details)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TRACKED:
            return
        values = {k: v or "" for k, v in attrs}
        folds = tuple(fold for _, fold in self._open if fold is not None)
        self.elements.append(Element(len(self.elements), tag, values, folds))
        closed = tag == "details" and "open" not in values
        self._open.append((tag, values.get("class", "details") if closed else None))

    def handle_endtag(self, tag: str) -> None:
        if tag not in TRACKED:
            return
        opened, _ = self._open.pop()
        assert opened == tag, f"</{tag}> closes <{opened}>"

    def boxes(self) -> dict[str, Element]:
        """Host -> its box on the map (the box's tooltip starts with the host's name)."""
        found = [e for e in self.elements if e.tag == "a" and "host" in e.classes]
        return _once({e.attrs["title"].partition(":")[0]: e for e in found}, found)

    def rows(self) -> dict[str, Element]:
        """Host -> its row in the hosts table (by its anchor, host-N = the N-th host)."""
        found = [e for e in self.elements if e.tag == "tr" and "host-row" in e.classes]
        return _once({f"gpu{int(e.attrs['id'][5:]) + 1:04d}": e for e in found}, found)


def _once(by_host: dict[str, Element], found: list[Element]) -> dict[str, Element]:
    assert len(by_host) == len(found), "a host drawn twice"
    return by_host


@pytest.fixture(scope="module")
def html() -> str:
    return render_html(big_fleet_report())


@pytest.fixture(scope="module")
def walk(html: str) -> Walk:
    walked = Walk()
    walked.feed(html)
    walked.close()
    assert walked.elements, "nothing parsed"
    return walked


def healthy_hosts() -> Iterator[str]:
    for index in range(1, HOSTS + 1):
        host = f"gpu{index:04d}"
        if host not in FAILING:
            yield host


def test_every_failing_host_comes_before_any_folded_domain_or_healthy_host(walk: Walk) -> None:
    boxes, rows = walk.boxes(), walk.rows()
    assert len(boxes) == len(rows) == HOSTS
    # The first host folded away (the legend's "all verdicts" fold comes earlier: no host).
    first_fold = min(e.order for e in walk.elements if set(e.folds) & {"rack", "leaf"})
    for host in FAILING:
        assert not boxes[host].folded and not rows[host].folded, host
        assert boxes[host].order < first_fold, host
    failing_racks = {rack_of(int(host[3:])) for host in FAILING}
    for host in healthy_hosts():
        box = boxes[host]
        if rack_of(int(host[3:])) in failing_racks:
            assert not box.folded, host  # a failing rack shows all its hosts
        else:
            assert box.folded and box.order > first_fold, host
            assert box.folds[-1] == "rack", host
        # Its row in the hosts table: folded, after every failing host's row.
        assert rows[host].folds == ("fine-hosts",), host
        assert rows[host].order > max(rows[h].order for h in FAILING), host


def test_healthy_racks_and_leaves_are_folded_failing_ones_open_worst_first(html: str) -> None:
    topology = html.partition('<section id="topology">')[2].partition("</section>")[0]
    groups = r'<(div|details) class="leaf"(?: id="[^"]+")?>.*?leaf <b>([^<]+)</b>'
    leaves = re.findall(groups, topology)
    by_kind = sorted(FAILING, key=lambda h: (FAILING[h][0].rank, leaf_of(int(h[3:]))))
    failing_leaves = list(dict.fromkeys(leaf_of(int(h[3:])) for h in by_kind))
    assert len(failing_leaves) == 10
    assert leaves[:10] == [("div", leaf) for leaf in failing_leaves]
    # then every leaf's other racks, folded, in the tree's order
    assert leaves[10:] == [("details", f"leaf-{n:02d}") for n in range(1, 17)]
    racks = re.findall(
        r'<(div|details) class="rack"><(?:div class="head"|summary)>rack <b>(r\d+)', topology
    )
    assert len(racks) == 63
    shown = {rack for tag, rack in racks if tag == "div"}
    assert shown == {rack_of(int(host[3:])) for host in FAILING}
    assert not re.search(r"<details[^>]* open", html)  # no fold starts open
    # A folded rack's line counts its hosts by verdict; the drained one says so.
    assert re.search(
        r'<summary>rack <b>r32</b> <span class="n v-drained">1 drained</span> '
        r'<span class="n v-healthy">15 healthy</span></summary>',
        topology,
    )


def test_racks_hold_their_own_hosts_under_their_leaf(walk: Walk, html: str) -> None:
    rack = html.partition("rack <b>r63</b>")[2].partition("</div></div>")[0]
    assert re.findall(r'title="(gpu\d+):', rack) == [f"gpu{n:04d}" for n in range(993, 1001)]
    shown, _, folded = html.partition("The rest of the fleet, folded")
    leaf16 = shown.partition("leaf <b>leaf-16</b>")[2].partition('<div class="leaf"')[0]
    assert re.findall(r"rack <b>(r\d+)</b>", leaf16) == ["r63"]
    rest16 = folded.partition("leaf <b>leaf-16</b>")[2].partition('<details class="leaf"')[0]
    assert "(its failing racks are above)" in rest16
    assert re.findall(r"rack <b>(r\d+)</b>", rest16) == ["r61", "r62"]


def test_the_legend_lists_the_verdicts_present(html: str) -> None:
    legend = html.partition('aria-label="legend">')[2].partition("</ul>")[0]
    present = {kind for kind, *_ in FAILING.values()} | {k for k, _ in OTHERS.values()}
    present.add(VerdictKind.HEALTHY)
    expected = [kind.label for kind in VerdictKind if kind in present]
    assert re.findall(r"</span>([^<]+) <small>", legend) == expected
    assert "suspect switch" not in legend  # no finding names one here
    chips = html.partition('aria-label="hosts by verdict">')[2].partition("</ul>")[0]
    assert re.findall(r">(\d+ [^<]+)</li>", chips)[-1] == "988 healthy"


def test_each_box_tooltip_and_each_failing_hosts_header(html: str) -> None:
    hosts = html.partition('<section id="hosts">')[2].partition('<details class="fine-hosts">')[0]
    for host, (kind, reason, evidence, next_step) in FAILING.items():
        tip = escape(f"{host}: {kind.label}: {reason}", quote=True)
        assert f'class="host {kind.value}" title="{tip}">{host}</a>' in html
        section = hosts.partition(f"<strong>{host}</strong>")[2].partition("</details>")[0]
        label = section.index(f'<span class="v v-{kind.value}">{kind.label}</span>')
        why = section.index(escape(reason, quote=False))
        lines = [section.index(f"<li>{escape(line, quote=False)}</li>") for line in evidence]
        step = section.index(f"<b>Next step:</b> {escape(next_step, quote=False)}</p>")
        steps = section.index("<summary>evidence: ")
        assert [label, why, *lines, step, steps] == sorted([label, why, *lines, step, steps])


def test_evidence_is_whole_and_wraps(html: str) -> None:
    assert html.count(f"<li>{escape(LONG_EVIDENCE, quote=False)}</li>") == 1
    style = html.partition("<style>")[2].partition("</style>")[0]
    for cut in ("text-overflow", "line-clamp", "overflow: hidden"):
        assert cut not in style
    assert re.search(r"ul\.evidence-lines li \{[^}]*white-space: pre-wrap", style)
