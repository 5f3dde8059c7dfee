"""Mid-run changes: scenario events on exact command counts, and `inject` control requests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.errors import LabError
from fleetfix.lab.control import LabHandle
from fleetfix.lab.scenario import BecomeBusy, NodeEvent, SetDrainReason
from fleetfix.lab.scenario_file import load_scenario
from tests.lab.support import run, running_lab

MID = """\
name: mid
fleet: {spines: 1, leaves: 1, racks: 1, nodes_per_rack: 4, node_name: "m{:02d}"}
ssh: {port: 0}
nodes:
  m01:
    events:
      - after_commands: 2
        become_busy:
          job_id: 700
          user: dave
          gpu_processes: [{name: train, gpu: 1, used_mib: 1000}]
      - {after_commands: 3, drain_reason: {user: carol, reason: "carol: mine now"}}
  m02:
    slurm: {state: drained, reason: "ticket OPS-1", user: bob}
    events:
      - {after_commands: 0, become_busy: {user: erin}}
"""
SQUEUE = "squeue -h -w {node} -o '%i %u'"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    scenario = tmp_path_factory.mktemp("scenario") / "mid.yml"
    scenario.write_text(MID, encoding="utf-8")
    with running_lab(str(scenario), tmp_path_factory.mktemp("state")) as handle:
        yield handle


def test_events_parse_into_values(tmp_path: Path) -> None:
    path = tmp_path / "mid.yml"
    path.write_text(MID, encoding="utf-8")
    events = load_scenario(path).faults["m01"].events
    assert events[0].after_commands == 2 and isinstance(events[0].change, BecomeBusy)
    assert events[0].change.job_id == 700 and events[0].change.processes[0].gpu == 1
    assert events[1] == NodeEvent(3, SetDrainReason(user="carol", reason="carol: mine now"))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[{become_busy: {}}]", "an event needs after_commands"),
        ("[{after_commands: 1}]", "name exactly one change"),
        ("[{after_commands: 1, drain: {user: a, reason: b}, slurm_unreadable: true}]", "exactly"),
        ("[{after_commands: 1, drian: {user: a, reason: b}}]", "unknown key 'drian'"),
        ("[{after_commands: 1, drain: {user: a}}]", "needs both user and reason"),
        ("[{after_commands: -1, slurm_unreadable: true}]", "expected an integer >= 0"),
        ("{after_commands: 1, slurm_unreadable: true}", "expected a list of events"),
        ("[{after_commands: 1, become_busy: {gpu_processes: [{gpu: 9}]}}]", "GPU 9 does not"),
    ],
)
def test_malformed_events_are_rejected(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(f"nodes:\n  gpu001:\n    events: {body}\n", encoding="utf-8")
    with pytest.raises(LabError) as caught:
        load_scenario(path)
    assert message in caught.value.render()


async def test_events_fire_on_exact_command_counts(lab: LabHandle) -> None:
    seen = [(await run(lab, "m01", SQUEUE.format(node="m01"))).stdout for _ in range(3)]
    assert seen == ["", "", "700 dave\n"], "busy from the 3rd command on, not before"
    reason = await run(lab, "m01", "sinfo -N -h -n m01 -o '%E|%u'")
    assert reason.stdout == "carol: mine now|carol\n", "the reason changes before command 4"
    truth = (await lab.atruth())["nodes"]["m01"]
    assert [e["fired_at_command"] for e in truth["events"]] == [3, 4]
    assert truth["commands"] == 4
    assert [(p["name"], p["gpu"], p["job_id"]) for p in truth["gpu_processes"]] == [
        ("train", 1, 700)
    ]
    apps = await run(lab, "m01", "nvidia-smi --query-compute-apps=pid --format=csv,noheader")
    assert apps.stdout == f"{truth['gpu_processes'][0]['pid']}\n"
    assert truth["slurm"]["state"] == "ALLOCATED" and not truth["slurm"]["drain"]


async def test_a_job_never_starts_on_a_drained_node(lab: LabHandle) -> None:
    assert (await run(lab, "m02", SQUEUE.format(node="m02"))).stdout == ""
    truth = (await lab.atruth())["nodes"]["m02"]
    assert truth["events"][0]["fired_at_command"] == 1
    assert truth["events"][0]["outcome"].startswith("no job started: Slurm schedules no job")
    assert truth["gpu_processes"] == []
    assert truth["slurm"]["reason_user"] == "bob" and truth["slurm"]["drain"]


async def test_inject_makes_a_node_busy_then_a_human_drains_it(lab: LabHandle) -> None:
    result = await lab.ainject("m03", {"become_busy": {"job_id": 812, "user": "dave"}})
    assert result["applied"] and result["outcome"].startswith("job 812 (dave)")
    truth = (await lab.atruth())["nodes"]["m03"]
    pids = sorted(p["pid"] for p in truth["gpu_processes"])
    assert len(pids) == 8 and all(p > 0 for p in pids)
    apps = await run(lab, "m03", "nvidia-smi --query-compute-apps=pid --format=csv,noheader")
    assert sorted(int(line) for line in apps.stdout.split()) == pids
    assert (await run(lab, "m03", SQUEUE.format(node="m03"))).stdout == "812 dave\n"

    await lab.ainject("m03", {"drain": {"user": "carol", "reason": "RMA pending, OPS-2231"}})
    shown = (await run(lab, "m03", "scontrol show node m03")).stdout
    assert "   State=ALLOCATED+DRAIN " in shown
    assert re.search(r"^   Reason=RMA pending, OPS-2231 \[carol@[\d\-T:]+\]$", shown, re.M)

    lab.inject("m03", {"drain_reason": {"user": "dave", "reason": "dave: my job, leave it"}})
    slurm = (await lab.atruth())["nodes"]["m03"]["slurm"]
    assert (slurm["drain"], slurm["reason"], slurm["reason_user"]) == (
        True,
        "dave: my job, leave it",
        "dave",
    )
    refused = await lab.ainject("m03", {"become_busy": True})
    assert not refused["applied"] and "drained" in refused["outcome"]


async def test_inject_makes_slurm_unreadable_and_readable_again(lab: LabHandle) -> None:
    await lab.ainject("m04", {"slurm_unreadable": True})
    dark = await run(lab, "m04", "scontrol show node m04")
    assert (dark.rc, dark.stdout) == (1, "")
    assert dark.stderr == (
        "slurm_load_node error: Unable to contact slurm controller (connect failure)\n"
    )
    other = await run(lab, "m03", "scontrol show node m04 | head -1")
    assert other.stdout.startswith("NodeName=m04 "), "only m04 lost the controller"
    assert (await lab.atruth())["nodes"]["m04"]["slurm"]["unreadable"] is True
    await lab.ainject("m04", {"slurm_unreadable": False})
    assert (await run(lab, "m04", "sinfo -h -N -n m04 -o %t")).stdout == "idle\n"


@pytest.mark.parametrize(
    ("node", "change", "message"),
    [
        ("m99", {"slurm_unreadable": True}, "no lab node 'm99'"),
        ("m04", {"become_busy": {"usr": "x"}}, "did you mean 'user'?"),
        ("m04", {"drain": {"user": "x"}}, "needs both user and reason"),
        ("m04", {}, "name exactly one change"),
        ("m04", {"become_busy": {"gpu_processes": [{"gpu": 8}]}}, "GPU 8 does not exist"),
    ],
)
def test_inject_rejects_what_it_cannot_apply(
    lab: LabHandle, node: str, change: dict[str, object], message: str
) -> None:
    with pytest.raises(LabError, match=re.escape(message)):
        lab.inject(node, change)
