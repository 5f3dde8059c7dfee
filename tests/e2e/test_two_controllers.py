"""Two controllers, one fleet: two `fleetfix run` processes sharing one PostgreSQL journal on
one lab, on overlapping hosts. Judged by outcome: the lab's boot counts and its audit of
disruptive calls, and the shared journal's rows.

The `xid79` lab (src/fleetfix/lab/scenarios/xid79.yml): gpu003 and gpu011 have an Xid 79 a
reboot fixes, gpu007 one no reboot fixes, gpu005 runs a job, bob drained gpu014.
"""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import REPO, fleetfix_run, node_shell, run_argv, run_env, write_inventory
from tests.e2e.safety_support import ActionRow, reboots, started_run, unjournaled
from tests.lab.support import running_lab
from tests.support import wait_until
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.timeout(600)

DRAIN_WAIT = "drain_wait=3s"
RACK_1 = "leaf_01"
RACK_2_AND_MORE = "leaf_02:gpu005:gpu007"
"""Overlaps leaf 1 (gpu001..gpu008) on gpu005 and gpu007."""
TEAM_PLAYBOOKS = REPO / "tests" / "fixtures" / "playbooks" / "team"
REBOOT_ONCE = TEAM_PLAYBOOKS / "reboot-once.yml"
DRAIN_WAIT_REBOOT = TEAM_PLAYBOOKS / "drain-wait-reboot.yml"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabHandle]:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.3) as handle:
        yield handle


@pytest.fixture
def dsn(postgres_server: PostgresServer) -> str:
    return postgres_server.fresh_database()


def _rows(dsn: str) -> list[ActionRow]:
    with psycopg.connect(dsn) as db:
        found = db.execute(
            "SELECT id, run_id, host, action, state, at, step_key FROM actions ORDER BY id"
        ).fetchall()
    return [ActionRow(int(r[0]), r[1], r[2], r[3], r[4], float(r[5]), r[6]) for r in found]


def _sessions(dsn: str) -> int:
    """fleetfix's connections to the database, other than this one."""
    with psycopg.connect(dsn) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name='fleetfix'"
        ).fetchone()
    return int(row[0]) if row else 0


def _argv(playbook: str | Path, inventory: Path, dsn: str, *extra: str) -> Sequence[str]:
    argv = run_argv(playbook, inventory, Path("unused"), *extra)
    argv[argv.index("unused")] = dsn
    return argv


def test_overlapping_controllers_act_on_each_node_once(
    lab: LabHandle, dsn: str, tmp_path: Path
) -> None:
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    before = {name: node["boots"] for name, node in lab.truth()["nodes"].items()}
    first = _argv("xid79.yml", inventory, dsn, "--limit", RACK_1, "-e", DRAIN_WAIT)
    second = _argv("xid79.yml", inventory, dsn, "--limit", RACK_2_AND_MORE, "-e", DRAIN_WAIT)
    with (
        started_run(first, tmp_path, "first") as one,
        started_run(second, tmp_path, "second") as two,
    ):
        codes = (one.wait(300), two.wait(300))
        outputs = (one.output(), two.output())
    # Both asked for gpu005 and gpu007 at once: one got both (its leases are one transaction),
    # the other left just those two out, named each with its holder, worked on the rest of its
    # hosts and exits 6 for the two it left.
    refused = [i for i, out in enumerate(outputs) if "left out: leased by run" in out]
    assert len(refused) == 1, f"exit codes {codes}\n{outputs[0]}\n{outputs[1]}"
    assert codes[refused[0]] == 6
    left = re.findall(r"\[(gpu\d+)\] left out: leased by run", outputs[refused[0]])
    assert sorted(left) == ["gpu005", "gpu007"], outputs[refused[0]]
    # The refused one, run again now, finds the overlap already done (or left for an RMA).
    again = fleetfix_run(
        "xid79.yml", inventory, tmp_path, "--limit", (RACK_1, RACK_2_AND_MORE)[refused[0]],
        "-e", DRAIN_WAIT, "--journal", dsn,
    )  # fmt: skip
    assert again.returncode in (0, 2), again.output

    truth = lab.truth()
    audit = lab.audit()
    rebooted = reboots(audit)
    assert rebooted.get("gpu003") == 1 and rebooted.get("gpu011") == 1, rebooted
    for name in ("gpu003", "gpu011"):
        assert truth["nodes"][name]["boots"] == before[name] + 1
        slurm = truth["nodes"][name]["slurm"]
        assert (slurm["state"], slurm["drain"]) == ("IDLE", False), slurm
    # gpu007 never recovers: whichever controller held it rebooted it once and left it drained
    # "needs a human: cold power cycle"; the other, run again, leaves it for that person instead
    # of rebooting it again.
    assert rebooted.get("gpu007") == 1, rebooted
    for name in ("gpu005", "gpu014"):  # busy, human-drained: never touched by either
        assert rebooted.get(name, 0) == 0
    rows = _rows(dsn)
    assert unjournaled(audit, rows) == []
    # No host was ever worked on by two runs at once: each host's actions come run by run.
    for host in {row.host for row in rows}:
        runs = [row.run_id for row in rows if row.host == host]
        changes = sum(1 for a, b in itertools.pairwise(runs) if a != b)
        assert changes == len(set(runs)) - 1, (host, runs)


