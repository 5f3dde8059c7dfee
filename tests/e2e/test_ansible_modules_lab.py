"""Ansible modules in a user's runbook on the `traps` lab, judged by outcome (boots, Slurm,
audit of disruptive calls, journal): a module that takes a node down holds to every engine
invariant a shipped playbook does.

traps (src/fleetfix/lab/scenarios/traps.yml): gpu03 runs dave's job 51234, bob drained gpu04,
gpu05's Slurm cannot be read, gpu10 is healthy and idle.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.labrun import fleetfix_run, nodes, write_inventory
from tests.e2e.safety_support import action_rows, query, reboots, unjournaled
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(400)

MODULES = Path(__file__).parents[1] / "fixtures" / "playbooks" / "modules"
BOB = "investigating NVLink, ticket OPS-2210"


def test_reboot_module_keeps_every_engine_gate(tmp_path: Path) -> None:
    with running_lab("traps", tmp_path / "lab", reboot_time=0.5) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        before = nodes(lab.truth())
        run = fleetfix_run(
            MODULES / "reboot.yml", inventory, tmp_path, "--limit", "gpu03,gpu04,gpu05,gpu10"
        )
        truth, audit = nodes(lab.truth()), lab.audit()
    journal = tmp_path / "j.sqlite"
    out = run.output
    # The healthy idle node is rebooted once, journaled before it was sent, and the
    # playbook's assert on the module's return values passed there.
    assert truth["gpu10"]["boots"] == before["gpu10"]["boots"] + 1, out
    assert reboots(audit).get("gpu10") == 1, out
    assert unjournaled(audit, action_rows(journal)) == [], out
    assert "gpu10" not in run.left, out
    # No other node was rebooted or touched in Slurm.
    for name in ("gpu03", "gpu04", "gpu05"):
        assert truth[name]["boots"] == before[name]["boots"], f"{name} rebooted\n{out}"
        assert truth[name]["slurm"] == before[name]["slurm"], f"{name} Slurm changed\n{out}"
        assert reboots(audit).get(name, 0) == 0, out
    assert truth["gpu03"]["slurm"]["job_id"] == 51234
    left = {
        body["host"]: (body["kind"], body["reason"])
        for body in (
            json.loads(row[0])
            for row in query(journal, "SELECT body FROM events WHERE type='HostLeft'")
        )
    }
    assert left["gpu04"] == ("owned", f"left alone: owned by bob: {BOB}"), out
    assert left["gpu05"][0] == "refused" and "cannot evaluate" in left["gpu05"][1], out
    # The busy node: the reboot is refused (the step fails) and dave's job runs on.
    assert "fatal: [gpu03]: FAILED! => " in run.stdout, out
    assert "reboot refused: GPU processes are running" in run.stdout, out
    assert run.returncode == 2, out  # hosts were left: the run says so in its exit code
