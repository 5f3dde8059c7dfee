"""The engine's safety invariants on the `traps` lab, judged by outcome: the lab's truth (boots,
Slurm, jobs), its audit of disruptive tool calls, and the run's journal.

traps (src/fleetfix/lab/scenarios/traps.yml): gpu01/gpu02 Xid 79 that a reboot fixes; gpu03 the
same under dave's job 51234; gpu04 drained by bob; gpu05 Slurm unreadable; gpu06 hung
nvidia-smi; gpu07 GPU 3 does not come back after the reboot (and the inventory has no gpus=);
gpu08 becomes busy after its 3rd command; carol drains gpu09 after its 6th.

Three runs, each on its own fresh lab and started together (the first is long: a hung
nvidia-smi costs its timeouts): xid79.yml with `-e drain_wait=3s` on the whole fleet,
health-sweep.yml on the whole fleet, and xid79.yml on gpu09 alone (in the whole-fleet run
gpu09 may be held by rack-02's cap, gpu07 being out for good, before carol's drain can happen).
A fourth: a user's runbook that reboots every node with `shell: sync; systemctl reboot`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import Run, fault_kinds, fleetfix_run, nodes, write_inventory
from tests.e2e.safety_support import (
    ActionRow,
    action_rows,
    harmful,
    is_reboot,
    is_reservation,
    query,
    reboots,
    unjournaled,
)
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(600)

REBOOT_TIME = 0.5
WIKI_REBOOT = Path(__file__).resolve().parents[1] / "fixtures/playbooks/user/wiki-reboot.yml"
DRAIN_WAIT = "drain_wait=3s"
BOB = "investigating NVLink, ticket OPS-2210"
CAROL = "carol: keep drained, RMA pending, OPS-2231"
DAVES_JOB = 51234
FIXABLE = ("gpu01", "gpu02")
NEVER_REBOOTED = ("gpu03", "gpu04", "gpu05", "gpu08", "gpu09")
SWEEP_UNHEALTHY = {"gpu01", "gpu02", "gpu03", "gpu05", "gpu06", "gpu07", "gpu09"}
"""In service (or Slurm unreadable) with Xid 79 or a hung nvidia-smi: the sweep names them.
gpu04 has the same Xid but bob has it drained: known, not counted."""


@dataclass(frozen=True, slots=True)
class Finished:
    """A run on its own traps lab and what it left there."""

    run: Run
    truth: dict[str, dict[str, Any]]
    audit: dict[str, list[dict[str, Any]]]
    rows: list[ActionRow]
    left: dict[str, tuple[str, str]]
    """host -> (kind, reason) of the run's HostLeft events."""
    step_seconds: dict[tuple[str, str], float]
    """(host, step) -> how long the step took on the host (last verdict)."""
    reservations: list[dict[str, Any]]
    """The Slurm reservations still there after the run (lab truth)."""


@dataclass(frozen=True, slots=True)
class Traps:
    fleet: Finished
    sweep: Finished
    takeover: Finished
    wiki: Finished


def _finished(playbook: str | Path, base: Path, *extra: str) -> Finished:
    with running_lab("traps", base / "lab", reboot_time=REBOOT_TIME) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        run = fleetfix_run(playbook, inventory, base, *extra, timeout=540)
        journal = base / "j.sqlite"
        left = {
            body["host"]: (body["kind"], body["reason"])
            for body in (
                json.loads(row[0])
                for row in query(journal, "SELECT body FROM events WHERE type='HostLeft'")
            )
        }
        seconds = {
            (str(host), str(step)): float(duration)
            for host, step, duration in query(
                journal, "SELECT host, step, duration FROM steps ORDER BY id"
            )
        }
        truth = lab.truth()
        return Finished(
            run, nodes(truth), lab.audit(), action_rows(journal), left, seconds,
            truth["reservations"],
        )  # fmt: skip


@pytest.fixture(scope="module")
def traps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traps]:
    with ThreadPoolExecutor(4, thread_name_prefix="traps") as pool:
        fleet = pool.submit(
            _finished, "xid79.yml", tmp_path_factory.mktemp("fleet"), "-e", DRAIN_WAIT
        )
        sweep = pool.submit(_finished, "health-sweep.yml", tmp_path_factory.mktemp("sweep"))
        takeover = pool.submit(
            _finished,
            "xid79.yml",
            tmp_path_factory.mktemp("takeover"),
            "-e",
            DRAIN_WAIT,
            "--limit",
            "gpu09",
        )
        wiki = pool.submit(_finished, WIKI_REBOOT, tmp_path_factory.mktemp("wiki"))
        yield Traps(fleet.result(), sweep.result(), takeover.result(), wiki.result())


def _held(run: Run) -> set[str]:
    return set(re.findall(r"^fatal: \[(\S+)\]: .*held: max_unavailable_per", run.stdout, re.M))


def _carol_fired(node: dict[str, Any]) -> bool:
    return any(e["change"] == "Drain" and e["fired_at_command"] for e in node["events"])


