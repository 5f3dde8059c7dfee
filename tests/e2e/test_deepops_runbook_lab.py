"""A deepops-style driver repair runbook, written for ansible-playbook, runs unchanged on the
`traps` lab (issue 22): Ansible's default fact gathering (the loaded driver's version from
`ansible_facts.gpus`), an `apt` version pin of the fabric manager, a handler that restarts it,
`reboot` and `wait_for_connection` only where the pin changed something, and a verification.
Judged by the lab's truth: packages, boots, the audit of disruptive calls and the journal.

traps: gpu10 and gpu11 are healthy and idle (H100, driver 550.90.07, fabric manager running).
The test first puts an older fabric manager (550.54.15-1) on gpu10: the mismatch to repair.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import fleetfix_run, nodes, write_inventory
from tests.e2e.safety_support import action_rows, reboots, unjournaled
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(400)

DEEPOPS = Path(__file__).parents[1] / "fixtures" / "playbooks" / "deepops"
FM = "nvidia-fabricmanager-550"
LIMIT = ("--limit", "gpu10,gpu11")


def _tools(audit: list[dict[str, Any]]) -> list[str]:
    return [" ".join([entry["tool"], *entry["argv"]]) for entry in audit]


def test_a_deepops_runbook_runs_unchanged_in_check_mode_and_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANSIBLE_GATHERING", raising=False)  # Ansible's default: gather
    with running_lab("traps", tmp_path / "lab", reboot_time=0.5) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        setup = fleetfix_run(DEEPOPS / "downgrade.yml", inventory, tmp_path, "--limit", "gpu10")
        assert setup.returncode == 0, setup.output
        before, audit_before = nodes(lab.truth()), lab.audit()
        assert before["gpu10"]["packages"][FM] == "550.54.15-1"

        check = fleetfix_run(DEEPOPS / "driver-repair.yml", inventory, tmp_path, "--check", *LIMIT)
        after_check, audit_check = nodes(lab.truth()), lab.audit()

        live = fleetfix_run(DEEPOPS / "driver-repair.yml", inventory, tmp_path, *LIMIT)
        after, audit = nodes(lab.truth()), lab.audit()

    # --check: the plan says what would change on gpu10 only, and nothing changed anywhere.
    assert check.returncode == 0, check.output
    assert "changed: [gpu10]" in check.stdout and "would run: systemctl restart" in check.stdout
    shipped = {"gpu10": "550.54.15-1", "gpu11": "550.90.07-1"}  # the downgrade, the default
    for name in ("gpu10", "gpu11"):
        assert after_check[name]["packages"][FM] == shipped[name], check.output
        assert after_check[name]["boots"] == before[name]["boots"], check.output
        assert audit_check.get(name, []) == audit_before.get(name, []), check.output

    # Live: gpu10's fabric manager now matches the driver; it was restarted by the handler and
    # the node rebooted once, journaled before it was sent; the verification passed.
    assert live.returncode == 0, live.output
    assert after["gpu10"]["packages"][FM] == "550.90.07-1", live.output
    assert after["gpu10"]["boots"] == before["gpu10"]["boots"] + 1, live.output
    assert reboots(audit).get("gpu10") == 1, live.output
    new = _tools(audit["gpu10"][len(audit_before.get("gpu10", [])) :])
    assert [t for t in new if t.startswith("apt-get")] != [], new
    assert [t for t in new if "restart" in t and "nvidia-fabricmanager" in t] != [], new
    assert after["gpu10"]["fabric"]["manager"] == "active", after["gpu10"]["fabric"]
    assert unjournaled(audit, action_rows(tmp_path / "j.sqlite")) == [], live.output
    # gpu11 already matched: the pin changed nothing, so no restart, no reboot, no call.
    assert after["gpu11"]["packages"] == after_check["gpu11"]["packages"]
    assert after["gpu11"]["boots"] == before["gpu11"]["boots"]
    assert audit.get("gpu11", []) == audit_before.get("gpu11", []), live.output
