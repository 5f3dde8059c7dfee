"""Journaled events read back equal to what the engine emitted (long output cut to excerpts)."""

from __future__ import annotations

import pytest

from fleetfix.errors import SourcePosition
from fleetfix.events import (
    ActionTaken,
    CommandRan,
    Event,
    FindingRaised,
    HostOutOfService,
    HostStepFinished,
    PlayStarted,
    RunFinished,
    RunStarted,
    SafetyStop,
    TaskStarted,
)
from fleetfix.journal.codec import EXCERPT, CodecError, decode, encode
from fleetfix.results import CommandResult, HostStats, RunResult, Status, StepResult

RESULT = CommandResult("nvidia-smi -q -x", 0, "<xml/>", "", 0.25)
STEP = StepResult(
    host="gpu001",
    step="probe nvidia_smi",
    status=Status.OK,
    commands=(RESULT,),
    data={"rc": 0, "facts": {"gpu_count": 8, "gpus": [{"index": 0}]}},
    key="pb.yml:4:7",
)
EVENTS: list[Event] = [
    RunStarted(run_id="r1", playbook="pb.yml", hosts=("gpu001", "gpu002"), check=True),
    PlayStarted(name="play", hosts=("gpu001",), position=SourcePosition("pb.yml", 1, 3)),
    TaskStarted(name="probe", position=SourcePosition("pb.yml", 4, 7), handler=False),
    CommandRan(host="gpu001", step="probe", result=RESULT, planned_only=False),
    HostStepFinished(result=STEP),
    ActionTaken(host="gpu001", step="reboot", action="reboot", failed=False),
    HostOutOfService(host="gpu001", domains=("rack r1",)),
    FindingRaised(kind="leaf", domain="leaf-03", message="m", hosts=("a", "b"), hold=True),
    SafetyStop(reason="max_fail_percentage"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_round_trip(event: Event) -> None:
    assert decode(*encode(event)) == event


def test_run_finished_keeps_totals_not_results() -> None:
    result = RunResult(stats={"gpu001": HostStats(ok=3, failed=1)}, results=[STEP], holds=["x"])
    back = decode(*encode(RunFinished(result=result)))
    assert isinstance(back, RunFinished)
    assert back.result.stats["gpu001"].failed == 1
    assert back.result.results == []
    assert back.result.outcome() == result.outcome()


def test_long_output_is_cut_to_an_excerpt() -> None:
    big = CommandResult("cat big", 0, "x" * (EXCERPT * 4), "", 1.0)
    back = decode(*encode(CommandRan(host="h", step="s", result=big)))
    assert isinstance(back, CommandRan)
    assert len(back.result.stdout) < EXCERPT + 100


def test_unknown_or_damaged_events_are_clear_errors() -> None:
    with pytest.raises(CodecError, match="unknown event type"):
        decode("NoSuchEvent", "{}")
    with pytest.raises(CodecError, match="cannot read"):
        decode("RunStarted", "not json")
