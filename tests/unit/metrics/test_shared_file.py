"""Two runs on one controller with the same --metrics-file keep each other's figures (issue
19: one run's reboots vanished). Two real processes write the file at once, many times; the
file ends with both runs' reboots, merged by metric name under the file's lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from fleetfix.events import ActionStarted, ActionTaken, HostStepFinished, RunFinished, RunStarted
from fleetfix.metrics import MetricsTextfile, RunMetrics
from fleetfix.results import RunResult, Status, StepResult
from tests.unit.metrics.promtext import MetricFamily, parse, value

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tests.unit.metrics.test_shared_file import reboots
    run_id, count, path, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    print("ready", flush=True)
    while not go.exists():
        pass
    asyncio.run(reboots(path, run_id, count))
    """
)


async def reboots(path: Path, run_id: str, count: int, playbook: str = "xid79.yml") -> None:
    """A run of `count` reboots (one host each) that rewrites the file after each."""
    metrics = RunMetrics(playbook)
    textfile = MetricsTextfile(path, metrics, every=0)
    hosts = tuple(f"{run_id}-{n}" for n in range(count))
    textfile(RunStarted(run_id=run_id, playbook=playbook, hosts=hosts, check=False))
    for host in hosts:
        textfile(ActionStarted(host=host, step="reboot", key="k", action="reboot"))
        textfile(ActionTaken(host=host, step="reboot", key="k", action="reboot", failed=False))
        result = StepResult(host=host, step="reboot", status=Status.CHANGED, key="k")
        textfile(HostStepFinished(result=result))
        assert textfile.write()
    textfile(RunFinished(result=RunResult()))
    await textfile.finish()


def read(path: Path) -> dict[str, MetricFamily]:
    return parse(path.read_text())


def test_two_processes_keep_both_runs_reboots(tmp_path: Path) -> None:
    path, go = tmp_path / "fleetfix.prom", tmp_path / "go"
    root = Path(__file__).parents[3]
    runs = {"run-a": 40, "run-b": 25}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, run_id, str(count), str(path), str(go)],
            cwd=root,
            stdout=subprocess.PIPE,
            text=True,
        )
        for run_id, count in runs.items()
    ]
    for writer in writers:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    go.touch()  # both start writing at once
    for writer in writers:
        writer.communicate(timeout=60)
        assert writer.returncode == 0
    families = read(path)
    reboots_ok = value(families, "fleetfix_actions_total", action="reboot", outcome="ok")
    assert reboots_ok == sum(runs.values())
    assert value(families, "fleetfix_actions_started_total", action="reboot") == 65
    assert value(families, "fleetfix_run_in_progress") == 0
    assert value(families, "fleetfix_run_outcome") == 0


async def test_a_later_run_replaces_one_that_had_ended(tmp_path: Path) -> None:
    path = tmp_path / "fleetfix.prom"
    await reboots(path, "night-1", 3)
    await reboots(path, "night-2", 2)  # started after night-1 ended: replaces it
    assert value(read(path), "fleetfix_actions_total", action="reboot", outcome="ok") == 2
    await reboots(path, "other", 4, playbook="ecc.yml")  # another playbook: both kept
    families = read(path)
    for playbook, count in (("xid79.yml", 2), ("ecc.yml", 4)):
        found = value(
            families, "fleetfix_actions_total", playbook=playbook, action="reboot", outcome="ok"
        )
        assert found == count


async def test_a_run_going_on_is_counted_in_progress(tmp_path: Path) -> None:
    path = tmp_path / "fleetfix.prom"
    going = MetricsTextfile(path, RunMetrics("xid79.yml"), every=0)
    going(RunStarted(run_id="long", playbook="xid79.yml", hosts=("a",), check=False))
    assert going.write()
    await reboots(path, "short", 1)  # overlaps the long run, which goes on
    families = read(path)
    assert value(families, "fleetfix_run_in_progress") == 1
    assert value(families, "fleetfix_actions_total", action="reboot", outcome="ok") == 1
    going(RunFinished(result=RunResult()))
    await going.finish()
    assert value(read(path), "fleetfix_run_in_progress") == 0
    assert value(read(path), "fleetfix_actions_total", action="reboot", outcome="ok") == 1
