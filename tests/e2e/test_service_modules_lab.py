"""ansible.builtin.systemd / service in a user's runbook on the `traps` lab, judged by outcome:
the unit's state in the lab's truth, the lab's audit of systemctl calls, the journal, and the
exit code. A unit change is a mutating action: it holds to every engine gate.

traps (src/fleetfix/lab/scenarios/traps.yml): bob drained gpu04 (a reason without `fleetfix:`),
gpu05's Slurm cannot be read (scontrol fails), gpu10 is healthy and idle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import fleetfix_run, nodes, write_inventory
from tests.e2e.safety_support import action_rows, query, unjournaled
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(400)

MODULES = Path(__file__).parents[1] / "fixtures" / "playbooks" / "modules"
UNIT = "nvidia-persistenced"
BOB = "investigating NVLink, ticket OPS-2210"
LIMIT = ("--limit", "gpu04,gpu05,gpu10")


def _running(truth: dict[str, Any]) -> dict[str, bool]:
    return {name: node["services"][UNIT] for name, node in nodes(truth).items()}


def _systemctl_changes(audit: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, list[str]]:
    """host -> the systemctl verbs that change a unit the lab saw (stop, start, ...)."""
    return {
        host: [e["argv"][0] for e in entries if e["tool"] == "systemctl"]
        for host, entries in audit.items()
        if any(e["tool"] == "systemctl" for e in entries)
    }


def _left(journal: Path) -> dict[str, tuple[str, str]]:
    rows = query(journal, "SELECT body FROM events WHERE type='HostLeft'")
    bodies = [json.loads(row[0]) for row in rows]
    return {body["host"]: (body["kind"], body["reason"]) for body in bodies}


def test_systemd_stop_and_start_keep_every_engine_gate(tmp_path: Path) -> None:
    with running_lab("traps", tmp_path / "lab") as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        assert _running(lab.truth())["gpu10"], "the scenario should start with the unit running"
        planned = fleetfix_run(MODULES / "systemd_stop.yml", inventory, tmp_path, *LIMIT, "--check")
        after_check = _running(lab.truth())
        (tmp_path / "j.sqlite").unlink()
        stopped = fleetfix_run(MODULES / "systemd_stop.yml", inventory, tmp_path, *LIMIT)
        after_stop = _running(lab.truth())
        stop_journal = tmp_path / "stop.sqlite"
        (tmp_path / "j.sqlite").rename(stop_journal)
        started = fleetfix_run(
            MODULES / "systemd_start.yml", inventory, tmp_path, "--limit", "gpu10"
        )
        after_start, audit = _running(lab.truth()), lab.audit()
    # --check: the stop is planned on gpu10 (the playbook's asserts pass there), nothing stops.
    assert after_check["gpu10"], planned.output
    assert "gpu10" not in planned.hosts_with("failed"), planned.output
    # The stop: gpu10's unit stopped (the first call changed, the second did not: the
    # playbook's asserts), journaled before systemctl ran.
    assert not after_stop["gpu10"], stopped.output
    assert "gpu10" not in stopped.hosts_with("failed"), stopped.output
    assert stopped.recap["gpu10"]["changed"] == 1, stopped.output
    assert unjournaled(audit, action_rows(stop_journal)) == [], stopped.output
    # bob's node and the node whose Slurm cannot be read: left, the unit still running, and
    # no systemctl change ever sent to them (the lab's own audit).
    assert after_stop["gpu04"] and after_stop["gpu05"], stopped.output
    assert after_start["gpu04"] and after_start["gpu05"], stopped.output
    left = _left(stop_journal)
    assert left["gpu04"] == ("owned", f"left alone: owned by bob: {BOB}"), stopped.output
    assert left["gpu05"][0] == "refused" and "cannot evaluate" in left["gpu05"][1], stopped.output
    assert "left alone: owned by bob" in stopped.stdout, stopped.output
    changes = _systemctl_changes(audit)
    assert "gpu04" not in changes and "gpu05" not in changes, changes
    assert stopped.returncode == 2, stopped.output  # hosts were left: README's exit code
    assert planned.returncode == 2, planned.output  # --check is left on them too
    # service (a systemd node: it is systemd) starts it again and enables it; a second start
    # changes nothing; a unit the node lacks fails with Ansible's message (asserted in the
    # playbook).
    assert after_start["gpu10"], started.output
    assert started.returncode == 0, started.output
    assert changes["gpu10"] == ["stop", "start"], changes