def test_owned_busy_and_unreadable_nodes_are_never_rebooted(traps: Traps) -> None:
    fleet = traps.fleet
    out = fleet.run.output
    for name in NEVER_REBOOTED:
        node = fleet.truth[name]
        assert node["boots"] == 1, f"{name} rebooted\n{out}"
        assert [e for e in node["audit"] if harmful(e)] == [], f"{name}: {node['audit']}"

    busy = fleet.truth["gpu03"]
    assert busy["slurm"]["job_id"] == DAVES_JOB, busy["slurm"]
    assert len(busy["gpu_processes"]) == 7, "dave's job lost GPU processes"

    bob = fleet.truth["gpu04"]
    assert (bob["slurm"]["drain"], bob["slurm"]["reason_user"], bob["slurm"]["reason"]) == (
        True,
        "bob",
        BOB,
    )
    assert bob["audit"] == [], "bob's node was touched"
    assert f"[gpu04] left alone: owned by bob: {BOB}" in fleet.run.stdout, out
    assert fleet.left["gpu04"][0] == "owned"

    dark = fleet.truth["gpu05"]
    assert dark["audit"] == [] and not dark["slurm"]["drain"] and dark["slurm"]["reason"] is None
    assert fleet.left["gpu05"][0] == "refused", fleet.left
    assert "cannot evaluate its safety gates" in fleet.left["gpu05"][1]

    late_job = fleet.truth["gpu08"]
    assert late_job["audit"] == [] and not late_job["slurm"]["drain"]

    carol = fleet.truth["gpu09"]
    if _carol_fired(carol):
        assert (carol["slurm"]["reason_user"], carol["slurm"]["reason"]) == ("carol", CAROL)
        assert "[gpu09] left alone: owned by carol" in fleet.run.stdout, out
    else:  # held by rack-02's cap before fleetfix drained it: not touched at all
        assert "gpu09" in _held(fleet.run), out
        assert carol["audit"] == [] and not carol["slurm"]["drain"]


def test_a_human_taking_a_node_over_mid_remediation_wins(traps: Traps) -> None:
    takeover = traps.takeover
    out = takeover.run.output
    node = takeover.truth["gpu09"]
    assert _carol_fired(node), f"carol's drain never happened: {node['events']}\n{out}"
    first = node["audit"][0]
    reason = next((a for a in first["argv"] if a.startswith("Reason=")), "")
    assert first["tool"] == "scontrol" and reason.startswith("Reason=fleetfix: xid79 remediation")
    assert node["boots"] == 1 and [e for e in node["audit"] if harmful(e)] == [], node["audit"]
    slurm = node["slurm"]
    assert (slurm["drain"], slurm["reason_user"], slurm["reason"]) == (True, "carol", CAROL)
    assert f"[gpu09] left alone: owned by carol: {CAROL}" in takeover.run.stdout, out
    assert takeover.left["gpu09"][0] == "owned"
    assert takeover.run.returncode == 2, out


def test_a_busy_node_is_deferred_and_the_rest_of_the_fleet_goes_on(traps: Traps) -> None:
    fleet = traps.fleet
    out = fleet.run.output
    busy = fleet.truth["gpu03"]
    reason = str(busy["slurm"]["reason"])
    assert busy["slurm"]["drain"] and reason.startswith("fleetfix: pending"), f"{reason}\n{out}"
    assert str(DAVES_JOB) in reason, reason
    assert busy["slurm"]["job_id"] == DAVES_JOB and busy["gpu_processes"]
    assert busy["boots"] == 1
    assert fleet.left.get("gpu03", ("", ""))[0] == "deferred", fleet.left
    drain_took = fleet.step_seconds[("gpu03", "drain in Slurm and wait for jobs to leave")]
    assert drain_took < 30, f"the run waited {drain_took:.0f}s for dave's job (drain_wait=3s)"

    for name in FIXABLE:
        node = fleet.truth[name]
        assert node["boots"] == 2, f"{name}\n{out}"
        assert sum(1 for e in node["audit"] if is_reboot(e)) == 1, node["audit"]
        assert not node["slurm"]["drain"] and node["slurm"]["reason"] is None, node["slurm"]
        assert "xid" not in fault_kinds(node), node["faults"]

    # A hold is exit 6 (it wins over 2). Only gpu09 may be held: it shares rack-02 with gpu07,
    # which stays out for good, and xid79.yml allows one node per rack out at once.
    held = _held(fleet.run)
    assert held <= {"gpu09"}, out
    assert fleet.run.returncode == (6 if held else 2), out


def test_a_gpu_that_does_not_come_back_keeps_the_node_out(traps: Traps) -> None:
    fleet = traps.fleet
    node = fleet.truth["gpu07"]
    assert node["boots"] == 2, node
    assert "gpu_missing_after_reboot" in fault_kinds(node)
    slurm = node["slurm"]
    assert slurm["drain"], f"gpu07 back in service with 7 of 8 GPUs\n{fleet.run.output}"
    assert str(slurm["reason"]).startswith("fleetfix:"), slurm
    assert re.search(r"cold power cycle|GPUs visible", str(slurm["reason"])), slurm
    resumes = [e for e in node["audit"] if "State=RESUME" in e["argv"]]
    assert resumes == [], node["audit"]
    # The reboot's own verification catches it now (the engine holds nvidia-smi to Slurm's
    # Gres), before slurm_resume's validation would: drained, needing a cold power cycle.
    assert "GPUs missing after reboot: 7 visible" in fleet.run.stdout, fleet.run.output


