"""The Notifier: which events become notifications, delivered to a real receiver in the
background; a bounded finish; warnings without the URL; never an exception into the run."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from fleetfix.events import (
    BatchStarted,
    CommandRan,
    Event,
    FindingRaised,
    HostLeft,
    HostStepFinished,
    HostStepStarted,
    PlayFinished,
    RunFinished,
    RunStarted,
    SafetyStop,
)
from fleetfix.notify import ALL_KINDS, DeliveryPolicy, Format, Kind, Notifier, Webhook
from fleetfix.results import CommandResult, HostStats, RunResult, Status, StepResult
from tests.support import eventually
from tests.support.webhook_receiver import HANG, Receiver
from tests.unit.notify import gpu007
from tests.unit.notify.test_payloads import SCHEMA
from tests.unit.report.schema_check import validate

SECRET = "services/T0/B0/XXXXsecretXXXX"
QUICK = DeliveryPolicy(timeout=2.0, retries=2, backoff=0.01)


class Warnings(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)


def notifier(
    webhooks: Iterable[Webhook],
    kinds: frozenset[Kind] = ALL_KINDS,
    **options: Any,
) -> tuple[Notifier, Warnings]:
    warnings = Warnings()
    built = Notifier(
        list(webhooks), kinds, controller="ctl01", warn=warnings, policy=QUICK, **options
    )
    return built, warnings


def emit(observer: Notifier, events: Iterable[Event]) -> None:
    for event in events:
        observer(event)


def start(check: bool = False) -> list[Event]:
    hosts = ("gpu001", "gpu002")
    return [RunStarted(run_id="r-9", playbook="p.yml", hosts=hosts, check=check)]


def finished(result: RunResult | None = None) -> RunFinished:
    return RunFinished(result=result or RunResult(stats={"gpu001": HostStats(ok=3)}))


def held(host: str, why: str) -> HostStepFinished:
    hold = f"{host}: reboot held: {why}"
    result = StepResult(host, "reboot", Status.FAILED, message=f"reboot held: {why}")
    return HostStepFinished(
        result=StepResult(**{**_fields(result), "data": {"fleetfix_hold": hold}})
    )


def _fields(result: StepResult) -> dict[str, Any]:
    return {name: getattr(result, name) for name in StepResult.__dataclass_fields__}


async def test_the_lab_rma_reaches_both_formats_in_order(
    receiver: Receiver, tmp_path: Path
) -> None:
    fleet = gpu007.lab_fleet(tmp_path)
    hooks = [Webhook(receiver.url("/json")), Webhook(receiver.url("/slack"), Format.SLACK)]
    observer, warnings = notifier(hooks)
    emit(observer, gpu007.run_events(fleet))
    await observer.finish()
    assert [b["kind"] for b in receiver.bodies("/json")] == ["rma", "run_finished"]
    rma, end = receiver.bodies("/json")
    assert rma["node"] == "gpu007" and {g["uuid"]: g["serial"] for g in rma["gpus"]} == (
        gpu007.lab_gpus(fleet)
    )
    assert (end["exit_code"], end["outcome"], end["left"][0]["host"]) == (
        2,
        "host_failed",
        "gpu007",
    )
    assert end["duration_s"] == 52.0 and end["host_counts"]["failed"] == 1
    assert end["journal_lost"] is None
    slack = receiver.bodies("/slack")
    assert [b["text"] for b in slack] == [
        "fleetfix: gpu007 needs RMA",
        "fleetfix: run finished: host_failed (exit 2)",
    ]
    assert warnings == []


async def test_a_run_that_lost_its_journal_still_says_how_it_ended(
    receiver: Receiver, tmp_path: Path
) -> None:
    """No RunFinished comes (the engine's result went with the exception): the run's end is
    built from what the events said, exit 6, with why it stopped."""
    fleet = gpu007.lab_fleet(tmp_path)
    hooks = [Webhook(receiver.url("/json")), Webhook(receiver.url("/slack"), Format.SLACK)]
    observer, warnings = notifier(hooks)
    deferred = "deferred: job(s) 48213 still running on gpu005 after 3s: left drained"
    emit(
        observer,
        [
            *gpu007.probe_events(fleet),
            *gpu007.remediation_events(fleet),
            gpu007.end_events()[0],  # gpu007 marked failed
            HostLeft(host="gpu005", kind="deferred", reason=deferred),
        ],
    )
    lost = "journal postgresql://fleetfix@db01:5433/fleetfix: terminating connection"
    observer.journal_lost(lost)
    await observer.finish()
    assert [b["kind"] for b in receiver.bodies("/json")] == ["rma", "run_finished"]
    end = receiver.bodies("/json")[1]
    validate(end, SCHEMA)
    assert (end["outcome"], end["exit_code"], end["journal_lost"]) == ("safety_abort", 6, lost)
    assert end["host_counts"] == {
        "total": 1,
        "ok": 0,
        "changed": 0,
        "failed": 1,
        "unreachable": 0,
    }
    assert (
        end["left"] == [{"host": "gpu005", "reason": deferred, "verdict": ""}]
        and end["left_total"] == 1
    )
    assert (end["interrupted"], end["safety_stop"]) == (False, None)
    slack = receiver.bodies("/slack")[1]
    assert slack["text"] == "fleetfix: run finished: safety_abort (exit 6)"
    assert f"*stopped: it lost its journal*: {lost}" in json.dumps(slack["blocks"])
    assert warnings == []


async def test_an_rma_is_sent_when_its_batch_ends_during_the_run(
    receiver: Receiver, tmp_path: Path
) -> None:
    fleet = gpu007.lab_fleet(tmp_path)
    observer, _ = notifier([Webhook(receiver.url())])
    emit(observer, [*gpu007.probe_events(fleet), *gpu007.remediation_events(fleet)])
    await asyncio.sleep(0)  # the loop runs; nothing is due before the batch ends
    assert receiver.requests == []
    observer(BatchStarted(index=2, count=2, hosts=("gpu008",)))
    assert await eventually(lambda: len(receiver.requests) == 1, 10)
    assert receiver.bodies()[0]["kind"] == "rma"
    observer(PlayFinished(name="x"))
    await observer.finish()
    assert len(receiver.requests) == 1  # once per node and run


async def test_holds_come_from_findings_that_hold_and_from_safety_stops(receiver: Receiver) -> None:
    observer, _ = notifier([Webhook(receiver.url())])
    hosts = tuple(f"gpu{n:03d}" for n in range(60))
    emit(
        observer,
        [
            *start(),
            FindingRaised(kind="rack", domain="r1", message="2 of 8", hosts=hosts[:2], hold=False),
            FindingRaised(
                kind="leaf", domain="leaf-07", message="27 of 32", hosts=hosts, hold=True
            ),
            SafetyStop(reason="max_fail_percentage 50% exceeded"),
        ],
    )
    await observer.finish()
    leaf, stop = receiver.bodies()
    assert (leaf["kind"], leaf["cause"], leaf["domain_kind"], leaf["domain"]) == (
        "hold",
        "finding",
        "leaf",
        "leaf-07",
    )
    assert len(leaf["hosts"]) == 50 and leaf["hosts_total"] == 60
    assert (stop["cause"], stop["reason"]) == ("safety_stop", "max_fail_percentage 50% exceeded")


async def test_budget_refusals_of_a_batch_make_one_notification(receiver: Receiver) -> None:
    observer, _ = notifier([Webhook(receiver.url())])
    budget = "repair budget reached: 4 hosts already out of service by fleetfix (limit 4: a, b)"
    emit(
        observer,
        [
            *start(),
            held("gpu001", budget),
            held("gpu002", budget),
            held("gpu003", "max_unavailable_per reached in rack r1"),  # a cap, not the budget
            BatchStarted(index=2, count=2, hosts=("gpu004",)),
            held("gpu004", budget),
            finished(),
        ],
    )
    await observer.finish()
    kinds = [(b["kind"], b.get("hosts")) for b in receiver.bodies()]
    assert kinds == [
        ("budget_refused", ["gpu001", "gpu002"]),
        ("budget_refused", ["gpu004"]),
        ("run_finished", None),
    ]
    assert receiver.bodies()[0]["reason"] == budget


async def test_notify_on_chooses_the_kinds(receiver: Receiver, tmp_path: Path) -> None:
    observer, _ = notifier([Webhook(receiver.url())], frozenset({Kind.RUN_FINISHED}))
    emit(observer, [*gpu007.run_events(gpu007.lab_fleet(tmp_path)), SafetyStop(reason="x")])
    await observer.finish()
    assert [b["kind"] for b in receiver.bodies()] == ["run_finished"]


async def test_the_exit_code_is_the_clis_for_check_changes(receiver: Receiver) -> None:
    changed = RunResult(stats={"gpu001": HostStats(ok=2, changed=1)})
    for detailed, code in ((True, 7), (False, 0)):
        observer, _ = notifier([Webhook(receiver.url())], detailed_exitcode=detailed)
        emit(observer, [*start(check=True), finished(changed)])
        await observer.finish()
        assert receiver.bodies()[-1]["exit_code"] == code
        assert receiver.bodies()[-1]["check"] is True


async def test_a_failed_delivery_is_one_warning_without_the_url(receiver: Receiver) -> None:
    receiver.answer_path("/gone", 404)
    hooks = [Webhook(receiver.url(f"/gone/{SECRET}?token=t")), Webhook(receiver.url("/ok"))]
    observer, warnings = notifier(hooks)
    emit(observer, [*start(), finished()])
    await observer.finish()
    assert len(receiver.bodies("/ok")) == 1
    assert warnings == [
        f"webhook http://127.0.0.1:{receiver.port}: run_finished notification not delivered"
        " (HTTP 404: no_service)"
    ]


async def test_finish_gives_up_within_its_bound(receiver: Receiver) -> None:
    receiver.script(HANG, HANG, HANG)
    policy = DeliveryPolicy(timeout=30.0, retries=2, backoff=0.01)
    warnings = Warnings()
    observer = Notifier(
        [Webhook(receiver.url(f"/{SECRET}"))],
        ALL_KINDS,
        controller="c",
        warn=warnings,
        policy=policy,
        finish_within=0.3,
    )
    emit(observer, [*start(), SafetyStop(reason="x"), finished()])
    started = time.monotonic()
    await observer.finish()
    assert time.monotonic() - started < 3.0
    # The hold had the first half of the wait, run_finished the rest: each went out, and no
    # answer came (the server hangs), so each may have been received.
    where = f"webhook http://127.0.0.1:{receiver.port}"
    assert warnings == [
        f"{where}: hold notification not confirmed (timed out; may have been received)",
        f"{where}: run_finished notification not confirmed (timed out; may have been received)",
    ]
    assert [b["kind"] for b in receiver.bodies()] == ["hold", "run_finished"]


def test_events_heard_without_a_loop_are_sent_by_finish(receiver: Receiver) -> None:
    observer, _ = notifier([Webhook(receiver.url())])
    emit(observer, [*start(), finished()])
    assert receiver.requests == []
    asyncio.run(observer.finish())
    assert [b["kind"] for b in receiver.bodies()] == ["run_finished"]


async def test_a_bug_inside_is_a_warning_never_an_exception(receiver: Receiver) -> None:
    observer, warnings = notifier([Webhook(receiver.url())])
    observer(RunFinished(result=cast(RunResult, None)))
    observer(RunFinished(result=cast(RunResult, None)))
    await observer.finish()
    assert len(warnings) == 1 and warnings[0].startswith("notifications: internal error")


async def test_hearing_a_10000_host_run_is_cheap() -> None:
    observer, _ = notifier([Webhook("http://127.0.0.1:9/unused")])
    result = CommandResult("nvidia-smi", 0, "", "")
    events: list[Event] = []
    for n in range(10_000):
        host = f"gpu{n:05d}"
        step = StepResult(host, "read", Status.OK, commands=(result,), data={"rc": 0})
        events += [
            HostStepStarted(host=host, step="read"),
            CommandRan(host=host, step="read", result=result),
            HostStepFinished(result=step),
        ]
    started = time.perf_counter()
    emit(observer, events)
    assert time.perf_counter() - started < 1.0  # about 30 ms on a laptop
    await observer.finish()
