"""Journaled events read back equal to what the engine emitted (long output cut to excerpts);
the bulk of a command or a step lives in its row, not in the event body. The codec needs no
database; the last test takes the events through each backend's rows and back."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

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
from fleetfix.journal import Journal
from fleetfix.journal.codec import EXCERPT, ROW_FIELDS, CodecError, decode, encode, excerpt
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


SELF_CONTAINED = [e for e in EVENTS if type(e) not in ROW_FIELDS]


@pytest.mark.parametrize("event", SELF_CONTAINED, ids=lambda e: type(e).__name__)
def test_round_trip(event: Event) -> None:
    assert decode(*encode(event)) == event


def test_a_command_body_leaves_its_output_to_the_row() -> None:
    event = CommandRan(host="gpu001", step="probe", result=RESULT)
    kind, body = encode(event)
    assert "nvidia-smi" not in body and "<xml/>" not in body
    row = {"command": RESULT.command, "stdout": RESULT.stdout, "stderr": RESULT.stderr}
    assert decode(kind, body, row) == event


def test_a_step_body_leaves_its_facts_to_the_row() -> None:
    event = HostStepFinished(result=STEP)
    kind, body = encode(event)
    assert "facts" not in body and "nvidia-smi" not in body
    assert json.loads(body)["result"]["status"] == "ok"  # what a reader of the banner needs
    back = decode(kind, body, {"data": dict(STEP.data)})
    # The commands are the step's own CommandRan events; the step body does not repeat them.
    assert back == dataclasses.replace(event, result=dataclasses.replace(STEP, commands=()))


def test_an_older_self_contained_body_still_decodes() -> None:
    body = json.dumps(
        {
            "at": 1.0,
            "host": "gpu001",
            "step": "probe",
            "planned_only": False,
            "result": {"command": "id", "rc": 0, "stdout": "0\n", "stderr": "", "duration": 0.1},
        }
    )
    back = decode("CommandRan", body)
    assert isinstance(back, CommandRan)
    assert back.result.stdout == "0\n"


def test_run_finished_keeps_totals_not_results() -> None:
    result = RunResult(stats={"gpu001": HostStats(ok=3, failed=1)}, results=[STEP], holds=["x"])
    back = decode(*encode(RunFinished(result=result)))
    assert isinstance(back, RunFinished)
    assert back.result.stats["gpu001"].failed == 1
    assert back.result.results == []
    assert back.result.outcome() == result.outcome()


def test_long_output_is_cut_to_an_excerpt_with_its_length() -> None:
    text = "BEGIN" + "x" * (EXCERPT * 4) + "Xid 79 END"
    cut = excerpt(text)
    assert len(cut) <= EXCERPT
    assert cut.startswith("BEGIN") and cut.endswith("Xid 79 END")
    assert f"[{len(text)} chars, " in cut
    assert excerpt(cut) == cut  # a report's own excerpt of it leaves it whole
    assert excerpt("short") == "short"


def test_unknown_or_damaged_events_are_clear_errors() -> None:
    with pytest.raises(CodecError, match="unknown event type"):
        decode("NoSuchEvent", "{}")
    with pytest.raises(CodecError, match="cannot read"):
        decode("RunStarted", "not json")


def test_events_read_back_from_the_journal_as_they_were_written(
    open_journal: Callable[[], Journal],
) -> None:
    journal = open_journal()
    run_id = journal.start_run("pb.yml", [], check=False, hosts=2)
    for event in EVENTS:
        journal(event)
    journal.close()
    # A step's commands are its own CommandRan events; its row does not repeat them.
    step = dataclasses.replace(STEP, commands=())
    written = [
        dataclasses.replace(e, result=step) if isinstance(e, HostStepFinished) else e
        for e in EVENTS
    ]
    assert list(open_journal().events(run_id)) == written
