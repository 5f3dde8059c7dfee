"""`fleetfix report RUN` from the journal alone (no -i) gives the reports the live run wrote:
the demo's run (xid79 on the demo scenario), its live JSON and JUnit against the replayed ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.e2e.labrun import fleetfix_run, run_env, write_inventory
from tests.e2e.test_demo_lab import demo_target
from tests.lab.support import running_lab


def _replay(work: Path, run_id: str, *reports: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "fleetfix", "report", run_id, "--journal", str(work / "j.sqlite")]
    argv += [a for path in reports for a in ("--report", str(path))]
    return subprocess.run(
        argv, check=False, capture_output=True, text=True, env=run_env(), cwd=work, timeout=120
    )


def _hosts(data: dict[str, Any]) -> dict[str, tuple[str, dict[str, str], dict[str, int]]]:
    return {h["name"]: (h["verdict"]["kind"], h["domains"], h["recap"]) for h in data["hosts"]}


def test_report_from_the_journal_alone_matches_the_live_run(tmp_path: Path) -> None:
    demo = demo_target()
    live_json, live_xml = tmp_path / "live.json", tmp_path / "live.xml"
    with running_lab(demo.scenario, tmp_path / "lab", reboot_time=0.5) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        extra = ("-e", f"drain_wait={demo.drain_wait}", "-e", "power_cycle=true")
        reports = ("--report", str(live_json), "--report", str(live_xml))
        done = fleetfix_run(demo.playbook, inventory, tmp_path, *extra, *reports)
    assert done.returncode == 2, done.output[-4000:]
    run_id = done.stdout.partition("run id: ")[2].split()[0]
    replay_json, replay_xml = tmp_path / "replay.json", tmp_path / "replay.xml"
    replayed = _replay(tmp_path, run_id, replay_json, replay_xml)
    assert replayed.returncode == 0, replayed.stderr
    live, again = json.loads(live_json.read_text()), json.loads(replay_json.read_text())
    assert _hosts(again) == _hosts(live)
    assert {h["domains"].get("rack") for h in again["hosts"]} - {None}  # the tree is back
    assert again["topology"] == live["topology"]
    assert again["summary"] == live["summary"]
    assert again["actions"] == live["actions"]
    assert replay_xml.read_text() == live_xml.read_text()
    # The console summary too: the recap and the hosts left, as the live run printed them.
    assert "PLAY RECAP" in replayed.stdout
