"""RunMetrics: what a run's events add up to, phase by phase, read back from the text."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from fleetfix.engine.remediate import HOLD_KEY as ENGINE_HOLD_KEY
from fleetfix.engine.safety import Safety
from fleetfix.errors import SourcePosition
from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    Event,
    EventBus,
    FindingRaised,
    HostBackInService,
    HostLeft,
    HostOutOfService,
    HostStepFinished,
    HostStepStarted,
    PlayStarted,
    RunFinished,
    RunStarted,
    SafetyStop,
)
from fleetfix.journal import Journal
from fleetfix.metrics.exposition import render
from fleetfix.metrics.run import HOLD_KEY, RunMetrics, hold_reason
from fleetfix.results import HostStats, RunResult, Status, StepResult
from fleetfix.topology import DOMAIN_KINDS
from tests.unit.metrics.promtext import MetricFamily, parse, samples, value

BUDGET_HOLD = "gpu2: slurm_drain held: repair budget reached: 1 hosts already out of service"
VERIFY_FAILED = {
    "action": "reboot",
    "failed": True,
    "msg": "reboot: verification failed: GPUs missing after reboot: 7 visible",
}
"""A rung of engine/remediate.py's ladder: the reboot ran and did not bring the GPUs back."""


def step_started(at: float, host: str, key: str) -> HostStepStarted:
    return HostStepStarted(at=at, host=host, step=key)


def step_finished(
    at: float, host: str, key: str, status: Status, data: Mapping[str, Any] | None = None
) -> HostStepFinished:
    result = StepResult(host=host, step=key, status=status, key=key, data=data or {})
    return HostStepFinished(at=at, result=result)


def action(at: float, host: str, key: str, name: str, failed: bool | None = None) -> Event:
    if failed is None:
        return ActionStarted(at=at, host=host, step=key, key=key, action=name)
    return ActionTaken(at=at, host=host, step=key, key=key, action=name, failed=failed)


def repaired_host(host: str) -> list[Event]:
    """Xid 79 on `host`: probed, drained, evidence kept, rebooted, validated, resumed."""
    return [
        step_started(101, host, "probe"),
        step_finished(102, host, "probe", Status.OK),
        step_started(110, host, "drain"),
        action(111, host, "drain", "slurm_drain"),
        HostOutOfService(at=112, host=host, domains=()),
        action(115, host, "drain", "slurm_drain", failed=False),
        step_finished(120, host, "drain", Status.CHANGED),
        action(121, host, "evidence", "collect_evidence"),
        action(122, host, "evidence", "collect_evidence", failed=False),
        step_finished(123, host, "evidence", Status.CHANGED),
        action(130, host, "reboot", "reboot"),
        action(160, host, "reboot", "reboot", failed=False),
        step_finished(190, host, "reboot", Status.CHANGED),  # after its verify probes
        action(200, host, "resume", "slurm_resume"),
        action(205, host, "resume", "slurm_resume", failed=False),
        step_finished(210, host, "resume", Status.CHANGED),
        HostBackInService(at=211, host=host),
    ]


def rma_host(host: str) -> list[Event]:
    """Drained, the reboot does not fix it, drained again for an RMA: no validate, no return."""
    return [
        step_started(101, host, "probe"),
        action(105, host, "drain", "slurm_drain"),
        HostOutOfService(at=105, host=host, domains=()),
        action(106, host, "drain", "slurm_drain", failed=False),
        step_finished(107, host, "drain", Status.CHANGED),
        action(130, host, "reboot", "reboot"),
        # The reboot's commands ran (its ActionTaken says so); its verification failed
        action(140, host, "reboot", "reboot", failed=False),
        step_finished(150, host, "reboot", Status.FAILED, {"ladder": [VERIFY_FAILED]}),
        action(151, host, "rma", "slurm_drain"),
        action(152, host, "rma", "slurm_drain", failed=False),
        step_finished(153, host, "rma", Status.CHANGED),
        HostLeft(at=154, host=host, kind="unhealthy", reason="Xid 79 still there"),
    ]


def held_host(host: str) -> list[Event]:
    data = {"held": True, HOLD_KEY: BUDGET_HOLD}
    return [
        step_started(101, host, "drain"),
        step_finished(102, host, "drain", Status.FAILED, data),
    ]


