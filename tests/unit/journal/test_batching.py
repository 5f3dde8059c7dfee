"""Batched journal writes on a real SQLite file, read back by a second connection (as a
`--resume` after kill -9 would): read-only work waits for a commit, anything a crash must not
lose is on disk before the call returns, together with everything before it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import SourcePosition
from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    CommandRan,
    HostStepFinished,
    HostStepStarted,
    TaskStarted,
)
from fleetfix.journal import Journal
from fleetfix.journal.batch import WriteQueue
from fleetfix.journal.db import DatabaseError, SqliteDatabase
from fleetfix.results import CommandResult, Status, StepResult

NEVER = 3600.0
"""A flush interval no test reaches: only the rule under test commits."""
SMI = CommandResult(
    "nvidia-smi -q -x", 0, "<nvidia_smi_log>" + "x" * 9000 + "</nvidia_smi_log>", ""
)


def on_disk(path: Path, sql: str = "SELECT type FROM events ORDER BY id") -> list[Any]:
    """Rows through a second connection: what a new process would find after kill -9."""
    with closing(sqlite3.connect(path)) as db:
        return [row[0] if len(row) == 1 else row for row in db.execute(sql)]


def probe_step(host: str, line: int) -> list[Any]:
    """The events of one read-only probe step: start, its command, its verdict with facts."""
    name = f"probe nvidia_smi {line}"
    data = {"cmd": SMI.command, "rc": 0, "stdout": SMI.stdout, "stderr": ""}
    data["facts"] = {"gpu_count": 8, "uuid": f"GPU-{host}-{line}"}
    result = StepResult(
        host=host, step=name, status=Status.OK, commands=(SMI,), data=data, key=f"pb.yml:{line}:7"
    )
    return [
        HostStepStarted(host=host, step=name),
        CommandRan(host=host, step=name, result=SMI),
        HostStepFinished(result=result),
    ]


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path / "j.sqlite", flush_every=NEVER)
    opened.start_run("pb.yml", [], check=False, hosts=2)
    yield opened
    opened.close()


async def test_read_only_work_waits_for_a_commit(journal: Journal) -> None:
    for event in probe_step("gpu001", 3):
        journal(event)
    assert on_disk(journal.path) == []  # queued: three rows and three events cost no commit
    journal.flush()
    assert on_disk(journal.path) == ["HostStepStarted", "CommandRan", "HostStepFinished"]


async def test_an_intent_is_on_disk_before_the_call_returns_with_everything_before_it(
    journal: Journal,
) -> None:
    for event in probe_step("gpu001", 3) + probe_step("gpu002", 3):
        journal(event)
    journal(
        ActionStarted(
            host="gpu002", step="reboot", key="pb.yml:9:7", action="reboot", disruptive=True
        )
    )
    actions = "SELECT host, action, state FROM actions"
    assert on_disk(journal.path, actions) == [("gpu002", "reboot", "started")]
    # The file is a prefix of the run: nothing queued before the intent is missing.
    assert on_disk(journal.path) == ["HostStepStarted", "CommandRan", "HostStepFinished"] * 2 + [
        "ActionStarted"
    ]
    assert on_disk(journal.path, "SELECT count(*) FROM steps") == [2]


async def test_an_action_outcome_and_its_verdict_are_on_disk_at_once(journal: Journal) -> None:
    key = "pb.yml:9:7"
    journal(ActionStarted(host="gpu001", step="drain", key=key, action="slurm_drain"))
    journal(ActionTaken(host="gpu001", step="drain", key=key, action="slurm_drain", failed=False))
    assert on_disk(journal.path, "SELECT state FROM actions") == ["ok"]
    # The step that acted: a resumed run must replay its verdict, not settle the action again.
    verdict = StepResult(host="gpu001", step="drain", status=Status.CHANGED, changed=True, key=key)
    journal(HostStepFinished(result=verdict))
    assert on_disk(journal.path, "SELECT status FROM steps") == ["changed"]


async def test_a_shell_verdict_is_on_disk_at_once(journal: Journal) -> None:
    ran = CommandResult("systemctl restart foo", 0, "", "")
    result = StepResult(
        host="gpu001",
        step="restart",
        status=Status.CHANGED,
        commands=(ran,),
        data={"cmd": ran.command, "rc": 0, "stdout": "", "stderr": ""},
    )
    journal(HostStepFinished(result=result))
    # The journal cannot tell it only read: a resume replays it rather than running it again.
    assert on_disk(journal.path, "SELECT step FROM steps") == ["restart"]


async def test_a_step_banner_is_on_disk_at_once(journal: Journal) -> None:
    journal(probe_step("gpu001", 3)[0])
    journal(TaskStarted(name="reboot", position=SourcePosition("pb.yml", 9, 7)))
    assert on_disk(journal.path) == ["HostStepStarted", "TaskStarted"]


async def test_queued_rows_are_committed_on_close(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite", flush_every=NEVER)
    run_id = journal.start_run("pb.yml", [], check=False, hosts=1)
    for event in probe_step("gpu001", 3):
        journal(event)
    assert on_disk(journal.path) == []
    journal.close()
    assert on_disk(journal.path) == ["HostStepStarted", "CommandRan", "HostStepFinished"]
    reopened = Journal(tmp_path / "j.sqlite")
    step = reopened.resume_state(run_id).steps[("gpu001", "pb.yml:3:7")]
    assert step.data["facts"] == {"gpu_count": 8, "uuid": "GPU-gpu001-3"}
    reopened.close()


async def test_the_timer_commits_and_never_fires_after_close(tmp_path: Path) -> None:
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
    journal = Journal(tmp_path / "j.sqlite", flush_every=0.0)
    journal.start_run("pb.yml", [], check=False, hosts=1)
    journal(probe_step("gpu001", 3)[0])
    assert on_disk(journal.path) == []  # the timer commits it, not the call
    for _ in range(100):
        if on_disk(journal.path):
            break
        await asyncio.sleep(0)  # let the event loop run its timer
    assert on_disk(journal.path) == ["HostStepStarted"]

    journal(probe_step("gpu001", 3)[1])
    assert journal.commit_scheduled
    journal.close()
    assert not journal.commit_scheduled
    for _ in range(10):
        await asyncio.sleep(0)
    assert errors == []
    assert on_disk(journal.path) == ["HostStepStarted", "CommandRan"]


def test_without_an_event_loop_each_event_is_committed(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite", flush_every=NEVER)
    journal.start_run("pb.yml", [], check=False, hosts=1)
    journal(probe_step("gpu001", 3)[0])
    assert on_disk(journal.path) == ["HostStepStarted"]  # no timer to bound the wait
    journal.close()


async def test_a_full_queue_commits_without_the_timer(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite", flush_every=NEVER, flush_rows=6)
    journal.start_run("pb.yml", [], check=False, hosts=2)
    for event in probe_step("gpu001", 3):  # five writes: two rows and three events
        journal(event)
    assert on_disk(journal.path) == []
    journal(probe_step("gpu002", 3)[0])
    assert len(on_disk(journal.path)) == 4
    journal.close()


def test_a_failed_commit_loses_its_batch_whole_and_fails_every_later_write(
    tmp_path: Path,
) -> None:
    db = SqliteDatabase(tmp_path / "q.sqlite")
    db.execute("CREATE TABLE t (v TEXT)")
    queue = WriteQueue(db)
    queue.add(lambda conn, _made: conn.insert("INSERT INTO t VALUES ('first')", ()))
    queue.add(lambda conn, _made: conn.insert("INSERT INTO missing VALUES (1)", ()))
    with pytest.raises(DatabaseError, match="missing"):
        queue.flush()
    assert db.execute("SELECT count(*) FROM t").fetchone() == (0,)  # rolled back whole
    # Committing a later write would leave a gap in the run: it fails instead.
    with pytest.raises(DatabaseError, match="missing"):
        queue.add(lambda conn, _made: conn.insert("INSERT INTO t VALUES ('later')", ()))
    db.close()


async def test_facts_and_output_are_stored_once(journal: Journal) -> None:
    for event in probe_step("gpu001", 3):
        journal(event)
    journal.flush()
    bodies = on_disk(journal.path, "SELECT body FROM events")
    assert not [b for b in bodies if "GPU-gpu001-3" in b or "nvidia_smi_log" in b]
    (data,) = on_disk(journal.path, "SELECT data FROM steps")
    assert "nvidia_smi_log" not in str(data)  # the output is its command row's
    (stdout,) = on_disk(journal.path, "SELECT stdout FROM commands")
    assert stdout.startswith("<nvidia_smi_log>") and stdout.endswith("</nvidia_smi_log>")
    # Read back, each event has what it had, from the rows it refers to.
    events = list(journal.events(journal.run_id or ""))
    finished = events[-1]
    assert isinstance(finished, HostStepFinished)
    assert finished.result.data["facts"]["uuid"] == "GPU-gpu001-3"
    assert finished.result.data["stdout"] == stdout
    assert finished.result.data["cmd"] == SMI.command
    ran = events[1]
    assert isinstance(ran, CommandRan) and ran.result.command == SMI.command
