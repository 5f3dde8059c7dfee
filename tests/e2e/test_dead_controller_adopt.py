"""A dead controller strands the node it drained; the next run that covers it adopts it.

The `xid79` lab (src/fleetfix/lab/scenarios/xid79.yml): gpu003 and gpu011 have an Xid 79 a
reboot fixes. A controller is killed (SIGKILL: no release, no finish) right after gpu003's
reboot; a fresh run (not --resume) on gpu003 and gpu011 with a repair budget of one must:
return gpu003 to service without rebooting it again, take it off the budget, and so have room
to repair gpu011. Judged by the lab's truth and audit, and the journal's rows.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.labrun import fleetfix_run, run_argv, write_inventory
from tests.e2e.safety_support import StopAt, interrupt, query, reboots, started_run, wait_stopped
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(600)


def test_a_fresh_run_returns_a_dead_runs_drained_node_to_service(tmp_path: Path) -> None:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        journal = tmp_path / "j.sqlite"
        boots = lab.truth()["nodes"]["gpu003"]["boots"]
        argv = run_argv("xid79.yml", inventory, journal, "--limit", "gpu003")
        after_reboot = StopAt("ActionTaken", 1, '"action": "reboot"')
        with started_run(argv, tmp_path, "dead", after_reboot) as dead:
            wait_stopped(dead)
            assert interrupt(dead, signal.SIGKILL) == -signal.SIGKILL
        slurm = lab.truth()["nodes"]["gpu003"]["slurm"]
        assert slurm["drain"] and "fleetfix" in slurm["reason"], slurm  # stranded
        assert query(journal, "SELECT host FROM out_of_service") == [("gpu003",)]

        fresh = fleetfix_run(
            "xid79.yml", inventory, tmp_path, "--limit", "gpu003:gpu011", "--repair-budget", "1"
        )
        assert fresh.returncode == 0, fresh.output
        assert "adopt: validate and return to service" in fresh.stdout
        truth = lab.truth()["nodes"]
        for name in ("gpu003", "gpu011"):
            slurm = truth[name]["slurm"]
            assert (slurm["state"], slurm["drain"]) == ("IDLE", False), (name, slurm)
            assert "xid79" not in {f["kind"] for f in truth[name]["faults"]}
        rebooted = {name: n for name, n in reboots(lab.audit()).items() if n}
        assert rebooted == {"gpu003": 1, "gpu011": 1}, rebooted  # gpu003 not rebooted twice
        assert truth["gpu003"]["boots"] == boots + 1
        assert query(journal, "SELECT host FROM out_of_service") == []
