"""`--resume` after a crash or a Ctrl-C ends where a clean run ends, whatever the instant.

Property-style, on the xid79 lab: a clean reference run first; then, for each kill point, a
fresh lab and journal, `fleetfix run` stopped by a signal the moment the journal holds a given
event (the Nth TASK banner, the intent of the Nth reboot, ...), and `--resume RUN_ID`. The
outcome must be the reference's: every node's boot count and Slurm record, the set of
(host, action) the journal says were carried out, one delivered reboot per rebooted node, and
an intent in the journal for every reboot the lab saw. A second --resume of the finished run is
refused (exit 5) and changes nothing; a --resume while the first controller lives is refused
(exit 6) and changes nothing.

The cases are independent (one lab and one journal each), so they run four at a time in
threads as soon as the module starts; each test waits for its own case. A lab's reboot takes
0.3 s.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import Run, fleetfix_run, nodes, run_argv, write_inventory
from tests.e2e.safety_support import (
    ActionRow,
    action_rows,
    count_events,
    delivered,
    interrupt,
    only_run_id,
    query,
    reboots,
    slurm_view,
    started_run,
    unjournaled,
    wait_for_events,
)
from tests.lab.support import running_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PLAYBOOK = "xid79.yml"
REBOOT_TIME = 0.3
WORKERS = 4
REFERENCE_TASKS = 60
"""TASK banners (TaskStarted events) in a clean xid79 run on the xid79 lab: 9 batches."""
INTERRUPTED = 99
FINISHED_REFUSED = 5
LIVE_REFUSED = 6
REBOOT = '"action": "reboot"'
DRAIN = '"action": "slurm_drain"'
REBOOT_VERDICT = '"step": "reboot (restart bare metal)"'


@dataclass(frozen=True, slots=True)
class KillPoint:
    """Stop the controller with `signum` once the journal holds `nth` `kind` events (whose
    body contains `contains`); `task` is the banner the Nth TaskStarted must carry."""

    id: str
    signum: int
    kind: str
    nth: int
    contains: str | None = None
    task: str | None = None


def _task(nth: int, name: str) -> KillPoint:
    return KillPoint(f"kill-task{nth:02d}", signal.SIGKILL, "TaskStarted", nth, task=name)


XID_LOG, DECIDE, SKIP = "read the kernel Xid log", "decide", "nothing to do on this node"
BLOCK, DRAIN_STEP = "remediate Xid 79", "drain in Slurm and wait for jobs to leave"
EVIDENCE, REBOOT_STEP = "keep evidence", "reboot (restart bare metal)"
RESUME_STEP, RMA_STEP = "return to service", "leave drained for RMA, saying why"

# kill -9 at 16 of the 60 TASK banners (all 60 take ~8 minutes): every banner of the first
# batch that remediates (gpu003), the first canary, the second reboot (gpu011), the batch whose
# fix fails into the rescue (gpu007) and the last batch (a kill after the last banner may land
# after the run is journaled finished: nothing left to resume). The rescue's second step
# ("mark the node failed") gets no banner of its own (see BatchRun.announce), so no index.
KILL_POINTS = (
    _task(1, XID_LOG),
    _task(11, XID_LOG),
    _task(12, "read nvidia-smi"),
    _task(13, "read the Slurm node"),
    _task(14, DECIDE),
    _task(15, SKIP),
    _task(16, BLOCK),
    _task(17, DRAIN_STEP),
    _task(18, EVIDENCE),
    _task(19, REBOOT_STEP),
    _task(20, RESUME_STEP),
    _task(29, REBOOT_STEP),
    _task(47, DRAIN_STEP),
    _task(49, REBOOT_STEP),
    _task(50, RMA_STEP),
    _task(56, XID_LOG),
    KillPoint("kill-drain-intent1", signal.SIGKILL, "ActionStarted", 1, DRAIN),
    KillPoint("kill-reboot-intent1", signal.SIGKILL, "ActionStarted", 1, REBOOT),
    KillPoint("kill-reboot-intent2", signal.SIGKILL, "ActionStarted", 2, REBOOT),
    KillPoint("kill-reboot-intent3", signal.SIGKILL, "ActionStarted", 3, REBOOT),
    KillPoint("kill-reboot-done1", signal.SIGKILL, "ActionTaken", 1, REBOOT),
    KillPoint("kill-reboot-verdict1", signal.SIGKILL, "HostStepFinished", 1, REBOOT_VERDICT),
    KillPoint("int-mid-drain", signal.SIGINT, "ActionStarted", 1, DRAIN),
    KillPoint("int-reboot-intent", signal.SIGINT, "ActionStarted", 1, REBOOT),
    KillPoint("int-verifying", signal.SIGINT, "ActionTaken", 1, REBOOT),
    KillPoint("term-mid-drain", signal.SIGTERM, "ActionStarted", 2, DRAIN),
    KillPoint("term-reboot-intent", signal.SIGTERM, "ActionStarted", 2, REBOOT),
    KillPoint("term-verifying", signal.SIGTERM, "ActionTaken", 2, REBOOT),
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run (or an interrupted run and its resume) left: lab truth, audit, journal."""

    run: Run
    truth: dict[str, dict[str, Any]]
    audit: dict[str, list[dict[str, Any]]]
    rows: list[ActionRow]
    tasks: list[str]

    @property
    def view(self) -> dict[str, dict[str, Any]]:
        return slurm_view(self.truth)


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A case: the first controller's exit code and output, then its resume's outcome, and
    what a second --resume of the finished run did."""

    first_rc: int
    first_output: str
    journaled_outcome: int | None
    """The first run's outcome in the journal: None after a kill -9, 99 after a signal."""
    task_at_kill: str | None
    resumed: Outcome
    again: Run
    truth_after_again: dict[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class LiveResume:
    refused: Run
    first_alive_after: bool
    first_rc: int
    first_output: str
    outcome: Outcome
    run_started: int


def _outcome(run: Run, lab: Any, journal: Path) -> Outcome:
    tasks = [
        str(row[0])
        for row in query(
            journal,
            "SELECT json_extract(body, '$.name') FROM events WHERE type='TaskStarted' ORDER BY id",
        )
    ]
    return Outcome(run, nodes(lab.truth()), lab.audit(), action_rows(journal), tasks)


def _reference(base: Path) -> Outcome:
    with running_lab("xid79", base / "lab", reboot_time=REBOOT_TIME) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        run = fleetfix_run(PLAYBOOK, inventory, base, timeout=300)
        return _outcome(run, lab, base / "j.sqlite")


def _task_at(journal: Path, nth: int) -> str | None:
    rows = query(
        journal,
        "SELECT json_extract(body, '$.name') FROM events WHERE type='TaskStarted'"
        " ORDER BY id LIMIT 1 OFFSET ?",
        (nth - 1,),
    )
    return str(rows[0][0]) if rows else None


def _interrupted(point: KillPoint, base: Path) -> Interrupted:
    with running_lab("xid79", base / "lab", reboot_time=REBOOT_TIME) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        journal = base / "j.sqlite"
        with started_run(run_argv(PLAYBOOK, inventory, journal), base, "first") as first:
            wait_for_events(journal, first, point.kind, point.nth, point.contains)
            first_rc = interrupt(first, point.signum)
            first_output = first.output()
        task = _task_at(journal, point.nth) if point.kind == "TaskStarted" else None
        run_id = only_run_id(journal)
        journaled = query(journal, "SELECT outcome FROM runs WHERE run_id=?", (run_id,))[0][0]
        resumed = fleetfix_run(PLAYBOOK, inventory, base, "--resume", run_id, timeout=300)
        outcome = _outcome(resumed, lab, journal)
        again = fleetfix_run(PLAYBOOK, inventory, base, "--resume", run_id, timeout=120)
        truth_again = nodes(lab.truth())
    return Interrupted(first_rc, first_output, journaled, task, outcome, again, truth_again)


def _live_resume(base: Path) -> LiveResume:
    """A --resume of a run whose controller still lives, from a second process."""
    with running_lab("xid79", base / "lab", reboot_time=REBOOT_TIME) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        journal = base / "j.sqlite"
        with started_run(run_argv(PLAYBOOK, inventory, journal), base, "first") as first:
            wait_for_events(journal, first, "TaskStarted", 1)
            run_id = only_run_id(journal)
            refused = fleetfix_run(PLAYBOOK, inventory, base, "--resume", run_id, timeout=120)
            alive = first.process.poll() is None
            first_rc = first.wait(300)
            first_output = first.output()
        run = Run(first_rc, first_output, "")
        started = count_events(journal, "RunStarted")
        return LiveResume(
            refused, alive, first_rc, first_output, _outcome(run, lab, journal), started
        )


@dataclass
class Cases:
    reference: Future[Outcome]
    interrupted: dict[str, Future[Interrupted]]
    live: Future[LiveResume]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cases]:
    """Every case started at once (WORKERS at a time); each test waits for its own."""
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="resume-case") as pool:
        reference = pool.submit(_reference, tmp_path_factory.mktemp("reference"))
        interrupted = {
            point.id: pool.submit(_interrupted, point, tmp_path_factory.mktemp(point.id))
            for point in KILL_POINTS
        }
        live = pool.submit(_live_resume, tmp_path_factory.mktemp("live"))
        try:
            yield Cases(reference, interrupted, live)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _same_outcome(outcome: Outcome, reference: Outcome, label: str) -> None:
    """The invariants every interrupted-and-resumed run must meet against the reference."""
    context = f"{label}\n{outcome.run.output[-4000:]}"
    assert outcome.run.returncode == reference.run.returncode, context
    assert outcome.view == reference.view, context
    assert delivered(outcome.rows) == delivered(reference.rows), context
    open_rows = [row for row in outcome.rows if row.state not in ("ok", "failed", "undelivered")]
    assert open_rows == [], f"intents never settled: {open_rows}\n{context}"
    reboot_intents = Counter(
        row.host for row in outcome.rows if row.action == "reboot" and row.state != "undelivered"
    )
    twice = {host for host, count in reboot_intents.items() if count > 1}
    assert twice == set(), f"two delivered reboot intents: {outcome.rows}\n{context}"
    lab_reboots = {host: n for host, n in reboots(outcome.audit).items() if n}
    assert lab_reboots == {h: n for h, n in reboots(reference.audit).items() if n}, context
    assert unjournaled(outcome.audit, outcome.rows) == [], context


