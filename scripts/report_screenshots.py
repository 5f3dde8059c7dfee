#!/usr/bin/env python3
"""Screenshots of the HTML report for docs/report.md: the demo run's, and a 1,000-host one's.

    make demo                                          # writes demo-report.html (exits 2)
    .venv/bin/python scripts/report_screenshots.py     # [--demo demo-report.html] [--out docs/img]

Headless Chromium draws each page in a 1400x1000 window (PNG, each under 300 KB); the
1,000-host report is the synthetic fleet of tests/unit/report/big_fleet.py (10 failing hosts
of seven verdicts in 1,000). Writes:

    report-demo.png              the demo run's page, from the top
    report-demo-hosts.png        the demo run's hosts section (each failing host's verdict first)
    report-1000-hosts.png        the 1,000-host page, from the top
    report-1000-hosts-map.png    its topology section: failing leaves and racks first, the rest
                                 folded
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the synthetic fleet lives with the tests that use it

from tests.unit.report.big_fleet import big_fleet_report  # noqa: E402

from fleetfix.report.html import render_html  # noqa: E402

WINDOW = "1400,1000"
LIMIT = 300_000
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def section_only(html: str, section: str) -> str:
    """The page with every part but `<section id=section>` hidden, so that the section is drawn
    from the window's top exactly as it lays out in the page (headless Chromium draws a
    `#fragment` scrolled page blank)."""
    hide = f"<style>body > :not(#{section}) {{ display: none; }}</style>"
    return html.replace("</head>", f"{hide}</head>", 1)


def screenshot(browser: str, page: Path, png: Path) -> None:
    """Draw `page` into `png`; no network, a fresh profile."""
    with tempfile.TemporaryDirectory() as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--window-size={WINDOW}",
            f"--screenshot={png}",
            page.as_uri(),
        ]
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            _, stderr = process.communicate(timeout=120)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # its helpers, by our group's id
            process.wait()
    if not png.exists():
        raise SystemExit(f"chromium wrote no {png}: {stderr.decode(errors='replace')[-1000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, default=ROOT / "demo-report.html")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args(argv)
    browser = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if browser is None:
        raise SystemExit("no chromium: apt-get install -y chromium")
    if not args.demo.exists():
        raise SystemExit(f"no {args.demo}: run `make demo` first")
    args.out.mkdir(parents=True, exist_ok=True)
    demo = args.demo.read_text(encoding="utf-8")
    big = render_html(big_fleet_report())
    shots = {
        "report-demo.png": demo,
        "report-demo-hosts.png": section_only(demo, "hosts"),
        "report-1000-hosts.png": big,
        "report-1000-hosts-map.png": section_only(big, "topology"),
    }
    with tempfile.TemporaryDirectory() as work:
        for name, html in shots.items():
            page = Path(work) / name.replace(".png", ".html")
            page.write_text(html, encoding="utf-8")
            png = args.out / name
            screenshot(browser, page, png)
            size = png.stat().st_size
            print(f"{png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}: {size:,} bytes")
            if size > LIMIT:
                print(f"  over {LIMIT:,} bytes: keep docs light", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