def test_no_drain_reason_claims_a_reboot_that_did_not_happen(traps: Traps) -> None:
    fleet = traps.fleet
    liars = {
        name: node["slurm"]["reason"]
        for name, node in fleet.truth.items()
        if "after reboot" in str(node["slurm"]["reason"]) and node["boots"] < 2
    }
    assert liars == {}, f"never rebooted, yet the reason says it was: {liars}"
    hung = fleet.truth["gpu06"]
    if "persists after reboot" in str(hung["slurm"]["reason"]):
        assert hung["boots"] > 1, hung


def test_every_disruptive_call_has_a_journal_intent(traps: Traps) -> None:
    """The lab saw every call; the journal must have said beforehand that it was coming."""
    assert reboots(traps.fleet.audit)["gpu01"] == 1, "the run did not get far enough"
    for finished in (traps.fleet, traps.takeover, traps.sweep):
        assert unjournaled(finished.audit, finished.rows) == [], finished.run.output
        assert {row.state for row in finished.rows} <= {"ok", "failed"}, finished.rows


def test_health_sweep_names_the_unhealthy_nodes_and_touches_none(traps: Traps) -> None:
    sweep = traps.sweep
    out = sweep.run.output
    assert sweep.run.returncode in (2, 4), out
    unhealthy = {host for host, (kind, _) in sweep.left.items() if kind == "unhealthy"}
    assert unhealthy == SWEEP_UNHEALTHY, out
    printed = set(re.findall(r"^  (gpu\d+): unhealthy: ", sweep.run.stdout, re.M))
    assert printed == SWEEP_UNHEALTHY, out
    assert {name for name, node in sweep.truth.items() if node["boots"] != 1} == set()
    touched = {
        name: kept
        for name, entries in sweep.audit.items()
        if (kept := [e for e in entries if not is_reservation(e)])
    }
    assert touched == {}, f"the sweep never takes a node out: {touched}"
    # Its nccl-tests ran inside reservations of their own, every one released.
    assert any(is_reservation(e) for entries in sweep.audit.values() for e in entries), out
    assert sweep.reservations == [], sweep.reservations


def test_the_audit_check_finds_a_call_without_an_intent() -> None:
    """unjournaled() itself: an intent must come first, and one reboot intent covers one reboot."""
    reboot = {"tool": "systemctl", "argv": ["reboot"], "at": 100.0}
    drain = {"tool": "scontrol", "argv": ["update", "NodeName=n1", "State=DRAIN"], "at": 100.0}
    intent = ActionRow(1, "r", "n1", "reboot", "ok", 99.0, "k")
    assert unjournaled({"n1": [reboot]}, [intent]) == []
    assert len(unjournaled({"n1": [reboot, {**reboot, "at": 101.0}]}, [intent])) == 1
    assert len(unjournaled({"n1": [{**reboot, "at": 98.0}]}, [intent])) == 1, "intent too late"
    assert len(unjournaled({"n1": [reboot]}, [ActionRow(1, "r", "n2", "reboot", "ok", 1, "")])) == 1
    undelivered = ActionRow(1, "r", "n1", "reboot", "undelivered", 99.0, "k")
    assert len(unjournaled({"n1": [reboot]}, [undelivered])) == 1, "it did happen"
    assert len(unjournaled({"n1": [drain]}, [intent])) == 1, "a reboot intent is no drain's"


def test_a_users_shell_reboot_gets_the_reboot_actions_gates(traps: Traps) -> None:
    """Safety that lives in the playbook does not hold: a runbook that reboots with a shell
    command still cannot reboot bob's node, dave's busy node or a node whose Slurm state
    cannot be read, and every reboot it does is journaled before it is sent."""
    wiki = traps.wiki
    out = wiki.run.output
    for name in ("gpu03", "gpu04", "gpu05"):
        assert wiki.truth[name]["boots"] == 1, f"{name} rebooted\n{out}"
        assert [e for e in wiki.truth[name]["audit"] if is_reboot(e)] == [], name
    assert wiki.truth["gpu04"]["audit"] == [], "bob's node was touched"
    assert wiki.left["gpu04"][0] == "owned" and wiki.left["gpu05"][0] == "refused", wiki.left
    assert wiki.truth["gpu03"]["slurm"]["job_id"] == DAVES_JOB
    rebooted = {name for name, node in wiki.truth.items() if node["boots"] > 1}
    assert rebooted, out  # the gates let the idle nodes through (up to the repair budget)
    assert unjournaled(wiki.audit, wiki.rows) == []
    assert {row.action for row in wiki.rows} == {"command (reboot)"}
    assert wiki.run.returncode != 0, out
