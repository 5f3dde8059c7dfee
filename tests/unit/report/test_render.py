"""write_report: the format from the suffix, atomic writes, clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import defusedxml.ElementTree as SafeET
import pytest

from fleetfix.errors import UsageError
from fleetfix.report.model import Report
from fleetfix.report.render import write_report


def test_each_suffix_writes_its_format(report: Report, tmp_path: Path) -> None:
    for name in ("run.json", "run.html", "RUN.HTM", "run.xml"):
        write_report(report, tmp_path / name)
    assert json.loads((tmp_path / "run.json").read_text())["schema"] == "fleetfix.report/v2"
    assert (tmp_path / "run.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "RUN.HTM").read_text().startswith("<!DOCTYPE html>")
    assert SafeET.fromstring((tmp_path / "run.xml").read_bytes()).tag == "testsuites"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "RUN.HTM",
        "run.html",
        "run.json",
        "run.xml",
    ]


def test_unknown_suffix_is_a_usage_error(report: Report, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"unknown report format '\.pdf'; use \.htm, \.html"):
        write_report(report, tmp_path / "run.pdf")
    with pytest.raises(UsageError, match="unknown report format ''"):
        write_report(report, tmp_path / "report")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_target_is_a_usage_error_and_leaves_no_temp(
    report: Report, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="cannot write"):
        write_report(report, tmp_path / "missing-dir" / "run.json")
    target = tmp_path / "run.json"
    target.mkdir()  # a directory where the file should go: the rename fails
    with pytest.raises(UsageError, match="cannot write"):
        write_report(report, target)
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_overwrite_replaces_the_old_report(report: Report, tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    target.write_text("old")
    write_report(report, target)
    assert json.loads(target.read_text())["run_id"] == report.run_id


def test_a_report_is_created_owner_only_and_never_widened(report: Report, tmp_path: Path) -> None:
    fresh = tmp_path / "run.json"
    write_report(report, fresh)
    assert oct(_mode(fresh)) == oct(0o600 & ~_umask())
    shared = tmp_path / "shared.html"
    shared.write_text("old")
    shared.chmod(0o644)
    write_report(report, shared)  # a report may hold output: replacing it narrows it
    assert oct(_mode(shared)) == oct(0o600 & ~_umask())
    locked = tmp_path / "locked.xml"
    locked.write_text("old")
    locked.chmod(0o400)
    write_report(report, locked)
    assert oct(_mode(locked)) == oct(0o400 & ~_umask())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked.xml", "run.json", "shared.html"]


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
