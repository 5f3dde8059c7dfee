"""The HTML report in a real browser: headless Chromium renders it, and fetches nothing.

Chromium runs with every hostname mapped to NOTFOUND, so not even its own background pings
leave the machine; its net log tells page requests (initiated by the file:// page) from the
browser's own. A control page with two external URLs proves the net-log check can see them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleetfix.report.html import render_html
from fleetfix.report.model import Report

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT = 90.0
CONTROL_PAGE = (
    "<!DOCTYPE html><html><head><style>body { background: url(https://bg.fleetfix.invalid/b.png) }"
    '</style></head><body><img src="http://img.fleetfix.invalid/x.png"><p>control</p></body></html>'
)


@dataclass(frozen=True)
class Browser:
    binary: str
    workdir: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run headless Chromium once; its whole process group is gone when this returns."""
        profile = self.workdir / f"profile-{len(list(self.workdir.glob('profile-*')))}"
        command = [
            self.binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            *args,
        ]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: zygote and helpers die with it
        )
        try:
            stdout, stderr = process.communicate(timeout=TIMEOUT)
        finally:
            _end_group(process)
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _end_group(process: subprocess.Popen[str]) -> None:
    """Kill what is left of the group we started (by its id), then reap the leader."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    binary = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing under CI: .ci/run installs it")
        pytest.skip("chromium is not installed (apt-get install -y chromium; CI installs it)")
    yield Browser(binary, tmp_path_factory.mktemp("chromium"))


def write(tmp_path: Path, name: str, html: str) -> Path:
    path = tmp_path / name
    path.write_text(html, encoding="utf-8")
    return path


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_screenshot_is_a_rendered_page(browser: Browser, report: Report, tmp_path: Path) -> None:
    page = write(tmp_path, "report.html", render_html(report))
    shot = tmp_path / "report.png"
    result = browser.run(f"--screenshot={shot}", "--window-size=1400,1000", page.as_uri())
    assert shot.exists(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert png_size(data) == (1400, 1000)
    assert len(data) > 40_000  # a blank or unstyled page compresses far smaller


def test_dom_after_rendering_has_map_tables_and_evidence(
    browser: Browser, report: Report, tmp_path: Path
) -> None:
    page = write(tmp_path, "report.html", render_html(report))
    result = browser.run("--dump-dom", page.as_uri())
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r'<svg class="map"[^>]*>', dom)
    assert len(re.findall(r'<a href="#host-\d+" class="host ', dom)) == 32
    assert len(re.findall(r'<tr class="host-row"', dom)) == 32
    assert dom.count("<details>") == 33
    assert "leaf-03  SUSPECT" in dom
    assert '<svg class="bars"' in dom and '<svg class="timeline"' in dom
    assert "<script" not in dom


def page_requests(net_log: Path) -> list[str]:
    """URLs the page (not the browser's own services) asked the network for."""
    text = net_log.read_text(encoding="utf-8")
    try:
        log: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError:  # a log cut short at exit lacks its closing brackets
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if event["type"] != start or "url" not in params:
            continue  # other events, and the job's end (which carries only its error)
        if params.get("initiator") != "not an origin":
            urls.append(str(params.get("url")))
    return urls


def test_nothing_is_fetched(browser: Browser, report: Report, tmp_path: Path) -> None:
    # Without its Content-Security-Policy, so the markup itself is what is proven clean.
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", render_html(report))
    assert "Content-Security-Policy" not in html
    page = write(tmp_path, "report.html", html)
    net_log = tmp_path / "report-net.json"
    result = browser.run(f"--log-net-log={net_log}", "--dump-dom", page.as_uri())
    assert '<svg class="map"' in result.stdout
    requests = page_requests(net_log)
    assert [url for url in requests if not url.startswith("file:")] == []


def test_the_net_log_check_sees_a_page_that_fetches(browser: Browser, tmp_path: Path) -> None:
    page = write(tmp_path, "control.html", CONTROL_PAGE)
    net_log = tmp_path / "control-net.json"
    browser.run(f"--log-net-log={net_log}", "--dump-dom", page.as_uri())
    assert sorted(page_requests(net_log)) == [
        "http://img.fleetfix.invalid/x.png",
        "https://bg.fleetfix.invalid/b.png",
    ]
