"""The HTML report, statically: self-contained, escaped, and with every section the design asks."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser

from fleetfix.report.collect import ReportCollector
from fleetfix.report.html import render_html
from fleetfix.report.model import Report
from fleetfix.topology.graph import Topology
from tests.unit.report.fleetrun import SECRET, FleetRun

URL_ATTRIBUTES = {"src", "href", "xlink:href", "action", "poster", "data", "srcset", "formaction"}
FETCHING = re.compile(r"url\(\s*(?![\"']?#)|@import", re.IGNORECASE)


class Page(HTMLParser):
    """Every tag with its attributes, and the text of <style> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]


def parsed(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


def fetches(html: str) -> list[str]:
    """Whatever in the markup would make a browser load something: a URL attribute that is not
    a same-page #fragment, or CSS url() / @import that is not a #fragment."""
    page = parsed(html)
    found = []
    for tag, attrs in page.tags:
        for name, raw in attrs.items():
            value = (raw or "").strip()
            loads = name in URL_ATTRIBUTES and value and not value.startswith("#")
            if loads or FETCHING.search(value):
                found.append(f"<{tag} {name}={value!r}>")
    found.extend(style for style in page.styles if FETCHING.search(style))
    return found


def test_nothing_external_and_no_script(report: Report) -> None:
    html = render_html(report)
    assert fetches(html) == []
    page = parsed(html)
    assert page.named("script") == []
    assert page.named("link") == [] and page.named("iframe") == [] and page.named("img") == []
    (csp,) = [m for m in page.named("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in (csp.get("content") or "")


def test_the_fetch_check_itself_catches_urls() -> None:
    for bad in (
        '<img src="http://x/y.png">',
        "<a href='//cdn.example/x'>",
        '<div style="background:url( https://x/y)">',
        "<style>@import 'x.css';</style>",
        "<style>body { background: url(x.png) }</style>",
        '<svg><use xlink:href="data:image/svg+xml;base64,AA"/></svg>',
        '<a href="https://example.com">',
    ):
        assert fetches(bad), bad
    assert fetches('<a href="#host-3">x</a><rect fill="url(#held-stripes)"/>') == []
    assert fetches("<pre>&lt;img src=&quot;http://evil/&quot;&gt;</pre>") == []


def test_hostile_output_is_escaped(report: Report) -> None:
    html = render_html(report)
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in html
    # The hostile <img> is shown as text: a URL in the page's text, not a fetch.
    assert "&lt;img src=&quot;http://evil.example/p.png&quot;&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    assert "\x00" not in html and "\x1b" not in html
    assert SECRET not in html


def test_sections_map_legend_table_chart_timeline(report: Report) -> None:
    html = render_html(report)
    tags = parsed(html)
    ids = {attrs.get("id") for _, attrs in tags.tags}
    assert {"findings", "topology", "busbw", "actions", "hosts", "timeline"} <= ids
    svgs = {attrs.get("class") for attrs in tags.named("svg")}
    assert svgs == {"map", "bars", "timeline"}
    assert html.count('class="host held"') == 7
    assert html.count('class="host unreachable"') == 1
    assert "leaf-03  SUSPECT" in html
    assert 'aria-label="legend"' in html
    assert len(tags.named("details")) == 32 + 1  # one per host, plus the finding's host list
    assert html.count('<tr class="host-row"') == 32
    assert "UNREACHABLE (exit 4)" in html
    assert "7 of 9 failures sit under leaf leaf-03" in html
    assert "clean_shm" in html


def test_every_map_link_lands_on_a_table_row(report: Report) -> None:
    tags = parsed(render_html(report))
    targets = {(a.get("href") or "")[1:] for a in tags.named("a")}
    rows = {tr.get("id") for tr in tags.named("tr") if tr.get("id")}
    hosts = {t for t in targets if t.startswith("host-")}
    assert len(hosts) == 32
    assert hosts <= rows
    # Every other link goes to the one copy of a long command or output.
    texts = {div.get("id") for div in tags.named("div") if (div.get("id") or "").startswith("t")}
    assert targets - hosts and targets - hosts <= texts


def test_no_busbw_section_without_data(topology: Topology) -> None:
    collector = ReportCollector()
    for event in FleetRun().build():
        collector(event)
    report = collector.model(topology, findings=())
    quiet = replace(
        report,
        outcome="ok",
        exit_code=0,
        actions=(),
        hosts=tuple(replace(h, busbw=None) for h in report.hosts),
    )
    html = render_html(quiet)
    assert 'id="busbw"' not in html
    assert "OK (exit 0)" in html
    assert '<header class="good">' in html
    assert "No correlated failures" in html
    assert "No mutating action ran." in html