def fed(events: Iterable[Event], metrics: RunMetrics | None = None) -> RunMetrics:
    metrics = metrics or RunMetrics("/srv/playbooks/xid79.yml")
    for event in events:
        metrics(event)
    return metrics


def read(metrics: RunMetrics, now: float = 300.0, out: Mapping[str, float] | None = None) -> Any:
    return parse(render(metrics.families(now, out)))


def whole_run() -> list[Event]:
    position = SourcePosition("xid79.yml", 1, 1)
    return [
        RunStarted(
            at=100, run_id="r1", playbook="playbooks/xid79.yml", hosts=("a", "b", "c"), check=False
        ),
        PlayStarted(at=100, name="p", hosts=("a", "b", "c"), position=position),
        *repaired_host("a"),
        *rma_host("b"),
        *held_host("c"),
        FindingRaised(at=250, kind="leaf", domain="leaf-07", message="m", hosts=("b",), hold=True),
        SafetyStop(at=251, reason="max_fail_percentage 10% exceeded"),
        RunFinished(at=260, result=RunResult(holds=[BUDGET_HOLD], left={"b": "Xid 79"})),
    ]


def test_a_whole_run_adds_up() -> None:
    families = read(fed(whole_run()), out={"b": 105.0})
    base = {"playbook": "xid79.yml"}
    assert value(families, "fleetfix_run_info", **base, run_id="r1", check="false") == 1
    assert value(families, "fleetfix_run_outcome", **base) == 6  # the budget hold
    assert value(families, "fleetfix_run_in_progress", **base) == 0
    assert value(families, "fleetfix_run_started_timestamp_seconds", **base) == 100
    assert value(families, "fleetfix_run_finished_timestamp_seconds", **base) == 260
    assert value(families, "fleetfix_run_duration_seconds", **base) == 160
    assert value(families, "fleetfix_run_hosts", **base) == 3
    assert value(families, "fleetfix_actions_started_total", action="slurm_drain") == 3
    assert value(families, "fleetfix_actions_total", action="slurm_drain", outcome="ok") == 3
    assert value(families, "fleetfix_actions_total", action="reboot", outcome="ok") == 1
    assert value(families, "fleetfix_actions_total", action="reboot", outcome="failed") == 1
    assert value(families, "fleetfix_hosts_taken_out_total") == 2
    assert value(families, "fleetfix_hosts_returned_total") == 1
    assert value(families, "fleetfix_holds_total", reason="repair_budget") == 1
    assert value(families, "fleetfix_holds_total", reason="suspect_domain") == 0
    assert value(families, "fleetfix_budget_refusals_total") == 1
    assert value(families, "fleetfix_findings_total", kind="leaf", hold="true") == 1
    assert value(families, "fleetfix_safety_stops_total") == 1
    assert value(families, "fleetfix_hosts_left", kind="unhealthy") == 1
    assert value(families, "fleetfix_hosts_left", kind="deferred") == 0
    assert value(families, "fleetfix_host_steps_total", status="failed") == 2
    assert value(families, "fleetfix_hosts_out_of_service") == 1
    assert value(families, "fleetfix_host_out_of_service_seconds", host="b") == 300 - 105
    since = "fleetfix_host_out_of_service_since_timestamp_seconds"
    assert value(families, since, host="b") == 105
    assert all(
        labels["playbook"] == "xid79.yml" for f in families.values() for _, labels, _ in f.samples
    )


def phase_sum(families: dict[str, MetricFamily], phase: str) -> tuple[float, float]:
    name = "fleetfix_repair_phase_seconds"
    return value(families, f"{name}_sum", phase=phase), value(
        families, f"{name}_count", phase=phase
    )


