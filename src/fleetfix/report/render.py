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
from typing import TYPE_CHECKING

from fleetfix.errors import UsageError

if TYPE_CHECKING:
    from fleetfix.report.model import Report

REPORT_MODE = 0o600
"""Report files are created readable and writable by their owner only."""
FORMATS: Mapping[str, str] = {".json": "json", ".html": "html", ".htm": "html", ".xml": "junit"}
"""Each report file suffix and the format it names."""


def renderer_for(path: Path, *, steps: bool = False) -> Callable[[Report], str]:
    """The renderer for `path`'s suffix (with step detail when `steps`: JSON and JUnit; HTML
    always has it). Raises UsageError for any other suffix."""
    return _renderer(_format_of(path), steps=steps)


def _format_of(path: Path) -> str:
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        known = ", ".join(sorted(FORMATS))
        raise UsageError(f"--report {path}: unknown report format {path.suffix!r}; use {known}")
    return found


def _renderer(kind: str, *, steps: bool) -> Callable[[Report], str]:
    """The format's renderer, its module imported now: a run loads a writer only when it
    writes that report, at its end."""
    if kind == "html":
        from fleetfix.report.html import render_html  # noqa: PLC0415

        return render_html
    if kind == "json":
        from fleetfix.report.json import render_json  # noqa: PLC0415

        return partial(render_json, steps=steps)
    from fleetfix.report.junit import render_junit  # noqa: PLC0415

    return partial(render_junit, steps=steps)


def check_report_path(path: Path) -> None:
    """Before a run: a known format, in a directory that exists and that this user can write,
    so a typo fails before anything runs, not after the run did its work. Raises UsageError."""
    _format_of(path)
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


__all__ = ["FORMATS", "REPORT_MODE", "check_report_path", "renderer_for", "write_report"]
