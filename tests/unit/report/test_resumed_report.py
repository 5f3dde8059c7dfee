"""A resumed run's reports cover the whole run, and `fleetfix report RUN` gives them again.

Through the real journal: a first attempt drains and reboots gpu001 and is killed in gpu002's
reboot step (no RunFinished); `--resume` reopens the same run id, replays, settles gpu002's
reboot and finishes. The live report of the resumed run (its collector fed the journal first,
as `run_collector` does) and the report rebuilt from the journal alone both list the drain and
the reboots done before the interruption, once each, and the resumed attempt's verdicts.
"""

from __future__ import annotations

from pathlib import Path

from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    Event,
    HostStepFinished,
    HostStepStarted,
    RunFinished,
    RunStarted,
)
from fleetfix.journal import Journal
from fleetfix.report.collect import run_collector
from fleetfix.report.model import Report
from fleetfix.results import HostStats, RunResult, Status, StepResult
from fleetfix.verdicts import Verdict, VerdictKind

HOSTS = ("gpu001", "gpu002")
PLACES = {h: {"rack": "r01", "leaf": "leaf-01", "spine": "spine-01"} for h in HOSTS}
T0 = 1_714_532_400.0


def acted(host: str, step: str, action: str, at: float, *, verdict: bool = True) -> list[Event]:
    """A step that takes one action, as the engine emits it (intent, outcome, verdict)."""
    events: list[Event] = [
        HostStepStarted(host=host, step=step, at=at),
        ActionStarted(host=host, step=step, key=step, action=action, at=at + 0.1),
        ActionTaken(host=host, step=step, key=step, action=action, failed=False, at=at + 0.2),
    ]
    if verdict:
        result = StepResult(host, step, Status.CHANGED, changed=True)
        events.append(HostStepFinished(result=result, at=at + 0.3))
    return events


def first_attempt() -> list[Event]:
    """gpu001 drained and rebooted; gpu002 drained, killed after its reboot's outcome."""
    return [
        RunStarted(playbook="xid79.yml", hosts=HOSTS, check=False, topology=PLACES, at=T0),
        *acted("gpu001", "drain", "slurm_drain", T0 + 1),
        *acted("gpu002", "drain", "slurm_drain", T0 + 2),
        *acted("gpu001", "reboot", "reboot", T0 + 3),
        *acted("gpu002", "reboot", "reboot", T0 + 4, verdict=False),
    ]


def resumed_attempt() -> list[Event]:
    """Replays the finished steps, settles gpu002's reboot (its ActionTaken again), resumes
    both nodes and judges them."""
    at = T0 + 100
    replayed = [
        HostStepFinished(result=StepResult(h, s, Status.CHANGED, changed=True), at=at)
        for h in HOSTS
        for s in ("drain", "reboot")
        if (h, s) != ("gpu002", "reboot")
    ]
    stats = {h: HostStats(changed=3) for h in HOSTS}
    done = ("slurm_drain", "reboot", "slurm_resume")
    verdicts = {h: Verdict(h, VerdictKind.FIXED, "repaired by reboot", actions=done) for h in HOSTS}
    return [
        RunStarted(playbook="xid79.yml", hosts=HOSTS, check=False, topology=PLACES, at=at),
        *replayed,
        *acted("gpu002", "reboot", "reboot", at + 1),
        *acted("gpu001", "resume", "slurm_resume", at + 2),
        *acted("gpu002", "resume", "slurm_resume", at + 3),
        RunFinished(result=RunResult(stats=stats, verdicts=verdicts), at=at + 4),
    ]


def journal_both(path: Path) -> str:
    run_id = journal_first(path)
    journal_resumed(path, run_id)
    return run_id


def journal_first(path: Path) -> str:
    first = Journal(path)
    run_id = first.start_run("xid79.yml", ["run"], check=False, hosts=2)
    first.acquire_leases(list(HOSTS))
    for event in first_attempt():
        first(event)
    first.flush()
    first.close()  # the controller died here: no RunFinished, no finish_run
    return run_id


def journal_resumed(path: Path, run_id: str) -> None:
    resumed = Journal(path)
    resumed.start_run("xid79.yml", ["run"], check=False, hosts=2, run_id=run_id)
    resumed.acquire_leases(list(HOSTS))
    for event in resumed_attempt():
        resumed(event)
    resumed.finish_run(2)
    resumed.close()


def actions(report: Report) -> list[tuple[str, str | None, str]]:
    return [(a.host, a.action, a.outcome) for a in report.actions]


EXPECTED = [
    ("gpu001", "slurm_drain", "done"),
    ("gpu002", "slurm_drain", "done"),
    ("gpu001", "reboot", "done"),
    ("gpu002", "reboot", "done"),  # settled by the resumed run: one record, not two
    ("gpu001", "slurm_resume", "done"),
    ("gpu002", "slurm_resume", "done"),
]


def test_the_report_rebuilt_from_the_journal_covers_the_whole_run(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    run_id = journal_both(path)
    journal = Journal(path)
    try:
        collector = run_collector(run_id, journaled=journal.events(run_id))
    finally:
        journal.close()
    report = collector.model()
    assert actions(report) == EXPECTED
    assert [a.host for a in collector.earlier_actions] == ["gpu001", "gpu002", "gpu001", "gpu002"]
    assert {h.status for h in report.hosts} == {VerdictKind.FIXED}
    assert report.started == T0  # the whole run, from its first attempt
    assert report.outcome == "ok" and not report.interrupted
    assert report.host("gpu002").domains == PLACES["gpu002"]  # the journaled topology
    # The replayed steps are the resumed attempt's: each step once, not the first one's too.
    assert [s.step for s in report.host("gpu001").steps] == ["drain", "reboot", "resume"]


def test_the_live_report_of_the_resumed_run_is_the_same(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    run_id = journal_first(path)
    journal = Journal(path)
    try:  # as `fleetfix run --resume RUN` builds its collector, before its own events
        live = run_collector(run_id, journaled=journal.events(run_id))
    finally:
        journal.close()
    for event in resumed_attempt():
        live(event)
    journal_resumed(path, run_id)
    journal = Journal(path)
    try:
        replayed = run_collector(run_id, journaled=journal.events(run_id)).model()
    finally:
        journal.close()
    assert live.model() == replayed
    assert actions(live.model()) == EXPECTED


def test_a_run_never_resumed_is_one_attempt() -> None:
    collector = run_collector("r", journaled=first_attempt())
    report = collector.model()
    assert collector.earlier_actions == ()
    assert len(report.actions) == 4
    assert {h.status for h in report.hosts} == {VerdictKind.INTERRUPTED}
