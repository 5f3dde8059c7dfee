"""The journal on a real SQLite file and a real PostgreSQL database: what a run records, what
resume and cooldowns read back. Every test runs once on each backend but those about SQLite's
own files (older journals' formats, where the default file is), which say so."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest

from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    CommandRan,
    HostBackInService,
    HostObserved,
    HostStepFinished,
    RunStarted,
)
from fleetfix.journal import Journal, ResumeRefused, default_journal_path
from fleetfix.journal.codec import EXCERPT
from fleetfix.journal.store import JournalError
from fleetfix.results import PARSED_EXCERPT, CommandResult, Status, StepResult

if TYPE_CHECKING:
    from tests.unit.journal.conftest import Backend


def _step(host: str, key: str, status: Status, **data: object) -> HostStepFinished:
    result = StepResult(host=host, step=f"step {key}", status=status, data=data, key=key)
    return HostStepFinished(result=result)


def test_resume_state_has_each_host_steps_last_verdict(open_journal: Callable[[], Journal]) -> None:
    journal = open_journal()
    run_id = journal.start_run("pb.yml", ["fleetfix", "run"], check=False, hosts=2)
    journal(_step("gpu001", "pb.yml:3:5", Status.CHANGED, stdout="drained\n", rc=0))
    journal(_step("gpu001", "pb.yml:9:5", Status.FAILED, rc=1))
    journal(_step("gpu002", "pb.yml:3:5", Status.OK, rc=0))
    journal.close()

    reopened = open_journal()  # a new process would see the same rows
    state = reopened.resume_state(run_id)
    assert set(state.steps) == {
        ("gpu001", "pb.yml:3:5"),
        ("gpu001", "pb.yml:9:5"),
        ("gpu002", "pb.yml:3:5"),
    }
    assert state.steps[("gpu001", "pb.yml:3:5")].data["stdout"] == "drained\n"
    assert state.steps[("gpu001", "pb.yml:9:5")].status is Status.FAILED  # replayed, not retried
    assert reopened.history()[0].run_id == run_id
    assert reopened.history()[0].finished is None  # never finished: resumable


def test_an_intent_is_open_until_its_step_has_a_verdict(
    open_journal: Callable[[], Journal],
) -> None:
    journal = open_journal()
    run_id = journal.start_run("pb.yml", [], check=False, hosts=2)
    for host in ("gpu001", "gpu002"):
        journal(
            ActionStarted(
                host=host,
                step="reboot",
                key="pb.yml:20:7",
                action="reboot",
                disruptive=True,
                evidence={"boot_id": f"boot-{host}"},
            )
        )
    journal(
        ActionTaken(host="gpu001", step="reboot", key="pb.yml:20:7", action="reboot", failed=False)
    )
    journal(_step("gpu001", "pb.yml:20:7", Status.CHANGED))
    journal.close()

    state = open_journal().resume_state(run_id)
    assert list(state.intents) == [("gpu002", "pb.yml:20:7", "reboot")]
    intent = state.intents[("gpu002", "pb.yml:20:7", "reboot")]
    assert intent.evidence == {"boot_id": "boot-gpu002"}
    # Journaled before it was sent, the interrupted start counts as an attempt...
    reopened = open_journal()
    assert len(reopened.action_times("gpu002", "reboot", 0)) == 1
    # ...until a resumed run proves it never left the controller.
    reopened.mark_undelivered(intent.record)
    assert reopened.action_times("gpu002", "reboot", 0) == []


def test_a_finished_run_is_not_resumable_an_interrupted_one_is(
    open_journal: Callable[[], Journal],
) -> None:
    journal = open_journal()
    done = journal.start_run("pb.yml", [], check=False, hosts=1)
    journal.finish_run(2)
    with pytest.raises(ResumeRefused, match="it finished") as refused:
        journal.resume_state(done)
    assert not refused.value.live
    stopped = journal.start_run("pb.yml", [], check=False, hosts=1)
    journal.finish_run(99)  # Ctrl-C / SIGTERM: interrupted, consistent, resumable
    assert journal.resume_state(stopped).run_id == stopped


def test_a_live_run_is_not_resumable(open_journal: Callable[[], Journal]) -> None:
    live = open_journal()
    run_id = live.start_run("pb.yml", [], check=False, hosts=1)
    assert live.acquire_leases(["gpu001"]) == {}  # this process holds it: alive
    with pytest.raises(ResumeRefused, match="still running") as refused:
        open_journal().resume_state(run_id)
    assert refused.value.live
    live.release_leases()


def test_repair_budget_is_shared_by_every_journal_user(open_journal: Callable[[], Journal]) -> None:
    first, second = open_journal(), open_journal()
    first.start_run("a.yml", [], check=False, hosts=3)
    second.start_run("b.yml", [], check=False, hosts=3)
    assert first.take_out("gpu001", "reboot", 2) is None
    assert second.take_out("gpu002", "reboot", 2) is None
    refused = first.take_out("gpu003", "reboot", 2)
    assert refused is not None and "repair budget reached: 2 hosts" in refused
    assert first.take_out("gpu001", "reboot", 2) is None  # already out: no new slot needed
    second(HostBackInService(host="gpu002"))
    assert first.take_out("gpu003", "reboot", 2) is None
    assert set(second.out_of_service()) == {"gpu001", "gpu003"}


def test_a_node_resumed_by_someone_else_leaves_the_budget(
    open_journal: Callable[[], Journal],
) -> None:
    journal = open_journal()
    journal.start_run("a.yml", [], check=False, hosts=1)
    assert journal.take_out("gpu001", "reboot", None) is None
    journal(HostObserved(host="gpu001", in_service=True))  # same run: still its own work
    assert "gpu001" in journal.out_of_service()
    journal.start_run("b.yml", [], check=False, hosts=1)
    journal(HostObserved(host="gpu001", in_service=True))  # a later run sees it back
    assert journal.out_of_service() == {}


def test_gpus_seen_keeps_the_most(open_journal: Callable[[], Journal]) -> None:
    journal = open_journal()
    journal.start_run("a.yml", [], check=False, hosts=1)
    assert journal.gpus_seen("gpu001") is None
    for count in (8, 7, 8, 6):
        journal(HostObserved(host="gpu001", gpu_count=count))
    assert journal.gpus_seen("gpu001") == 8


def test_a_version_1_journal_is_migrated(tmp_path: Path) -> None:
    """SQLite only: version 1 journals were SQLite files; PostgreSQL journals began at
    version 3."""
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE actions (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, host TEXT NOT"
            " NULL, action TEXT NOT NULL, failed INTEGER NOT NULL, at REAL NOT NULL)"
        )
        db.execute("INSERT INTO actions VALUES (1, 'r', 'gpu001', 'reboot', 0, ?)", (time.time(),))
    journal = Journal(path)
    assert len(journal.action_times("gpu001", "reboot", 0)) == 1


def test_default_journal_is_shared_by_every_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No backend: where the default journal, a SQLite file, is (a PostgreSQL journal is
    always named)."""
    monkeypatch.setenv("FLEETFIX_JOURNAL", str(tmp_path / "team.sqlite"))
    assert default_journal_path() == tmp_path / "team.sqlite"
    monkeypatch.delenv("FLEETFIX_JOURNAL")
    if os.geteuid() == 0:
        assert default_journal_path() == Path("/var/lib/fleetfix/journal.sqlite")
    else:
        assert default_journal_path().name == "journal.sqlite"


