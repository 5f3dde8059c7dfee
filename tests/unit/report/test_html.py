"""The HTML report, statically: self-contained, escaped, and with every section the design asks."""

from __future__ import annotations

import re
from dataclasses import replace
from html.parser import HTMLParser

from fleetfix.report.collect import ReportCollector
from fleetfix.report.html import render_html
from fleetfix.report.model import CommandRecord, HostReport, Report, StepRecord
from fleetfix.topology.graph import Topology
from fleetfix.verdicts import Verdict, VerdictKind
from tests.unit.report.fleetrun import (
    NOISE_FAILURE,
    SECRET,
    STRAGGLER,
    UNREACHABLE,
    FleetRun,
)

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
    # Element text escapes <, > and & (quotes are harmless there; attribute values escape
    # them too).
    assert '&lt;script&gt;alert("pwned")&lt;/script&gt;' in html
    # The hostile <img> is shown as text: a URL in the page's text, not a fetch.
    assert '&lt;img src="http://evil.example/p.png"&gt;' in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    assert "\x00" not in html and "\x1b" not in html
    assert SECRET not in html


HELD = [f"gpu{n:03d}" for n in range(17, 24)]  # leaf-03's failing nodes (fleetrun.py)


def _verdict(host: str) -> Verdict:
    """The verdicts the engine gives the fabricated run's hosts (its events carry none)."""
    if host in HELD:
        return Verdict(
            host,
            VerdictKind.HELD,
            "slurm_drain held: suspect leaf leaf-03",
            (f"nccl-tests on {host}: avg busbw 11.0 GB/s below the floor",),
            "check leaf-03's switch; its nodes wait for it",
        )
    if host == UNREACHABLE:
        return Verdict(host, VerdictKind.UNREACHABLE, "connection refused")
    if host == NOISE_FAILURE:
        return Verdict(host, VerdictKind.FAILED, "nccl_tests failed")
    if host == STRAGGLER:
        return Verdict(host, VerdictKind.FIXED, "repaired by clean_shm")
    return Verdict(host, VerdictKind.HEALTHY, "no fault found")


def judged(report: Report) -> Report:
    return replace(report, hosts=tuple(replace(h, verdict=_verdict(h.name)) for h in report.hosts))


def test_sections_map_legend_table_chart_timeline(report: Report) -> None:
    html = render_html(judged(report))
    tags = parsed(html)
    ids = {attrs.get("id") for _, attrs in tags.tags}
    assert {"findings", "topology", "busbw", "actions", "hosts", "timeline"} <= ids
    svgs = {attrs.get("class") for attrs in tags.named("svg")}
    assert svgs == {"map", "bars", "timeline"}
    assert html.count('class="host held"') == 7
    assert html.count('class="host unreachable"') == 1
    assert "leaf-03  SUSPECT" in html
    assert 'aria-label="legend"' in html
    # one per host's steps, plus the finding's host list; the folds have a class
    assert len([d for d in tags.named("details") if not d]) == 32 + 1
    assert html.count('<tr class="host-row"') == 32
    assert "UNREACHABLE (exit 4)" in html
    assert "7 of 9 failures sit under leaf leaf-03" in html
    assert "clean_shm" in html


def test_legend_shows_the_verdicts_present_and_every_verdict_folded(report: Report) -> None:
    html = render_html(judged(report))
    legend = html.partition('aria-label="legend">')[2].partition("</ul>")[0]
    labels = re.findall(r'<span class="swatch ([^"]+)"></span>([^<]+) <small>', legend)
    assert labels == [
        ("v-unreachable", "unreachable"),
        ("v-held", "held"),
        ("v-failed", "failed"),
        ("v-fixed", "fixed"),
        ("v-healthy", "healthy"),
        ("suspect-swatch", "suspect switch"),
    ]
    every = html.partition('<details class="all-verdicts">')[2].partition("</details>")[0]
    assert len(re.findall(r"<li>", every)) == len(VerdictKind)
    assert every.count("(fails the run)") == 8


def test_racks_sit_under_their_leaf_and_healthy_ones_are_folded(report: Report) -> None:
    html = render_html(judged(report))
    topology = html.partition('<section id="topology">')[2].partition("</section>")[0]
    # First the leaves with a failing host, worst first: leaf-04 (gpu032 unreachable), leaf-03
    # (held), leaf-01 (gpu002 failed), each with only its failing racks; then every leaf's
    # other racks, folded, in the tree's order (leaf-03 has none left).
    leaves = r'<(div|details) class="leaf[^"]*"(?: id="[^"]+")?>.*?leaf <b>([^<]+)</b>'
    assert re.findall(leaves, topology) == [
        ("div", "leaf-04"),
        ("div", "leaf-03"),
        ("div", "leaf-01"),
        ("details", "leaf-01"),
        ("details", "leaf-02"),
        ("details", "leaf-04"),
    ]
    racks = r'<(div|details) class="rack"><(?:div class="head"|summary)>rack <b>(r\d+)'
    assert re.findall(racks, topology) == [
        ("div", "r08"),
        ("div", "r05"),
        ("div", "r06"),
        ("div", "r01"),
        ("details", "r02"),
        ("details", "r03"),
        ("details", "r04"),
        ("details", "r07"),
    ]
    r06 = topology.partition("rack <b>r06</b>")[2].partition("</div></div>")[0]
    assert re.findall(r'class="host [a-z_]+" title="(gpu\d+):', r06) == [
        "gpu021",
        "gpu022",
        "gpu023",
        "gpu024",
    ]
    assert 'leaf <b>leaf-03</b> <span class="suspect">SUSPECT</span>' in topology