def test_the_attempt_cap_holds_across_controllers(lab: LabHandle, dsn: str, tmp_path: Path) -> None:
    """max_attempts: 1 on gpu007, whose fault no reboot fixes: the first controller reboots it,
    the second (another process, same database) refuses to."""
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    first = fleetfix_run(REBOOT_ONCE, inventory, tmp_path, "--limit", "gpu007", "--journal", dsn)
    assert reboots(lab.audit()).get("gpu007") == 1, first.output
    second = fleetfix_run(REBOOT_ONCE, inventory, tmp_path, "--limit", "gpu007", "--journal", dsn)
    assert second.returncode == 2, second.output
    assert "max_attempts 1" in second.stdout, second.output
    assert reboots(lab.audit()).get("gpu007") == 1
    assert [row.action for row in _rows(dsn)] == ["reboot"]


def test_a_killed_controllers_hosts_are_taken_over_only_once_it_is_known_dead(
    dsn: str, tmp_path: Path
) -> None:
    """traps lab: gpu03 has an Xid 79 under dave's job; a controller draining it waits for the
    job (drain_wait=10m), holding gpu03 all that time."""
    with running_lab("traps", tmp_path / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        limit = ("--limit", "gpu03")
        holder = _argv("xid79.yml", inventory, dsn, *limit, "-e", "drain_wait=10m")
        with started_run(holder, tmp_path, "holder") as stuck:
            assert wait_until(lambda: "TASK [drain" in stuck.output(), 60), stuck.output()
            run_id = re.search(r"run id: (\S+)", stuck.output())
            assert run_id is not None
            blocked = fleetfix_run("xid79.yml", inventory, tmp_path, *limit, "--journal", dsn)
            assert blocked.returncode == 6, blocked.output
            assert f"run {run_id[1]}" in blocked.stderr, blocked.output
            assert "nothing to do: all 1 host(s) are leased by other runs" in blocked.stdout
            stuck.process.send_signal(signal.SIGKILL)  # no release, no finish: only its death
            stuck.wait(30)
        assert wait_until(lambda: _sessions(dsn) == 0, 30)  # the server saw the session end
        taken = fleetfix_run(
            "xid79.yml", inventory, tmp_path, *limit, "--journal", dsn, "-e", DRAIN_WAIT
        )
        assert "is being remediated" not in taken.output, taken.output
        assert taken.returncode != 6, taken.output
        assert reboots(lab.audit()).get("gpu03", 0) == 0  # dave's job never left
        assert lab.truth()["nodes"]["gpu03"]["slurm"]["job_id"] == 51234


def test_a_controller_that_loses_the_database_starts_no_further_action(
    lab: LabHandle, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """The database goes away (its sessions are ended, as a restart or a cut network would)
    while gpu003 is drained and its reboot is next: the reboot is never sent."""
    dsn = postgres_server.fresh_database()
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    gate = tmp_path / "gate"
    argv = _argv(DRAIN_WAIT_REBOOT, inventory, dsn, "--limit", "gpu003", "-e", f"gate={gate}")
    with started_run(argv, tmp_path, "cut") as run:
        assert wait_until(lambda: "TASK [wait for the gate]" in run.output(), 120), run.output()
        assert postgres_server.terminate_sessions() >= 1
        node_shell(lab, "gpu003", f"touch {gate}")
        code = run.wait(120)
        output = run.output()
    assert code == 6, output
    assert "fleetfix stopped: without its journal it starts no action" in output
    assert "Traceback" not in output
    assert reboots(lab.audit()).get("gpu003", 0) == 0, lab.audit()["gpu003"]
    slurm = lab.truth()["nodes"]["gpu003"]["slurm"]
    assert slurm["drain"] and slurm["reason"].startswith("fleetfix:"), slurm

    # The database is back: the command it printed goes on (its DSN shown without the
    # password: typed again here) and sends the one reboot.
    said = output.split("Once the journal is back, go on with:\n", 1)[1].splitlines()[0]
    run_id = said.split("--resume ", 1)[1].strip()
    again = (*argv, "--resume", run_id)
    resumed = subprocess.run(
        again,
        capture_output=True,
        text=True,
        timeout=300,
        env=run_env(),
        check=False,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert reboots(lab.audit()).get("gpu003", 0) == 1, lab.audit()["gpu003"]
