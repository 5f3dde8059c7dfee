"""`fleetfix journal export` and `migrate`: a SQLite history read out whole, and moved into
another journal (PostgreSQL, or SQLite) where it reads back the same."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetfix.cli import run_cli
from fleetfix.events import ActionStarted, ActionTaken, HostObserved
from fleetfix.journal import Journal
from fleetfix.journal.codec import encode
from fleetfix.journal.store import JournalError
from tests.unit.journal.test_batching import probe_step


def _history(path: Path) -> str:
    """A SQLite journal with one run: two probe steps (output, facts compressed), an action
    with its intent, a host out of service, GPUs seen."""
    journal = Journal(path)
    run_id = journal.start_run("xid79.yml", ["fleetfix", "run"], check=False, hosts=2)
    for host in ("gpu001", "gpu002"):
        for event in probe_step(host, 3):
            journal(event)
    journal(ActionStarted(host="gpu001", step="reboot", key="pb.yml:9:7", action="reboot"))
    journal(
        ActionTaken(host="gpu001", step="reboot", key="pb.yml:9:7", action="reboot", failed=False)
    )
    journal.take_out("gpu001", "reboot", None)
    journal(HostObserved(host="gpu002", gpu_count=8))
    journal.finish_run(0)
    journal.close()
    return run_id


def _read_back(journal: Journal, run_id: str) -> tuple[object, ...]:
    return (
        [encode(event) for event in journal.events(run_id)],
        journal.step_rows(run_id),
        journal.action_times("gpu001", "reboot", 0),
        journal.out_of_service(),
        journal.gpus_seen("gpu002"),
        journal.run(run_id),
    )


def test_a_history_migrated_reads_back_the_same(
    tmp_path: Path, open_journal: Callable[[], Journal]
) -> None:
    run_id = _history(tmp_path / "old.sqlite")
    source = Journal(tmp_path / "old.sqlite")
    target = open_journal()
    # The target already has a run of its own: ids collide, references must still hold.
    other = target.start_run("other.yml", [], check=False, hosts=1)
    for event in probe_step("gpu009", 5):
        target(event)
    target.finish_run(0)

    moved = source.migrate_to(target)
    assert moved.runs == 1 and moved.rows["events"] == 9 and moved.rows["actions"] == 1
    assert (moved.rows["out_of_service"], moved.rows["host_facts"]) == (1, 1)
    assert _read_back(target, run_id) == _read_back(source, run_id)
    assert len(list(target.events(other))) == 3  # its own run untouched
    again = source.migrate_to(target)
    assert (again.runs, again.skipped_runs) == (0, [run_id])
    assert again.rows == {}  # nothing inserted, nothing counted
    assert len(target.step_rows(run_id)) == 2  # nothing copied twice
    source.close()


def test_the_fleet_memory_counts_only_rows_the_target_lacked(
    tmp_path: Path, open_journal: Callable[[], Journal]
) -> None:
    _history(tmp_path / "old.sqlite")  # gpu001 out of service, gpu002 seen with 8 GPUs
    source = Journal(tmp_path / "old.sqlite")
    _observe(source, "gpu003", 4)
    target = open_journal()
    _observe(target, "gpu002", 8)  # the target knows gpu002 already
    moved = source.migrate_to(target)
    assert moved.runs == 2
    assert (moved.rows["out_of_service"], moved.rows["host_facts"]) == (1, 1)  # gpu003's only
    assert (target.gpus_seen("gpu002"), target.gpus_seen("gpu003")) == (8, 4)
    source.close()


def _observe(journal: Journal, host: str, gpus: int) -> None:
    journal.start_run("probe.yml", [], check=True, hosts=1)
    journal(HostObserved(host=host, gpu_count=gpus))
    journal.finish_run(0)


def test_a_live_run_is_not_migrated(tmp_path: Path, open_journal: Callable[[], Journal]) -> None:
    live = Journal(tmp_path / "live.sqlite")
    run_id = live.start_run("xid79.yml", [], check=False, hosts=1)
    assert live.acquire_leases(["gpu001"]) == {}
    with pytest.raises(JournalError, match=f"run {run_id} .* is still running"):
        Journal(tmp_path / "live.sqlite").migrate_to(open_journal())
    live.release_leases()
    live.close()


def test_export_is_every_row_with_data_readable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _history(tmp_path / "j.sqlite")
    assert run_cli(["journal", "export", "--journal", str(tmp_path / "j.sqlite")]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    tables = {record["table"] for record in records}
    assert tables == {
        "runs",
        "steps",
        "commands",
        "events",
        "actions",
        "out_of_service",
        "host_facts",
    }
    steps = [r["row"] for r in records if r["table"] == "steps"]
    assert steps[0]["data"]["facts"]["uuid"] == "GPU-gpu001-3"  # decompressed, not a blob
    assert (
        run_cli(["journal", "export", "--journal", str(tmp_path / "j.sqlite"), "--run", run_id])
        == 0
    )
    assert {json.loads(line)["row"]["run_id"] for line in capsys.readouterr().out.splitlines()} == {
        run_id
    }


def test_migrate_command_moves_sqlite_into_postgresql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], postgres_server: object
) -> None:
    from tests.support.postgres import PostgresServer  # noqa: PLC0415

    assert isinstance(postgres_server, PostgresServer)
    dsn = postgres_server.fresh_database()
    run_id = _history(tmp_path / "j.sqlite")
    assert (
        run_cli(["journal", "migrate", "--journal", str(tmp_path / "j.sqlite"), "--to", dsn]) == 0
    )
    out = capsys.readouterr().out
    assert "migrated 1 runs" in out and "9 events" in out
    assert dsn.split(":")[2].split("@")[0] not in out  # the password is not printed
    assert (
        run_cli(["journal", "migrate", "--journal", str(tmp_path / "j.sqlite"), "--to", dsn]) == 0
    )
    again = capsys.readouterr().out.splitlines()
    assert again[0].startswith("migrated 0 runs") and again[0].endswith(": no rows"), again
    assert again[1:] == ["skipped 1 runs already there"]
    team = Journal(dsn)
    assert [r.run_id for r in team.history()] == [run_id]
    assert team.action_times("gpu001", "reboot", time.time() - 3600) != []
    team.close()