def test_a_host_box_tells_its_verdict_and_reason(report: Report) -> None:
    html = render_html(judged(report))
    assert (
        '<a href="#host-16" class="host held" title="gpu017: held: slurm_drain held: suspect '
        'leaf leaf-03">gpu017</a>' in html
    )
    assert 'title="gpu001: healthy: no fault found">gpu001</a>' in html


def test_a_failing_hosts_verdict_heads_its_steps(report: Report) -> None:
    html = render_html(judged(report))
    hosts = html.partition('<section id="hosts">')[2]
    failing, _, folded = hosts.partition('<details class="fine-hosts">')
    assert re.findall(r"<strong>(gpu\d+)</strong>", failing) == ["gpu032", *HELD, "gpu002"]
    assert len(re.findall(r"<strong>(gpu\d+)</strong>", folded)) == 32 - 9
    assert "23 hosts not failing" in folded.partition("</summary>")[0]
    row = failing.partition("<strong>gpu017</strong>")[2].partition("</details>")[0]
    verdict = row.index('<span class="v v-held">held</span>')
    reason = row.index("slurm_drain held: suspect leaf leaf-03")
    evidence = row.index("<li>nccl-tests on gpu017: avg busbw 11.0 GB/s below the floor</li>")
    step = row.index("<b>Next step:</b> check leaf-03's switch; its nodes wait for it")
    assert verdict < reason < evidence < step < row.index("<summary>evidence: ")


def test_every_map_link_lands_on_a_table_row(report: Report) -> None:
    tags = parsed(render_html(judged(report)))
    targets = {(a.get("href") or "")[1:] for a in tags.named("a")}
    rows = {tr.get("id") for tr in tags.named("tr") if tr.get("id")}
    hosts = {t for t in targets if t.startswith("host-")}
    assert len(hosts) == 32
    assert hosts <= rows
    # The fabric's leaves link to their groups; every other link goes to the one copy of a
    # long command or output.
    leaves = {t for t in targets if t.startswith("leaf-")}
    groups = {a.get("id") for tag, a in tags.tags if "leaf" in (a.get("class") or "").split()}
    assert len(leaves) == 4 and leaves <= groups
    texts = {div.get("id") for div in tags.named("div") if (div.get("id") or "").startswith("t")}
    assert targets - hosts - leaves and targets - hosts - leaves <= texts


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


def _passing(host: str, *commands: str, step: str = "reserve") -> StepRecord:
    ran = tuple(CommandRecord(command=c, rc=0, duration=0.1) for c in commands)
    return StepRecord(host, step, "p", "changed", True, "", 1, 0.1, 1.0, 1.1, ran)


def _changed(host: str) -> Verdict:
    return Verdict(host, VerdictKind.CHANGED, "changed, no fault found")


def _fleet(*hosts: HostReport) -> Report:
    return Report("r1", "p.yml", 0.0, 2.0, False, "ok", 0, hosts=hosts)


def test_what_every_host_ran_is_written_once_with_the_hosts_own_name_aside() -> None:
    probe = 'node=$(hostname -s); scontrol show node "$node" # ' + "x" * 200
    hosts = [
        HostReport(
            name,
            Verdict(name, VerdictKind.CHANGED),
            {"changed": 1},
            steps=(
                _passing(name, probe, f"scontrol create reservation Name=fleetfix-{name}"),
                StepRecord(name, "drain", "p", "skipped", False, "", 1, 0.0, None, None),
            ),
        )
        for name in ("gpu1", "gpu10", "gpu2")
    ]
    html = render_html(_fleet(*hosts))
    _, _, section = html.partition("What each step ran on every host")
    usual, _, table = section.partition("<table")
    # The shared probe once (linked), the reservation once, as one host ran it: gpu1 is not
    # mistaken for the head of gpu10's name.
    assert html.count(probe) == 1 and html.count("fleetfix-gpu") == 1
    assert "(as gpu1 ran it; each host with its own name)" in usual
    assert "Skipped on every host: drain." in usual
    assert "skipped: drain" not in table
    rows = re.findall(r"<li class=\"changed\"><b>reserve</b> changed 0.10s</li>", table)
    assert len(rows) == 3


def test_a_command_one_host_ran_differently_stays_on_that_hosts_line() -> None:
    same = "systemctl stop nvidia-persistenced; echo stopped-everything-for-the-test"
    hosts = (
        HostReport("a", _changed("a"), {}, steps=(_passing("a", same),)),
        HostReport("b", _changed("b"), {}, steps=(_passing("b", same),)),
        HostReport("c", _changed("c"), {}, steps=(_passing("c", same + " --force"),)),
    )
    html = render_html(_fleet(*hosts))
    # Not run by every host: no host's line drops it, and it is shared as the repeated text
    # it is; c's own variant shows on c's line.
    assert "What each step ran on every host" not in html
    assert html.count(f"$ {same}</code>") == 0 and html.count(f"<pre>{same}</pre>") == 1
    assert html.count(f"<code>$ {same} --force</code>") == 1
