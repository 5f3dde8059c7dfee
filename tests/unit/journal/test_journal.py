"""The journal on a real SQLite file: what a run records, what resume and cooldowns read back."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetfix.events import ActionTaken, CommandRan, HostStepFinished
from fleetfix.journal import Journal
from fleetfix.journal.codec import EXCERPT, excerpt
from fleetfix.journal.store import JournalError
from fleetfix.results import CommandResult, Status, StepResult


def _step(host: str, key: str, status: Status, **data: object) -> HostStepFinished:
    result = StepResult(host=host, step=f"step {key}", status=status, data=data, key=key)
    return HostStepFinished(result=result)


def test_records_steps_and_resume_sees_only_finished_ones(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    run_id = journal.start_run("pb.yml", ["fleetfix", "run"], check=False, hosts=2)
    journal(_step("gpu001", "pb.yml:3:5", Status.CHANGED, stdout="drained\n", rc=0))
    journal(_step("gpu001", "pb.yml:9:5", Status.FAILED, rc=1))
    journal(_step("gpu002", "pb.yml:3:5", Status.OK, rc=0))
    journal.close()

    reopened = Journal(tmp_path / "j.sqlite")  # a new process would see the same rows
    done = reopened.completed(run_id)
    assert set(done) == {("gpu001", "pb.yml:3:5"), ("gpu002", "pb.yml:3:5")}
    assert done[("gpu001", "pb.yml:3:5")]["stdout"] == "drained\n"
    assert reopened.history()[0].run_id == run_id
    assert reopened.history()[0].finished is None  # never finished: resumable


def test_commands_keep_bounded_evidence(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    journal.start_run("pb.yml", [], check=False, hosts=1)
    long_output = "x" * (EXCERPT * 3)
    result = CommandResult("nvidia-smi -q", 0, long_output, "", 0.5)
    journal(CommandRan(host="gpu001", step="probe", result=result))
    journal.close()
    with sqlite3.connect(tmp_path / "j.sqlite") as db:
        (stdout,) = db.execute("SELECT stdout FROM commands").fetchone()
    assert len(stdout) < EXCERPT + 100
    assert "chars cut" in stdout
    assert excerpt("short") == "short"


def test_action_times_span_runs(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    for _ in range(2):
        journal.start_run("xid79.yml", [], check=False, hosts=1)
        journal(ActionTaken(host="gpu001", step="reboot", action="reboot", failed=False))
    journal(ActionTaken(host="gpu002", step="reboot", action="reboot", failed=False))
    assert len(journal.action_times("gpu001", "reboot", time.time() - 3600)) == 2
    assert journal.action_times("gpu001", "reboot", time.time() + 10) == []
    assert journal.action_times("gpu001", "gpu_reset", 0) == []


def test_leases_refuse_a_live_holder_and_free_a_dead_one(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    first = Journal(path)
    first.start_run("a.yml", [], check=False, hosts=2)
    assert first.acquire_leases(["gpu001", "gpu002"]) == {}

    second = Journal(path)
    second.start_run("b.yml", [], check=False, hosts=1)
    busy = second.acquire_leases(["gpu002", "gpu003"])
    assert list(busy) == ["gpu002"]
    assert f"pid {os.getpid()}" in busy["gpu002"]

    # A holder whose process is gone (kill -9) no longer blocks anyone.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    with sqlite3.connect(path) as db:
        db.execute("UPDATE leases SET pid=?", (int(dead.stdout),))
    assert second.acquire_leases(["gpu002"]) == {}
    first.release_leases()
    second.release_leases()


def test_unwritable_journal_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(JournalError, match="cannot open journal"):
        Journal(blocker / "sub" / "j.sqlite")