def test_reference_run(cases: Cases) -> None:
    """The clean run the others are held against: what tests/e2e/test_playbooks_lab.py
    shows, and the TASK banners the kill points name."""
    reference = cases.reference.result()
    assert reference.run.returncode == 2, reference.run.output
    view = reference.view
    assert {n for n, v in view.items() if v["boots"] == 2} == {"gpu003", "gpu007", "gpu011"}
    assert view["gpu007"]["drain"] and "needs RMA" in str(view["gpu007"]["reason"])
    assert not view["gpu003"]["drain"] and not view["gpu011"]["drain"]
    assert view["gpu014"]["reason"] == "bad DIMM B2, ticket OPS-1187"
    assert len(reference.tasks) == REFERENCE_TASKS, reference.tasks
    for point in KILL_POINTS:
        if point.task is not None:
            assert reference.tasks[point.nth - 1] == point.task, point
    assert unjournaled(reference.audit, reference.rows) == []
    assert {row.state for row in reference.rows} <= {"ok", "failed"}


@pytest.mark.parametrize("point", KILL_POINTS, ids=[p.id for p in KILL_POINTS])
def test_resume_after_a_stop_ends_like_a_clean_run(cases: Cases, point: KillPoint) -> None:
    case = cases.interrupted[point.id].result()
    reference = cases.reference.result()
    expected_rc = -signal.SIGKILL if point.signum == signal.SIGKILL else INTERRUPTED
    assert case.first_rc == expected_rc, case.first_output
    expected_outcome = None if point.signum == signal.SIGKILL else INTERRUPTED
    assert case.journaled_outcome == expected_outcome, "the stop came after the run finished"
    if point.task is not None:
        assert case.task_at_kill == point.task
    if point.signum != signal.SIGKILL:
        assert "run id: " in case.first_output, case.first_output
    _same_outcome(case.resumed, reference, f"resumed after {point.id}")

    assert case.again.returncode == FINISHED_REFUSED, case.again.output
    assert "finished" in case.again.stderr, case.again.output
    assert case.truth_after_again == case.resumed.truth, "a refused resume changed the lab"


def test_resume_of_a_live_run_is_refused_and_changes_nothing(cases: Cases) -> None:
    live = cases.live.result()
    reference = cases.reference.result()
    assert live.first_alive_after, "the first run ended before the refused resume: proves nothing"
    assert live.refused.returncode == LIVE_REFUSED, live.refused.output
    assert "still running" in live.refused.stderr, live.refused.output
    assert "run id:" not in live.refused.stdout, live.refused.output
    assert live.run_started == 1, "the refused resume started the run a second time"
    _same_outcome(live.outcome, reference, "first run, after a refused live resume")
