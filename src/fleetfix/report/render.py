"""Writing a report file in the format its suffix names: .json, .html (or .htm), .xml (JUnit).

`steps=True` (`--report-steps`) asks the JSON and JUnit reports for every step's detail; the
HTML report always has it (collapsed).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from fleetfix.errors import UsageError
from fleetfix.report.html import render_html
from fleetfix.report.json import render_json
from fleetfix.report.junit import render_junit
from fleetfix.report.model import Report

REPORT_MODE = 0o600
"""Report files are created readable and writable by their owner only."""
RENDERERS: Mapping[str, Callable[[Report], str]] = {
    ".json": render_json,
    ".html": render_html,
    ".htm": render_html,
    ".xml": render_junit,
}
DETAILED: Mapping[str, Callable[[Report], str]] = {
    ".json": partial(render_json, steps=True),
    ".xml": partial(render_junit, steps=True),
}
"""Renderers whose step detail is asked for (`--report-steps`)."""


def renderer_for(path: Path, *, steps: bool = False) -> Callable[[Report], str]:
    """The renderer for `path`'s suffix (with step detail when `steps`). Raises UsageError
    for any other suffix."""
    suffix = path.suffix.lower()
    renderer = (DETAILED.get(suffix) if steps else None) or RENDERERS.get(suffix)
    if renderer is None:
        known = ", ".join(sorted(RENDERERS))
        raise UsageError(f"--report {path}: unknown report format {path.suffix!r}; use {known}")
    return renderer


def check_report_path(path: Path) -> None:
    """Before a run: a known format, in a directory that exists and that this user can write,
    so a typo fails before anything runs, not after the run did its work. Raises UsageError."""
    renderer_for(path)
    directory = path.parent
    if not directory.is_dir():
        raise UsageError(f"--report {path}: no directory {str(directory)!r}")
    if path.is_dir():
        raise UsageError(f"--report {path}: is a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"--report {path}: cannot write in {str(directory)!r}")


def write_report(report: Report, path: Path, *, steps: bool = False) -> None:
    """Render and write atomically (a reader never sees half a file); `steps`: with every
    step's detail (JSON, JUnit).

    Raises:
        UsageError: unknown suffix, or the file cannot be written.
    """
    text = renderer_for(path, steps=steps)(report)
    # A sibling temp file renamed over the target. A report holds hosts, commands and output:
    # it is created 0600 (the umask may narrow it further), and replacing an existing report
    # never widens it (a 0400 file stays 0400).
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        mode = REPORT_MODE & _mode_of(path)
        temp.unlink(missing_ok=True)  # left by a killed writer: O_EXCL makes a fresh one
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise UsageError(f"--report {path}: cannot write: {exc.strerror or exc}") from exc


def _mode_of(path: Path) -> int:
    """The permission bits of the file a report replaces (all bits when there is none)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o7777


__all__ = ["RENDERERS", "REPORT_MODE", "renderer_for", "write_report"]