def test_phases_follow_the_hosts_timeline() -> None:
    families = read(fed(whole_run()))
    # a: detect 101->102 and 110->111 (its own steps; 102->110 it waited for a fork),
    #    drain 111->120, fix 120->190, validate 190->200, return 200->210
    # b: detect 101->105, drain 105->107, fix 107->150; its RMA drain reopens nothing
    assert phase_sum(families, "detect") == (1 + 1 + 4, 2)
    assert phase_sum(families, "drain") == (9 + 2, 2)
    assert phase_sum(families, "fix") == (70 + 43, 2)
    assert phase_sum(families, "validate") == (10, 1)
    assert phase_sum(families, "return") == (10, 1)
    assert value(families, "fleetfix_repair_seconds_sum") == 210 - 101
    assert value(families, "fleetfix_repair_seconds_count") == 1
    assert value(families, "fleetfix_repair_phase_seconds_bucket", phase="fix", le="60") == 1
    assert value(families, "fleetfix_repair_phase_seconds_bucket", phase="fix", le="120") == 2


def test_a_fix_without_drain_or_return_is_closed_when_the_run_ends() -> None:
    events = [
        RunStarted(at=0, run_id="r", playbook="shm.yml", hosts=("a",), check=False),
        step_started(1, "a", "probe"),
        action(3, "a", "clean", "clean_shm"),
        action(4, "a", "clean", "clean_shm", failed=False),
        step_finished(6, "a", "clean", Status.CHANGED),
    ]
    metrics = fed(events)
    assert phase_sum(read(metrics), "fix") == (0, 0)  # still open: nothing observed yet
    metrics(RunFinished(at=7, result=RunResult()))
    families = read(metrics)
    assert phase_sum(families, "detect") == (2, 1)
    assert phase_sum(families, "fix") == (3, 1)
    assert phase_sum(families, "drain") == (0, 0)
    assert value(families, "fleetfix_repair_seconds_count") == 0


def test_while_the_run_goes_on_there_is_no_outcome_yet() -> None:
    metrics = fed(whole_run()[:-1])
    families = read(metrics, now=230.0)
    assert value(families, "fleetfix_run_in_progress") == 1
    assert value(families, "fleetfix_run_duration_seconds") == 130
    assert samples(families, "fleetfix_run_outcome") == []
    assert samples(families, "fleetfix_run_finished_timestamp_seconds") == []
    assert value(families, "fleetfix_holds_total", reason="repair_budget") == 1  # from the step


def test_an_interrupted_run_counts_the_action_it_started_and_never_finished() -> None:
    events = [
        RunStarted(at=0, run_id="r", playbook="xid79.yml", hosts=("a",), check=False),
        action(1, "a", "reboot", "reboot"),
        RunFinished(at=2, result=RunResult(interrupted=True)),
    ]
    families = read(fed(events))
    assert value(families, "fleetfix_run_outcome") == 99
    assert value(families, "fleetfix_actions_started_total", action="reboot") == 1
    assert samples(families, "fleetfix_actions_total") == []


def test_an_action_counts_with_its_steps_verdict_verification_included() -> None:
    """An escalation ladder: a GPU reset that did not verify, then a reboot that did."""
    ladder = [
        {"action": "gpu_reset", "failed": True, "msg": "gpu_reset: verification failed: x"},
        {"action": "reboot", "failed": False, "msg": ""},
    ]
    events = [
        RunStarted(at=0, run_id="r", playbook="xid79.yml", hosts=("a",), check=False),
        action(1, "a", "fix", "gpu_reset"),
        action(2, "a", "fix", "gpu_reset", failed=False),
        action(3, "a", "fix", "reboot"),
        action(4, "a", "fix", "reboot", failed=False),
    ]
    metrics = fed(events)
    assert samples(read(metrics), "fleetfix_actions_total") == []  # still verifying
    metrics(step_finished(5, "a", "fix", Status.CHANGED, {"ladder": ladder}))
    finished = {
        (labels["action"], labels["outcome"]): count
        for labels, count in samples(read(metrics), "fleetfix_actions_total")
    }
    assert finished == {("gpu_reset", "failed"): 1, ("reboot", "ok"): 1}


def test_an_action_whose_step_never_ended_counts_as_it_ended_when_the_run_does() -> None:
    events = [
        RunStarted(at=0, run_id="r", playbook="xid79.yml", hosts=("a",), check=False),
        action(1, "a", "reboot", "reboot"),
        action(2, "a", "reboot", "reboot", failed=False),
        RunFinished(at=3, result=RunResult(interrupted=True)),
    ]
    families = read(fed(events))
    assert value(families, "fleetfix_actions_total", action="reboot", outcome="ok") == 1


