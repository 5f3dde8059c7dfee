"""`fleetfix run --metrics-file` on the xid79 lab: the textfile's figures against the run's
exit code, its output, the journal and the lab's truth."""

from __future__ import annotations

import re
import sqlite3
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.journal import Journal
from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import Run, fleetfix_run, nodes, write_inventory
from tests.lab.support import running_lab
from tests.unit.metrics.promtext import MetricFamily, parse, samples, value

DRAIN_WAIT = ("-e", "drain_wait=3s")
BUDGET_HELD = re.compile(r"^fatal: \[\S+\]: FAILED! .*held: repair budget reached", re.M)


@pytest.fixture
def xid79_lab(tmp_path: Path) -> Iterator[LabHandle]:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.5) as handle:
        yield handle


def metrics_run(lab: LabHandle, workdir: Path, *extra: str) -> tuple[Run, dict[str, MetricFamily]]:
    inventory = write_inventory(lab, workdir / "lab.ini")
    path = workdir / "textfile" / "fleetfix.prom"
    path.parent.mkdir()
    # drain_wait: gpu005's job outlives the drain (the demo's busy node); deferred after 3 s
    run = fleetfix_run(
        "xid79.yml", inventory, workdir, "--metrics-file", str(path), *DRAIN_WAIT, *extra
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # No temporary left; beside the file, its lock and the runs it merges (docs/metrics.md)
    found = sorted(p.name for p in path.parent.iterdir())
    assert found == ["fleetfix.prom", "fleetfix.prom.lock", "fleetfix.prom.runs.json"]
    return run, parse(path.read_text())


def run_id(run: Run) -> str:
    found = re.search(r"^run id: (\S+)", run.stdout, re.M)
    assert found is not None, run.output
    return found.group(1)


def journal_actions(journal: Path, run: str) -> tuple[Counter[tuple[str, str]], Counter[str]]:
    """(action, state) -> rows, and action -> rows, of the run's `actions` rows."""
    with sqlite3.connect(f"file:{journal}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT action, state, COUNT(*) FROM actions WHERE run_id=? GROUP BY action, state",
            (run,),
        ).fetchall()
    by_state = Counter({(action, state): count for action, state, count in rows})
    by_action: Counter[str] = Counter()
    for (action, _), count in by_state.items():
        by_action[action] += count
    return by_state, by_action


def test_xid79_metrics_match_the_run_the_journal_and_the_lab(
    xid79_lab: LabHandle, tmp_path: Path
) -> None:
    run, families = metrics_run(xid79_lab, tmp_path)
    assert run.returncode == 2, run.output
    assert value(families, "fleetfix_run_outcome", playbook="xid79.yml") == run.returncode
    assert value(families, "fleetfix_run_info", run_id=run_id(run), check="false") == 1
    assert value(families, "fleetfix_run_in_progress") == 0

    by_state, by_action = journal_actions(tmp_path / "j.sqlite", run_id(run))
    finished = {
        (labels["action"], labels["outcome"]): count
        for labels, count in samples(families, "fleetfix_actions_total")
    }
    # The journal's state says whether an action's commands ran (what a resume needs); the
    # metric's outcome is the engine's verdict, verification included: gpu007's reboot ran
    # and did not bring its GPU back.
    assert all(state in ("ok", "failed") for _, state in by_state)
    expected = by_state.copy()
    expected.subtract({("reboot", "ok"): 1})
    expected.update({("reboot", "failed"): 1})
    assert finished == dict(+expected)
    assert "reboot: verification failed" in run.stdout, run.output
    started = {
        labels["action"]: count
        for labels, count in samples(families, "fleetfix_actions_started_total")
    }
    assert started == by_action

    # gpu003 and gpu011 are fixed by a reboot; gpu007's Xid 79 is not: it stays drained. The
    # busy gpu005 is drained, its job outlives the drain wait: it stays drained (deferred).
    truth = nodes(xid79_lab.truth())
    assert truth["gpu007"]["slurm"]["drain"] and not truth["gpu003"]["slurm"]["drain"]
    assert truth["gpu005"]["slurm"]["drain"] and truth["gpu005"]["boots"] == 1
    out = samples(families, "fleetfix_host_out_of_service_seconds")
    assert [labels["host"] for labels, _ in out] == ["gpu005", "gpu007"]
    assert all(0 <= seconds < 240 for _, seconds in out)
    assert value(families, "fleetfix_hosts_out_of_service") == 2
    assert value(families, "fleetfix_hosts_taken_out_total") == 4
    assert value(families, "fleetfix_hosts_returned_total") == 2

    phase = "fleetfix_repair_phase_seconds_count"
    assert value(families, phase, phase="detect") == 4
    assert value(families, phase, phase="drain") == 4  # gpu007's and gpu005's drains counted too
    assert value(families, phase, phase="fix") == 3  # not gpu005: never rebooted under its job
    assert value(families, phase, phase="validate") == 2
    assert value(families, phase, phase="return") == 2
    assert value(families, "fleetfix_repair_seconds_count") == 2
    assert value(families, "fleetfix_repair_seconds_sum") <= value(
        families, "fleetfix_run_duration_seconds"
    )

    left = {labels["kind"]: count for labels, count in samples(families, "fleetfix_hosts_left")}
    # gpu014, 005, 007; none leased by another run
    assert left == {"owned": 1, "deferred": 1, "refused": 0, "unhealthy": 1, "leased": 0}
    assert sum(left.values()) == len(run.left) == 3
    journal = Journal(tmp_path / "j.sqlite")
    try:
        verdicts = Counter(str(row["status"]) for row in journal.step_rows(run_id(run)))
    finally:
        journal.close()
    steps = {
        labels["status"]: count for labels, count in samples(families, "fleetfix_host_steps_total")
    }
    assert {status: count for status, count in steps.items() if count} == verdicts
    assert value(families, "fleetfix_budget_refusals_total") == 0


def test_budget_refusals_are_counted(xid79_lab: LabHandle, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")  # another run already has a host out
    try:
        journal.start_run("other.yml", [], check=False, hosts=1)
        assert journal.take_out("gpu099", "disruptive", None) is None
        journal.finish_run(2)
    finally:
        journal.close()
    run, families = metrics_run(xid79_lab, tmp_path, "--repair-budget", "1")
    assert run.returncode == 6, run.output
    assert value(families, "fleetfix_run_outcome") == 6
    held = len(BUDGET_HELD.findall(run.stdout))
    assert held >= 3  # every Xid 79 node's drain, at least
    assert value(families, "fleetfix_budget_refusals_total") == held
    assert value(families, "fleetfix_holds_total", reason="repair_budget") == held
    assert samples(families, "fleetfix_actions_started_total") == []
    assert [
        labels["host"] for labels, _ in samples(families, "fleetfix_host_out_of_service_seconds")
    ] == ["gpu099"]


def test_an_unwritable_metrics_file_is_a_warning_not_a_lost_run(
    xid79_lab: LabHandle, tmp_path: Path
) -> None:
    inventory = write_inventory(xid79_lab, tmp_path / "lab.ini")
    missing = tmp_path / "no-such-dir" / "fleetfix.prom"
    run = fleetfix_run("xid79.yml", inventory, tmp_path, "--check", "--metrics-file", str(missing))
    assert run.returncode == 2, run.output  # the demo's protected nodes, as without the file
    assert f"WARNING: cannot write the metrics file {missing}" in run.stderr
    assert run.stderr.count("cannot write the metrics file") == 1
    assert not missing.parent.exists()
