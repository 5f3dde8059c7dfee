"""Batched journal writes on both backends, read back by a second connection (as a `--resume`
after kill -9 would): read-only work waits for a commit, anything a crash must not lose is
committed before the call returns, together with everything before it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

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
from fleetfix.journal.batch import Write, WriteQueue
from fleetfix.journal.db import Database, DatabaseError, open_database
from fleetfix.journal.store import JournalError
from fleetfix.results import CommandResult, Status, StepResult

if TYPE_CHECKING:
    from tests.unit.journal.conftest import Backend

NEVER = 3600.0
"""A flush interval no test reaches: only the rule under test commits."""
SMI = CommandResult(
    "nvidia-smi -q -x", 0, "<nvidia_smi_log>" + "x" * 9000 + "</nvidia_smi_log>", ""
)
EVENT_TYPES = "SELECT type FROM events ORDER BY id"
PROBE_EVENTS = ["HostStepStarted", "CommandRan", "HostStepFinished"]


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
def journal(backend: Backend) -> Journal:
    opened = backend.open(flush_every=NEVER)
    opened.start_run("pb.yml", [], check=False, hosts=2)
    return opened


async def test_read_only_work_waits_for_a_commit(journal: Journal, backend: Backend) -> None:
    for event in probe_step("gpu001", 3):
        journal(event)
    assert backend.committed(EVENT_TYPES) == []  # queued: 3 rows and 3 events cost no commit
    journal.flush()
    assert backend.committed(EVENT_TYPES) == PROBE_EVENTS


async def test_an_intent_is_on_disk_before_the_call_returns_with_everything_before_it(
    journal: Journal, backend: Backend
) -> None:
    for event in probe_step("gpu001", 3) + probe_step("gpu002", 3):
        journal(event)
    journal(
        ActionStarted(
            host="gpu002", step="reboot", key="pb.yml:9:7", action="reboot", disruptive=True
        )
    )
    actions = "SELECT host, action, state FROM actions"
    assert backend.committed(actions) == [("gpu002", "reboot", "started")]
    # The database holds a prefix of the run: nothing queued before the intent is missing.
    assert backend.committed(EVENT_TYPES) == [*PROBE_EVENTS, *PROBE_EVENTS, "ActionStarted"]
    assert backend.committed("SELECT count(*) FROM steps") == [2]


async def test_an_action_outcome_and_its_verdict_are_on_disk_at_once(
    journal: Journal, backend: Backend
) -> None:
    key = "pb.yml:9:7"
    journal(ActionStarted(host="gpu001", step="drain", key=key, action="slurm_drain"))
    journal(ActionTaken(host="gpu001", step="drain", key=key, action="slurm_drain", failed=False))
    assert backend.committed("SELECT state FROM actions") == ["ok"]
    # The step that acted: a resumed run must replay its verdict, not settle the action again.
    verdict = StepResult(host="gpu001", step="drain", status=Status.CHANGED, changed=True, key=key)
    journal(HostStepFinished(result=verdict))
    assert backend.committed("SELECT status FROM steps") == ["changed"]


async def test_a_shell_verdict_is_on_disk_at_once(journal: Journal, backend: Backend) -> None:
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
    assert backend.committed("SELECT step FROM steps") == ["restart"]


async def test_a_step_banner_is_on_disk_at_once(journal: Journal, backend: Backend) -> None:
    journal(probe_step("gpu001", 3)[0])
    journal(TaskStarted(name="reboot", position=SourcePosition("pb.yml", 9, 7)))
    assert backend.committed(EVENT_TYPES) == ["HostStepStarted", "TaskStarted"]


async def test_queued_rows_are_committed_on_close(backend: Backend) -> None:
    journal = backend.open(flush_every=NEVER)
    run_id = journal.start_run("pb.yml", [], check=False, hosts=1)
    for event in probe_step("gpu001", 3):
        journal(event)
    assert backend.committed(EVENT_TYPES) == []
    journal.close()
    assert backend.committed(EVENT_TYPES) == PROBE_EVENTS
    reopened = backend.open()
    step = reopened.resume_state(run_id).steps[("gpu001", "pb.yml:3:7")]
    assert step.data["facts"] == {"gpu_count": 8, "uuid": "GPU-gpu001-3"}


async def test_the_timer_commits_and_never_fires_after_close(backend: Backend) -> None:
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
    journal = backend.open(flush_every=0.0)
    journal.start_run("pb.yml", [], check=False, hosts=1)
    journal(probe_step("gpu001", 3)[0])
    assert backend.committed(EVENT_TYPES) == []  # the timer commits it, not the call
    for _ in range(100):
        if backend.committed(EVENT_TYPES):
            break
        await asyncio.sleep(0)  # let the event loop run its timer
    assert backend.committed(EVENT_TYPES) == ["HostStepStarted"]

    journal(probe_step("gpu001", 3)[1])
    assert journal.commit_scheduled
    journal.close()
    assert not journal.commit_scheduled
    for _ in range(10):
        await asyncio.sleep(0)
    assert errors == []
    assert backend.committed(EVENT_TYPES) == ["HostStepStarted", "CommandRan"]


def test_without_an_event_loop_each_event_is_committed(backend: Backend) -> None:
    journal = backend.open(flush_every=NEVER)
    journal.start_run("pb.yml", [], check=False, hosts=1)
    journal(probe_step("gpu001", 3)[0])
    assert backend.committed(EVENT_TYPES) == ["HostStepStarted"]  # no timer to bound the wait


async def test_a_full_queue_commits_without_the_timer(backend: Backend) -> None:
    journal = backend.open(flush_every=NEVER, flush_rows=6)
    journal.start_run("pb.yml", [], check=False, hosts=2)
    for event in probe_step("gpu001", 3):  # five writes: two rows and three events
        journal(event)
    assert backend.committed(EVENT_TYPES) == []
    journal(probe_step("gpu002", 3)[0])
    assert len(backend.committed(EVENT_TYPES)) == 4


def insert_into(table: str, value: str) -> Write:
    def write(db: Database, _made: int | None) -> int | None:
        db.execute(f"INSERT INTO {table} VALUES (?)", (value,))
        return None

    return write


@pytest.fixture
def database(backend: Backend) -> Iterator[Database]:
    """The journal's database as the journal's WriteQueue sees it, with a table `t`."""
    db = open_database(backend.target)
    db.execute("CREATE TABLE t (v TEXT)")
    yield db
    db.close()


def test_a_failed_commit_loses_its_batch_whole_and_fails_every_later_write(
    database: Database,
) -> None:
    queue = WriteQueue(database)
    queue.add(insert_into("t", "first"))
    queue.add(insert_into("missing", "1"))  # the database refuses it
    with pytest.raises(DatabaseError, match="missing"):
        queue.flush()
    assert database.execute("SELECT count(*) FROM t").fetchone()[0] == 0  # rolled back whole
    assert not database.in_transaction
    # Committing a later write would leave a gap in the run: it fails instead.
    with pytest.raises(DatabaseError, match="missing"):
        queue.add(insert_into("t", "later"))


@pytest.mark.parametrize("journal_target", ["postgresql"], indirect=True)
async def test_a_batch_whose_connection_is_lost_is_lost_whole_and_nothing_after_it_is_written(
    journal: Journal, backend: Backend
) -> None:
    """PostgreSQL only: a SQLite journal is a local file, there is no connection to lose (its
    refused statement is the test above, on both backends)."""
    for event in probe_step("gpu001", 3):
        journal(event)
    assert backend.committed(EVENT_TYPES) == []  # queued
    assert journal.run_id is not None
    backend.kill_controller(journal.run_id)  # the server ends the session: the network is gone
    with pytest.raises(JournalError, match="journal postgresql://"):
        journal.flush()
    with pytest.raises(JournalError):
        journal(ActionStarted(host="gpu001", step="reboot", key="pb.yml:9:7", action="reboot"))
    assert backend.committed(EVENT_TYPES) == []
    assert backend.committed("SELECT count(*) FROM actions") == [0]


async def test_facts_and_output_are_stored_once(journal: Journal, backend: Backend) -> None:
    for event in probe_step("gpu001", 3):
        journal(event)
    journal.flush()
    bodies = backend.committed("SELECT body FROM events")
    assert not [b for b in bodies if "GPU-gpu001-3" in b or "nvidia_smi_log" in b]
    (data,) = backend.committed("SELECT data FROM steps")
    assert b"nvidia_smi_log" not in bytes(data)  # the output is its command row's
    (stdout,) = backend.committed("SELECT stdout FROM commands")
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