def test_every_finding_kind_has_a_series_from_zero() -> None:
    families = read(fed(whole_run()))
    found = {
        (labels["kind"], labels["hold"]): count
        for labels, count in samples(families, "fleetfix_findings_total")
    }
    assert set(found) == {(kind, hold) for kind in DOMAIN_KINDS for hold in ("false", "true")}
    assert {key: count for key, count in found.items() if count} == {("leaf", "true"): 1}


def test_check_mode_changes_exit_only_when_asked() -> None:
    result = RunResult(stats={"a": HostStats(ok=1, changed=1)})
    events: list[Event] = [
        RunStarted(at=0, run_id="r", playbook="xid79.yml", hosts=("a",), check=True),
        RunFinished(at=1, result=result),
    ]
    assert value(read(fed(events)), "fleetfix_run_outcome") == 0
    asked = fed(events, RunMetrics("xid79.yml", check_changes_exit=True))
    families = read(asked)
    assert value(families, "fleetfix_run_outcome") == 7
    assert value(families, "fleetfix_run_info", check="true") == 1


def test_holds_at_the_end_are_the_runs_own_list_plus_the_attempt_gates() -> None:
    cap = "x: reboot held: max_unavailable_per reached in rack r1"
    attempts = "reboot already ran 2 times on this host in the last 7.0d (max_attempts 2)"
    events = [
        RunStarted(at=0, run_id="r", playbook="xid79.yml", hosts=("x", "y"), check=False),
        step_finished(1, "y", "k", Status.FAILED, {"held": True, "msg": attempts}),
        RunFinished(at=2, result=RunResult(holds=[cap, cap])),  # one per held rung
    ]
    metrics = fed(events)
    families = read(metrics)
    assert value(families, "fleetfix_holds_total", reason="max_unavailable_per") == 2
    assert value(families, "fleetfix_holds_total", reason="max_attempts") == 0  # msg, not message
    held = StepResult("y", "k", Status.FAILED, message=attempts, data={"held": True})
    metrics = fed([events[0], HostStepFinished(at=1, result=held), events[2]])
    assert value(read(metrics), "fleetfix_holds_total", reason="max_attempts") == 1


def test_the_hold_key_is_the_engines() -> None:
    assert HOLD_KEY == ENGINE_HOLD_KEY


def test_hold_reasons_are_read_from_the_texts_the_engine_and_journal_write(tmp_path: Path) -> None:
    run_budget = Safety(None, EventBus(), budget=0).admit("h", dry=True)
    assert run_budget is not None and hold_reason(run_budget) == "repair_budget"
    journal = Journal(tmp_path / "j.sqlite")
    try:
        journal.start_run("p.yml", [], check=False, hosts=2)
        assert journal.take_out("a", "disruptive", 1) is None
        fleet_budget = journal.take_out("b", "disruptive", 1)
    finally:
        journal.close()
    assert fleet_budget is not None and hold_reason(fleet_budget) == "repair_budget"
    assert hold_reason("held: suspect leaf leaf-07 (override with --override-holds)") == (
        "suspect_domain"
    )
    assert hold_reason("reboot ran 5.0m ago; cooldown is 1.0d") == "cooldown"
    assert hold_reason("something new") == "other"


@pytest.mark.parametrize("kind", ["owned", "deferred", "refused", "unhealthy", "future_kind"])
def test_hosts_left_counts_each_host_once_by_its_last_kind(kind: str) -> None:
    events = [
        HostLeft(host="a", kind="deferred", reason="jobs"),
        HostLeft(host="a", kind=kind, reason="r"),
        HostLeft(host="b", kind=kind, reason="r"),
    ]
    families = read(fed(events))
    assert value(families, "fleetfix_hosts_left", kind=kind) == 2
    total = sum(v for _, v in samples(families, "fleetfix_hosts_left"))
    assert total == 2


def test_a_run_with_no_journal_answer_leaves_the_fleet_series_out() -> None:
    families = read(fed(whole_run()), out=None)
    assert "fleetfix_hosts_out_of_service" not in families
    assert "fleetfix_host_out_of_service_seconds" not in families
