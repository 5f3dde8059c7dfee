"""The 1,000-host HTML report (big_fleet.py) in headless Chromium: it loads and draws, and as
laid out every failing host is on the page, above everything folded, with the healthy hosts
out of sight until opened. Chromium is a CI requirement (.ci/run installs it): no skip."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from fleetfix.report.html import render_html
from tests.unit.report.big_fleet import FAILING, HOSTS, big_fleet_report
from tests.unit.report.test_browser import BROWSERS, Browser, png_size

WINDOW = (1400, 900)
MEASURE = """<script>
for (const e of document.querySelectorAll(
    "a.host, tr.host-row, .hostmap details > summary, details.fine-hosts > summary")) {
  const box = e.getBoundingClientRect();
  e.setAttribute("data-top", String(Math.round(box.top + window.scrollY)));
  const drawn = box.width > 0 && box.height > 0 && e.checkVisibility();
  e.setAttribute("data-shown", drawn ? "yes" : "no");
}
</script>"""
"""Writes where each host box, host row and fold's summary was laid out into the DOM that
--dump-dom prints (a copy of the page for the test only: the report itself has no script)."""


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    binary = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if binary is None:
        pytest.fail("chromium is missing: .ci/run installs it (apt-get install -y chromium)")
    yield Browser(binary, tmp_path_factory.mktemp("chromium-1k"))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("page-1k") / "report.html"
    path.write_text(render_html(big_fleet_report()), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Placed:
    """An element as Chromium laid it out: its name (a host, or the fold's summary text)."""

    kind: str  # box, row, fold
    name: str
    top: int
    shown: bool


class Layout(HTMLParser):
    """The elements MEASURE marked, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.placed: list[Placed] = []
        self._summary: tuple[int, bool] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if "data-top" not in values:
            return
        top, shown = int(values["data-top"]), values["data-shown"] == "yes"
        if tag == "a":
            self.placed.append(Placed("box", values["title"].partition(":")[0], top, shown))
        elif tag == "tr":
            host = f"gpu{int(values['id'][5:]) + 1:04d}"
            self.placed.append(Placed("row", host, top, shown))
        else:
            self._summary, self._text = (top, shown), []

    def handle_data(self, data: str) -> None:
        if self._summary is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "summary" and self._summary is not None:
            top, shown = self._summary
            self.placed.append(Placed("fold", "".join(self._text).strip(), top, shown))
            self._summary = None

    def of(self, kind: str) -> dict[str, Placed]:
        return {p.name: p for p in self.placed if p.kind == kind}


def test_the_page_loads_and_draws(chromium: Browser, page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "1k.png"
    result = chromium.run(
        f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri()
    )
    assert shot.exists(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert png_size(data) == WINDOW
    assert len(data) > 40_000  # a blank or unstyled page compresses far smaller


def test_the_dom_puts_every_failing_host_before_anything_folded(
    chromium: Browser, page: Path
) -> None:
    result = chromium.run("--dump-dom", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    first_fold = dom.index('<details class="leaf"')
    assert dom.index("<h2>Hosts</h2>") > first_fold  # the map's folds, then the hosts table
    for host in FAILING:
        assert dom.index(f">{host}</a>") < first_fold, host
    boxes = re.findall(r'<a href="#host-\d+" class="host [a-z_]+" title="(gpu\d+):', dom)
    assert len(boxes) == HOSTS


def test_as_laid_out_failing_hosts_are_in_sight_and_healthy_ones_folded(
    chromium: Browser, page: Path, tmp_path: Path
) -> None:
    html = page.read_text(encoding="utf-8")
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    measured = tmp_path / "measured.html"
    measured.write_text(html.replace("</body>", f"{MEASURE}</body>"), encoding="utf-8")
    result = chromium.run(f"--window-size={WINDOW[0]},{WINDOW[1]}", "--dump-dom", measured.as_uri())
    layout = Layout()
    layout.feed(result.stdout)
    boxes, rows, folds = layout.of("box"), layout.of("row"), layout.of("fold")
    assert len(boxes) == len(rows) == HOSTS, result.stderr[-2000:]
    # Every failing host: its box drawn above the first folded leaf, its row drawn too.
    map_folds = [f for f in folds.values() if f.name.startswith("leaf ")]
    assert map_folds and all(f.shown for f in map_folds)
    fold_top = min(f.top for f in map_folds)
    for host in FAILING:
        assert boxes[host].shown and boxes[host].top < fold_top, host
        assert rows[host].shown, host
    # The healthy hosts: folded away, on the map (but for the failing racks' own) and in the
    # table, whose fold is one line under the last failing host's row.
    hidden = [b for b in boxes.values() if not b.shown]
    assert len(hidden) == HOSTS - 10 * 16 + 8  # rack r63, failing, holds only 8 hosts
    assert not any(rows[h].shown for h in rows if h not in FAILING)
    (fine,) = [f for f in folds.values() if "hosts not failing" in f.name]
    assert fine.shown and fine.top > max(rows[h].top for h in FAILING)
    # The page ends soon after: the healthy hosts took no room.
    assert fine.top < 8 * WINDOW[1]
