"""--resume goes on with the interrupted run's --limit, -e, --tags, --skip-tags and --check,
or refuses (exit 5) and changes nothing: a resume of `drain.yml --limit gpu001,gpu002` that
forgot the --limit would go on to drain the whole fleet."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.labrun import fleetfix_run, nodes, run_argv, write_inventory
from tests.e2e.safety_support import StopAt, interrupt, only_run_id, started_run, wait_stopped
from tests.lab.support import running_lab

pytestmark = [pytest.mark.slow]

BAD_OPTIONS = 5
SCOPE = ("--limit", "gpu001,gpu002", "-e", "reason=fan-swap")


def _drained(view: dict[str, dict[str, object]]) -> set[str]:
    return {name for name, node in view.items() if node["slurm"]["drain"]}  # type: ignore[index]


def test_a_resume_with_another_scope_is_refused_and_the_same_one_finishes(
    tmp_path: Path,
) -> None:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        journal = tmp_path / "j.sqlite"
        before = _drained(nodes(lab.truth()))  # bob's gpu014
        argv = run_argv("drain.yml", inventory, journal, *SCOPE)
        with started_run(argv, tmp_path, "first", StopAt("TaskStarted")) as first:
            wait_stopped(first)
            assert interrupt(first, signal.SIGKILL) == -signal.SIGKILL
        run_id = only_run_id(journal)

        refusals = {
            "no --limit": ("-e", "reason=fan-swap"),
            "another -e": ("--limit", "gpu001,gpu002", "-e", "reason=other"),
            "--check added": (*SCOPE, "--check"),
        }
        refused = {
            why: fleetfix_run("drain.yml", inventory, tmp_path, "--resume", run_id, *extra)
            for why, extra in refusals.items()
        }
        after_refusals = _drained(nodes(lab.truth()))
        resumed = fleetfix_run("drain.yml", inventory, tmp_path, "--resume", run_id, *SCOPE)
        view = nodes(lab.truth())

    for why, run in refused.items():
        assert run.returncode == BAD_OPTIONS, f"{why}: {run.output[-2000:]}"
        assert f"cannot resume run {run_id} with other options" in run.stderr, run.stderr
    assert "--limit was 'gpu001,gpu002', now none" in refused["no --limit"].stderr
    assert "-e was 'reason=fan-swap', now 'reason=other'" in refused["another -e"].stderr
    assert "--check was off, now on" in refused["--check added"].stderr
    assert after_refusals == before, "a refused resume drained nodes"
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert _drained(view) == before | {"gpu001", "gpu002"}
    assert view["gpu001"]["slurm"]["reason"] == f"fleetfix: fan-swap (run {run_id})"


def _only(inventory: Path, keep: set[str], path: Path) -> Path:
    """The inventory with every other gpuNNN host line left out."""
    lines = inventory.read_text().splitlines()
    kept = [line for line in lines if not line.startswith("gpu") or line.split()[0] in keep]
    path.write_text("\n".join(kept) + "\n")
    return path


def test_a_resume_over_hosts_the_run_did_not_cover_is_refused(tmp_path: Path) -> None:
    """The same options, but an inventory that grew since the run: refused, nothing drained;
    with the run's inventory the resume drains its two hosts."""
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.3) as lab:
        full = write_inventory(lab, tmp_path / "lab.ini")
        small = _only(full, {"gpu001", "gpu002"}, tmp_path / "small.ini")
        journal = tmp_path / "j.sqlite"
        before = _drained(nodes(lab.truth()))
        options = ("--repair-budget", "none")
        argv = run_argv("drain.yml", small, journal, *options)
        with started_run(argv, tmp_path, "first", StopAt("TaskStarted")) as first:
            wait_stopped(first)
            assert interrupt(first, signal.SIGKILL) == -signal.SIGKILL
        run_id = only_run_id(journal)
        grown = fleetfix_run("drain.yml", full, tmp_path, "--resume", run_id, *options)
        after_refusal = _drained(nodes(lab.truth()))
        resumed = fleetfix_run("drain.yml", small, tmp_path, "--resume", run_id, *options)
        view = nodes(lab.truth())
    assert grown.returncode == BAD_OPTIONS, grown.output[-2000:]
    assert (
        f"cannot resume run {run_id}: it would cover hosts the run did not: gpu003, gpu004,"
        " gpu005, gpu006, gpu007 and 9 more." in grown.stderr
    ), grown.stderr
    assert after_refusal == before
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert _drained(view) == before | {"gpu001", "gpu002"}
