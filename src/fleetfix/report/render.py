"""Writing a report file in the format its suffix names: .json, .html (or .htm), .xml (JUnit)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from fleetfix.errors import UsageError
from fleetfix.report.html import render_html
from fleetfix.report.json import render_json
from fleetfix.report.junit import render_junit
from fleetfix.report.model import Report

RENDERERS: Mapping[str, Callable[[Report], str]] = {
    ".json": render_json,
    ".html": render_html,
    ".htm": render_html,
    ".xml": render_junit,
}


def renderer_for(path: Path) -> Callable[[Report], str]:
    """The renderer for `path`'s suffix. Raises UsageError for any other suffix."""
    renderer = RENDERERS.get(path.suffix.lower())
    if renderer is None:
        known = ", ".join(sorted(RENDERERS))
        raise UsageError(f"--report {path}: unknown report format {path.suffix!r}; use {known}")
    return renderer


def write_report(report: Report, path: Path) -> None:
    """Render and write atomically (a reader never sees half a file).

    Raises:
        UsageError: unknown suffix, or the file cannot be written.
    """
    text = renderer_for(path)(report)
    # A sibling temp file (opened normally, so the umask applies) renamed over the target.
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temp.open("w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise UsageError(f"--report {path}: cannot write: {exc.strerror or exc}") from exc


__all__ = ["RENDERERS", "renderer_for", "write_report"]
