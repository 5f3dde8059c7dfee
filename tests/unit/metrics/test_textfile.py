"""--metrics-file: atomic 0644 writes, rewrites during the run, warnings instead of failures,
the journal's out-of-service hosts, and the CLI option that turns it on."""

from __future__ import annotations

import argparse
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.cli import build_parser
from fleetfix.cli.team_options import run_observers
from fleetfix.events import HostBackInService, HostStepFinished, RunFinished, RunStarted
from fleetfix.journal import Journal
from fleetfix.journal.store import JournalError
from fleetfix.metrics import MetricsTextfile, RunMetrics
from fleetfix.metrics.textfile import OutOfService, write_atomically
from fleetfix.results import RunResult
from tests.support import eventually
from tests.unit.metrics.promtext import parse, value


@pytest.fixture
def strict_umask() -> Iterator[None]:
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def started(playbook: str = "xid79.yml") -> RunStarted:
    return RunStarted(run_id="r1", playbook=playbook, hosts=("a", "b"), check=False)


def observer(
    path: Path,
    warnings: list[str],
    *,
    every: float,
    out_of_service: OutOfService | None = None,
) -> MetricsTextfile:
    return MetricsTextfile(
        path,
        RunMetrics("xid79.yml"),
        out_of_service=out_of_service,
        every=every,
        warn=warnings.append,
    )


def test_the_file_is_replaced_whole_and_readable_by_others(
    tmp_path: Path, strict_umask: None
) -> None:
    path = tmp_path / "fleetfix.prom"
    path.write_text("old\n")
    inode = path.stat().st_ino
    write_atomically(path, "new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.stat().st_ino != inode  # renamed over, not rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleetfix.prom"]


async def test_finish_writes_the_outcome(tmp_path: Path) -> None:
    warnings: list[str] = []
    metrics = observer(tmp_path / "f.prom", warnings, every=0)
    metrics(started())
    metrics(RunFinished(result=RunResult()))
    await metrics.finish()
    families = parse((tmp_path / "f.prom").read_text())
    assert value(families, "fleetfix_run_outcome", playbook="xid79.yml") == 0
    assert value(families, "fleetfix_run_in_progress") == 0
    assert warnings == []


async def test_a_run_that_lost_its_journal_ends_with_outcome_6(tmp_path: Path) -> None:
    """No RunFinished comes; without being told, the file would say in progress forever."""
    warnings: list[str] = []
    metrics = observer(tmp_path / "f.prom", warnings, every=0)
    metrics(started())
    metrics.journal_lost("cannot write the journal j.sqlite: disk I/O error")
    await metrics.finish()
    families = parse((tmp_path / "f.prom").read_text())
    assert value(families, "fleetfix_run_outcome") == 6
    assert value(families, "fleetfix_run_in_progress") == 0
    assert warnings == []


async def test_an_unwritable_path_is_one_warning_never_an_error(tmp_path: Path) -> None:
    warnings: list[str] = []
    path = tmp_path / "missing-dir" / "f.prom"
    metrics = observer(path, warnings, every=0)
    metrics(started())
    await metrics.finish()
    assert not metrics.write()
    assert len(warnings) == 1 and "cannot write the metrics file" in warnings[0]
    assert str(path) in warnings[0]
    assert not path.parent.exists()


async def test_the_file_is_rewritten_while_the_run_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "f.prom"
    metrics = observer(path, [], every=0.01)
    metrics(started())
    assert await eventually(lambda: metrics.writes >= 2, timeout=10)
    assert value(parse(path.read_text()), "fleetfix_run_in_progress") == 1
    metrics(RunFinished(result=RunResult(interrupted=True)))
    await metrics.finish()
    written = metrics.writes
    families = parse(path.read_text())
    assert value(families, "fleetfix_run_in_progress") == 0
    assert value(families, "fleetfix_run_outcome") == 99
    metrics(started())  # a late event after finish schedules nothing
    assert metrics.writes == written


def test_events_outside_a_loop_are_counted_and_only_finish_writes(tmp_path: Path) -> None:
    metrics = observer(tmp_path / "f.prom", [], every=0.01)
    metrics(started())
    assert metrics.writes == 0
    assert value(parse(metrics.text()), "fleetfix_run_hosts") == 2


async def test_a_journal_that_cannot_answer_leaves_out_the_fleet_series(tmp_path: Path) -> None:
    def broken() -> dict[str, float]:
        raise JournalError("journal j.sqlite: database is locked")

    warnings: list[str] = []
    metrics = observer(tmp_path / "f.prom", warnings, every=0, out_of_service=broken)
    metrics(started())
    await metrics.finish()
    families = parse((tmp_path / "f.prom").read_text())
    assert "fleetfix_hosts_out_of_service" not in families
    assert value(families, "fleetfix_run_hosts") == 2
    assert warnings == [
        "metrics: hosts out of service not read: journal j.sqlite: database is locked"
    ]


async def test_an_event_the_metrics_cannot_read_is_a_warning(tmp_path: Path) -> None:
    warnings: list[str] = []
    metrics = observer(tmp_path / "f.prom", warnings, every=0)
    metrics(HostStepFinished(result=None))  # type: ignore[arg-type]
    metrics(started())
    await metrics.finish()
    assert len(warnings) == 1 and "HostStepFinished" in warnings[0]
    assert value(parse((tmp_path / "f.prom").read_text()), "fleetfix_run_hosts") == 2


def test_the_journal_says_since_when_each_host_is_out_of_service(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    try:
        journal.start_run("p.yml", [], check=False, hosts=2)
        before = time.time()
        journal.take_out("gpu1", "disruptive", None)
        journal.take_out("gpu2", "disruptive", None)
        after = time.time()
        since = journal.out_of_service_since()
        assert sorted(since) == ["gpu1", "gpu2"]
        assert all(before <= at <= after for at in since.values())
        journal(HostBackInService(host="gpu1"))
        assert sorted(journal.out_of_service_since()) == ["gpu2"]
    finally:
        journal.close()


def run_args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", "xid79.yml", "-i", "lab.ini", *extra])


def test_the_option_adds_the_observer(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    try:
        assert run_observers(run_args(), journal) == []
        args = run_args("--metrics-file", str(tmp_path / "f.prom"))
        [found] = run_observers(args, journal)
        assert isinstance(found, MetricsTextfile)
        assert found.path == tmp_path / "f.prom"
    finally:
        journal.close()


def test_help_shows_the_option_in_the_team_group(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = capsys.readouterr().out
    team = text[text.index("team:") :]
    assert "--metrics-file PATH" in team