def test_commands_keep_bounded_evidence(
    open_journal: Callable[[], Journal], backend: Backend
) -> None:
    journal = open_journal()
    journal.start_run("pb.yml", [], check=False, hosts=1)
    long_output = "x" * (EXCERPT * 3)
    result = CommandResult("nvidia-smi -q", 0, long_output, "", 0.5)
    journal(CommandRan(host="gpu001", step="probe", result=result))
    journal.close()
    ((stdout, size),) = backend.committed("SELECT stdout, stdout_size FROM commands")
    assert len(stdout) <= EXCERPT
    assert f"[{len(long_output)} chars, " in stdout
    assert size == len(long_output)


def test_output_read_into_facts_keeps_a_shorter_excerpt(
    open_journal: Callable[[], Journal], backend: Backend
) -> None:
    journal = open_journal()
    journal.start_run("pb.yml", [], check=False, hosts=1)
    long_output = "x" * (EXCERPT * 3)
    result = CommandResult("nvidia-smi -q -x", 0, long_output, "", 0.5)
    journal(CommandRan(host="gpu001", step="probe", result=result, read_into_facts=True))
    journal.close()
    ((stdout, size),) = backend.committed("SELECT stdout, stdout_size FROM commands")
    assert len(stdout) <= PARSED_EXCERPT < EXCERPT
    assert f"[{len(long_output)} chars, " in stdout
    assert size == len(long_output)


