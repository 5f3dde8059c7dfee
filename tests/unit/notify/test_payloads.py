"""Payloads built from events: the RMA ticket of the lab's gpu007, the verdict's edges, both
body formats, the versioned schema."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from fleetfix.engine.remediate import HOLD_KEY
from fleetfix.events import ActionStarted, ActionTaken, CommandRan, HostStepFinished
from fleetfix.notify.evidence import (
    EvidenceTracker,
    board_serials,
    evidence_text,
    gpu_list,
    rma_reason,
)
from fleetfix.notify.kinds import Kind
from fleetfix.notify.model import (
    EVIDENCE_CHARS,
    Attempt,
    BudgetRefused,
    Hold,
    HostCounts,
    LeftHost,
    Notification,
    Rma,
    RunEnd,
    RunInfo,
)
from fleetfix.notify.observer import HOLD_KEY as NOTIFY_HOLD_KEY
from fleetfix.notify.render import SLACK_SECTION_CHARS, Format, json_body, render, slack_body
from fleetfix.results import CommandResult, Status
from tests.unit.notify import gpu007
from tests.unit.report.schema_check import validate

SCHEMA = json.loads((Path(__file__).parents[3] / "docs/notifications-v1.schema.json").read_text())
RUN = RunInfo(run_id="r-1", playbook="playbooks/xid79.yml", controller="ctl01", check=False)


def ticket(events: list[Any]) -> tuple[EvidenceTracker, list[str]]:
    """Feed events to a tracker as the Notifier does; the RMA reasons it concluded."""
    tracker = EvidenceTracker()
    reasons = []
    for event in events:
        if isinstance(event, CommandRan):
            tracker.command_ran(event)
        elif isinstance(event, ActionStarted):
            tracker.action_started(event)
        elif isinstance(event, ActionTaken):
            tracker.action_taken(event)
        elif isinstance(event, HostStepFinished):
            reason = tracker.step_finished(event.result)
            reasons += [reason] if reason else []
    return tracker, reasons


@pytest.fixture(scope="module")
def rma(tmp_path_factory: pytest.TempPathFactory) -> tuple[Rma, dict[str, str], str]:
    fleet = gpu007.lab_fleet(tmp_path_factory.mktemp("lab"))
    tracker, reasons = ticket(gpu007.run_events(fleet))
    assert reasons == [gpu007.RMA_REASON]
    return tracker.rma(gpu007.NODE, reasons[0]), gpu007.lab_gpus(fleet), gpu007.lost_uuid(fleet)


def test_the_rma_ticket_names_every_gpu_by_serial_and_uuid(
    rma: tuple[Rma, dict[str, str], str],
) -> None:
    ticket, lab, lost = rma
    assert ticket.node == "gpu007" and ticket.reason == gpu007.RMA_REASON
    assert {g.uuid: g.serial for g in ticket.gpus} == lab
    [gone] = [g for g in ticket.gpus if g.lost]
    assert gone.uuid == lost and gone.xids == (79,) and gone.bus_id == "00000000:1b:00.0"
    assert [g.index for g in ticket.gpus if not g.lost] == list(range(1, 8))


def test_the_rma_ticket_says_which_xids_and_what_was_tried(
    rma: tuple[Rma, dict[str, str], str],
) -> None:
    ticket = rma[0]
    assert [(x.code, x.count, x.gpus) for x in ticket.xids] == [(79, 1, ("00000000:1b:00.0",))]
    assert ticket.xids[0].mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    tried = [(t.action, t.outcome) for t in ticket.tried]
    assert tried == [
        ("slurm_drain", "ok"),
        ("collect_evidence", "ok"),
        ("reboot", "failed"),
        ("slurm_drain", "ok"),
    ]
    assert "GPUs missing after reboot" in ticket.tried[2].message
    assert "Xid 79" in ticket.evidence and gpu007.RMA_REASON in ticket.evidence
    assert "could not open 00000000:1b:00.0" in ticket.evidence


def test_no_raw_command_or_output_reaches_a_payload(rma: tuple[Rma, dict[str, str], str]) -> None:
    note = Notification(Kind.RMA, 1040.0, RUN, rma[0])
    for form in Format:
        text = render(note, form).decode()
        for raw in ("scontrol update", "dmesg -T", "nvidia-smi -q", "NVSMI LOG", "NodeName="):
            assert raw not in text, (form, raw)


def test_a_drain_that_was_already_an_rma_is_no_new_verdict(tmp_path: Path) -> None:
    def read(text: str) -> CommandResult:
        return CommandResult("scontrol show node", 0, text, "")

    fleet = gpu007.lab_fleet(tmp_path)
    before = read(gpu007.scontrol_after(fleet, None))
    remediation = read(gpu007.scontrol_after(fleet, gpu007.REMEDIATION))
    rma = read(gpu007.scontrol_after(fleet, gpu007.RMA_REASON))
    assert rma_reason(remediation, rma) == gpu007.RMA_REASON
    assert rma_reason(None, rma) == gpu007.RMA_REASON
    assert rma_reason(rma, rma) is None  # a past run's verdict, read again
    assert rma_reason(before, remediation) is None
    human = read(gpu007.scontrol_after(gpu007.lab_fleet(tmp_path / "2"), "bad DIMM; needs RMA"))
    assert rma_reason(before, human) is None  # not fleetfix's reason


def test_a_refused_or_failed_drain_concludes_nothing(tmp_path: Path) -> None:
    fleet = gpu007.lab_fleet(tmp_path)
    events = [e for e in gpu007.remediation_events(fleet)]
    last = events[-1]
    assert isinstance(last, HostStepFinished)
    failed = dataclasses.replace(last.result, status=Status.FAILED)
    _, reasons = ticket([*events[:-1], HostStepFinished(result=failed)])
    assert reasons == []


def test_board_serials_pair_the_uuid_line_with_the_next() -> None:
    log = (
        "[t] NVRM: GPU at PCI:0000:1b:00: GPU-20912934-ab21-f47d-9001-e7ec46fac30a\n"
        "[t] NVRM: GPU Board Serial Number: 1652133664289\n"
        "[t] NVRM: GPU at PCI:0000:43:00: GPU-323f8905-7ef3-999a-3802-cb836ad4408c\n"
        "[t] NVRM: Xid (PCI:0000:43:00): 48, pid=1, name=python, An uncorrectable ECC error\n"
    )
    assert board_serials([log]) == {"gpu-20912934-ab21-f47d-9001-e7ec46fac30a": "1652133664289"}


def test_gpus_merge_by_bus_id_and_a_gpu_listed_is_not_lost() -> None:
    smi = [
        {"gpus": [{"index": 3, "bus_id": "b3", "uuid": "GPU-3", "serial": None}], "lost_gpus": []}
    ]
    events = [{"code": 48, "bus_id": "b3", "uuid": "GPU-3"}, {"code": 79, "bus_id": "b9"}]
    gpus = gpu_list(smi, events, {"gpu-3": "S3"})
    assert [(g.index, g.bus_id, g.serial, g.xids, g.lost) for g in gpus] == [
        (3, "b3", "S3", (48,), False),
        (None, "b9", None, (79,), True),
    ]
    assert not any(g.lost for g in gpu_list([], events, {}))  # no listing: nothing inferred


def test_the_evidence_excerpt_is_bounded() -> None:
    events = [{"code": 13, "bus_id": "b1", "message": "x" * 5000, "timestamp": "t"}] * 50
    tried = [Attempt("gpu_reset", "reset", "failed", 1.0, "y" * 300)] * 20
    text = evidence_text("fleetfix: needs RMA\x1b[31m", events, [], tried)
    assert len(text) <= EVIDENCE_CHARS and text.endswith("[cut]") and "\x1b" not in text


def test_the_notifier_reads_the_engines_hold_key() -> None:
    assert NOTIFY_HOLD_KEY == HOLD_KEY


BODIES: dict[Kind, Any] = {
    Kind.HOLD: Hold(
        "finding", "27 of 32 failures under leaf-07", "leaf", "leaf-07", ("a", "b"), 27
    ),
    Kind.BUDGET_REFUSED: BudgetRefused("repair budget reached: 4 hosts", ("gpu9",), 1),
    Kind.RUN_FINISHED: RunEnd(
        outcome="host_failed",
        exit_code=2,
        duration_s=12.5,
        host_counts=HostCounts(total=16, ok=13, changed=2, failed=1, unreachable=0),
        left=(LeftHost("gpu007", "failed: <left> & drained"),),
        left_total=1,
        holds=0,
        interrupted=False,
        safety_stop=None,
    ),
}


def notes(rma: Rma) -> list[Notification]:
    bodies = {**BODIES, Kind.RMA: rma}
    return [Notification(kind, 1795608876.5, RUN, body) for kind, body in bodies.items()]


def test_every_json_body_follows_the_schema(rma: tuple[Rma, dict[str, str], str]) -> None:
    for note in notes(rma[0]):
        body = json.loads(render(note, Format.JSON))
        validate(body, SCHEMA)
        assert body["fleetfix"] == 1 and body["kind"] == note.kind
        assert body["at"] == "2026-11-25T12:14:36.500Z"
        assert (body["run_id"], body["controller"]) == ("r-1", "ctl01")


def test_json_bodies_carry_each_kinds_fields(rma: tuple[Rma, dict[str, str], str]) -> None:
    bodies = {n.kind: json_body(n) for n in notes(rma[0])}
    assert {"node", "reason", "gpus", "xids", "tried", "evidence"} <= set(bodies[Kind.RMA])
    assert bodies[Kind.HOLD]["domain"] == "leaf-07" and bodies[Kind.HOLD]["hosts_total"] == 27
    assert bodies[Kind.BUDGET_REFUSED]["hosts"] == ["gpu9"]
    end = bodies[Kind.RUN_FINISHED]
    assert (end["exit_code"], end["outcome"], end["host_counts"]["failed"]) == (2, "host_failed", 1)


def test_slack_bodies_are_mrkdwn_sections_within_slacks_limits(
    rma: tuple[Rma, dict[str, str], str],
) -> None:
    for note in notes(rma[0]):
        body = json.loads(render(note, Format.SLACK))
        assert set(body) == {"text", "blocks"} and body["text"].startswith("fleetfix: ")
        assert 2 <= len(body["blocks"]) <= 50
        for block in body["blocks"]:
            assert block["type"] == "section" and block["text"]["type"] == "mrkdwn"
            assert 0 < len(block["text"]["text"]) <= SLACK_SECTION_CHARS


def test_slack_text_is_escaped_and_names_the_rma_node(
    rma: tuple[Rma, dict[str, str], str],
) -> None:
    by_kind = {note.kind: note for note in notes(rma[0])}
    body = slack_body(by_kind[Kind.RMA])
    assert body["text"] == "fleetfix: gpu007 needs RMA"
    text = "\n".join(b["text"]["text"] for b in body["blocks"])
    assert all(serial in text for serial in rma[1].values())
    ended = "\n".join(b["text"]["text"] for b in slack_body(by_kind[Kind.RUN_FINISHED])["blocks"])
    assert "failed: &lt;left&gt; &amp; drained" in ended and "<left>" not in ended