def test_action_times_span_runs(open_journal: Callable[[], Journal]) -> None:
    journal = open_journal()
    for _ in range(2):
        journal.start_run("xid79.yml", [], check=False, hosts=1)
        journal(ActionTaken(host="gpu001", step="reboot", action="reboot", failed=False))
    journal(ActionTaken(host="gpu002", step="reboot", action="reboot", failed=False))
    assert len(journal.action_times("gpu001", "reboot", time.time() - 3600)) == 2
    assert journal.action_times("gpu001", "reboot", time.time() + 10) == []
    assert journal.action_times("gpu001", "gpu_reset", 0) == []


def test_leases_refuse_a_live_holder_and_free_a_dead_one(
    open_journal: Callable[[], Journal], backend: Backend
) -> None:
    first = open_journal()
    dead_run = first.start_run("a.yml", [], check=False, hosts=2)
    assert first.acquire_leases(["gpu001", "gpu002"]) == {}

    second = open_journal()
    second.start_run("b.yml", [], check=False, hosts=1)
    busy = second.acquire_leases(["gpu002", "gpu003"])
    assert list(busy) == ["gpu002"]
    assert f"pid {os.getpid()}" in busy["gpu002"]

    # A holder known dead (kill -9: its process gone, its database session ended) no longer
    # blocks anyone, though its lease rows are still there.
    backend.kill_controller(dead_run)
    assert second.acquire_leases(["gpu002"]) == {}
    second.release_leases()


def test_a_journal_that_cannot_be_opened_is_a_clear_error(
    journal_target: Path | str, tmp_path: Path
) -> None:
    if isinstance(journal_target, Path):
        blocker = tmp_path / "file"
        blocker.write_text("")
        unopenable: Path | str = blocker / "sub" / "j.sqlite"
        why = "Not a directory"
    else:
        unopenable = urlunsplit(urlsplit(journal_target)._replace(path="/no_such_database"))
        why = 'database "no_such_database" does not exist'
    with pytest.raises(JournalError, match="cannot open journal") as refused:
        Journal(unopenable)
    assert why in str(refused.value)


VERSION_2 = """
CREATE TABLE runs (run_id TEXT PRIMARY KEY, playbook TEXT NOT NULL, argv TEXT NOT NULL,
    check_mode INTEGER NOT NULL, started REAL NOT NULL, finished REAL, outcome INTEGER,
    hosts INTEGER NOT NULL, controller TEXT NOT NULL);
CREATE TABLE steps (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, host TEXT NOT NULL,
    step TEXT NOT NULL, step_key TEXT NOT NULL, status TEXT NOT NULL, changed INTEGER NOT NULL,
    message TEXT NOT NULL, attempts INTEGER NOT NULL, duration REAL NOT NULL,
    data TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE commands (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, host TEXT NOT NULL,
    step TEXT NOT NULL, command TEXT NOT NULL, rc INTEGER, timed_out INTEGER NOT NULL,
    planned INTEGER NOT NULL, duration REAL NOT NULL, stdout TEXT NOT NULL,
    stderr TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE events (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, type TEXT NOT NULL,
    body TEXT NOT NULL);
INSERT INTO runs VALUES ('old', 'pb.yml', '[]', 0, 1.0, NULL, NULL, 1, 'ctl');
INSERT INTO commands VALUES (1, 'old', 'gpu001', 'probe', 'nvidia-smi -q -x', 0, 0, 0, 0.2,
    '<log/>', '', 2.0);
INSERT INTO steps VALUES (1, 'old', 'gpu001', 'probe', 'pb.yml:3:7', 'ok', 0, '', 1, 0.2,
    '{"cmd": "nvidia-smi -q -x", "stdout": "<log/>", "facts": {"gpu_count": 8}}', 3.0);
INSERT INTO events VALUES (1, 'old', 'CommandRan', '{"at": 2.0, "host": "gpu001",
    "step": "probe", "planned_only": false, "result": {"command": "nvidia-smi -q -x",
    "rc": 0, "stdout": "<log/>", "stderr": "", "duration": 0.2, "timed_out": false}}');
INSERT INTO events VALUES (2, 'old', 'HostStepFinished', '{"at": 3.0, "retrying": false,
    "result": {"host": "gpu001", "step": "probe", "status": "ok", "changed": false,
    "message": "", "commands": [], "data": {"stdout": "<log/>", "facts": {"gpu_count": 8}},
    "attempts": 1, "duration": 0.2, "key": "pb.yml:3:7"}}');
"""


def test_a_version_2_journal_opens_and_reads_as_before(tmp_path: Path) -> None:
    """SQLite only: version 2 journals were SQLite files; PostgreSQL journals began at
    version 3."""
    path = tmp_path / "v2.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(VERSION_2)
    journal = Journal(path)
    ran, finished = journal.events("old")
    assert isinstance(ran, CommandRan) and ran.result.stdout == "<log/>"
    assert isinstance(finished, HostStepFinished)
    assert finished.result.data["facts"] == {"gpu_count": 8}
    state = journal.resume_state("old")
    assert state.steps[("gpu001", "pb.yml:3:7")].data["stdout"] == "<log/>"
    # A new run goes into the same file in the new shape; the old one still reads.
    new = journal.start_run("pb.yml", [], check=False, hosts=1)
    journal(CommandRan(host="gpu001", step="probe", result=CommandResult("id", 0, "0\n", "")))
    journal.close()
    reopened = Journal(path)
    assert [type(e).__name__ for e in reopened.events("old")] == ["CommandRan", "HostStepFinished"]
    (again,) = reopened.events(new)
    assert isinstance(again, CommandRan) and again.result.stdout == "0\n"
    assert [row["host"] for row in reopened.step_rows("old")] == ["gpu001"]
    reopened.close()


def test_a_run_keeps_its_command_line_and_hosts_for_a_resume(
    open_journal: Callable[[], Journal],
) -> None:
    """What --resume compares (cli/resume_scope.py): the stored command line and the hosts
    of the run's first RunStarted, not of a later resume's."""
    journal = open_journal()
    argv = ["fleetfix", "run", "pb.yml", "--limit", "gpu00[1:2]"]
    run_id = journal.start_run("pb.yml", argv, check=False, hosts=2) or ""
    assert journal.run_hosts(run_id) is None  # killed before its first event: not known
    journal(RunStarted(run_id=run_id, playbook="pb.yml", hosts=("gpu001", "gpu002"), check=False))
    journal(RunStarted(run_id=run_id, playbook="pb.yml", hosts=("gpu001",), check=False))
    assert journal.run_argv(run_id) == argv
    assert journal.run_hosts(run_id) == ["gpu001", "gpu002"]
    with pytest.raises(JournalError, match="no run 'nope'"):
        journal.run_argv("nope")
    journal.close()
