"""Several controllers, one journal: leases, the repair budget and attempt caps hold across
processes on both backends; on PostgreSQL a controller is known dead when its database session
ends, and a controller that loses the database acts no more."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fleetfix.events import ActionStarted, ActionTaken, CommandRan
from fleetfix.journal import Journal
from fleetfix.journal.store import JournalError
from fleetfix.results import CommandResult
from tests.support import wait_until
from tests.support.postgres import PostgresServer

if TYPE_CHECKING:
    from tests.unit.journal.conftest import Backend

ROOT = Path(__file__).resolve().parents[3]
CONTROLLER = """
import sys
from fleetfix.journal import Journal
journal = Journal(sys.argv[1])
journal.start_run("other.yml", [], check=False, hosts=2)
print(sorted(journal.acquire_leases(sys.argv[2:])), flush=True)
sys.stdin.read()  # hold the leases until the test closes stdin or kills us
"""
TAKE_OUT = """
import sys
from fleetfix.journal import Journal
journal = Journal(sys.argv[1])
journal.start_run("budget.yml", [], check=False, hosts=1)
sys.stdin.readline()  # every process starts at once
print(journal.take_out(sys.argv[2], "reboot", 3) is None, flush=True)
journal.close()
"""


def _race(script: str, target: str | Path, racers: int = 8) -> list[str]:
    """What each of `racers` processes running `script` for gpu000, gpu001, ... answered,
    all released at once."""
    started = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(target), f"gpu{n:03d}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for n in range(racers)
    ]
    return [racer.communicate("go\n", timeout=60)[0].strip() for racer in started]


@contextmanager
def controller(target: str | Path, *hosts: str) -> Iterator[subprocess.Popen[str]]:
    """Another controller process holding leases on `hosts` until it ends."""
    with subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(target), *hosts],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "[]"  # it got them
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


def test_a_lease_is_taken_over_only_after_its_holder_is_known_dead(
    journal_target: str | Path, open_journal: Callable[[], Journal]
) -> None:
    second = open_journal()
    second.start_run("mine.yml", [], check=False, hosts=2)
    with controller(journal_target, "gpu001", "gpu002") as other:
        busy = second.acquire_leases(["gpu002", "gpu003"])
        assert list(busy) == ["gpu002"]
        assert f"pid {other.pid}" in busy["gpu002"]
        other.send_signal(signal.SIGKILL)  # kill -9: no release, no finish
        other.wait(timeout=30)
        # Its lease row is still there; its holder is gone (pid on SQLite, session on
        # PostgreSQL, which notices the closed socket on its own schedule).
        wait_until(lambda: second.acquire_leases(["gpu002", "gpu003"]) == {}, timeout=30)
    second.release_leases()


@pytest.mark.parametrize("journal_target", ["postgresql"], indirect=True)
def test_on_postgresql_a_live_controller_keeps_its_lease_past_expiry(
    journal_target: str, open_journal: Callable[[], Journal]
) -> None:
    """Expiry is a guess; the session is a fact: a controller that has not renewed (a stalled
    event loop, a paused VM) but is still connected is not taken over. PostgreSQL only: SQLite
    has no sessions, so there an expired lease is free by design (leases.holder_alive)."""
    import psycopg  # noqa: PLC0415

    mine = open_journal()
    mine.start_run("mine.yml", [], check=False, hosts=1)
    with controller(journal_target, "gpu001"):
        with psycopg.connect(journal_target, autocommit=True) as db:
            db.execute("UPDATE leases SET expires = 0")
        assert list(mine.acquire_leases(["gpu001"])) == ["gpu001"]


def test_two_controllers_cannot_both_take_the_last_repair_slot(
    journal_target: str | Path, open_journal: Callable[[], Journal]
) -> None:
    open_journal()  # the schema exists before eight controllers race on it
    answers = _race(TAKE_OUT, journal_target)
    assert sorted(answers) == ["False"] * 5 + ["True"] * 3
    journal = open_journal()
    assert len(journal.out_of_service()) == 3


def test_attempts_count_across_controllers(open_journal: Callable[[], Journal]) -> None:
    first, second = open_journal(), open_journal()
    first.start_run("a.yml", [], check=False, hosts=1)
    first(ActionStarted(host="gpu001", step="reboot", key="a:1", action="reboot"))
    first(ActionTaken(host="gpu001", step="reboot", key="a:1", action="reboot", failed=False))
    first.finish_run(0)
    second.start_run("b.yml", [], check=False, hosts=1)
    assert len(second.action_times("gpu001", "reboot", time.time() - 60)) == 1


def test_an_intent_on_a_host_another_run_took_over_is_refused(
    open_journal: Callable[[], Journal],
) -> None:
    """A controller presumed dead (its lease lapsed) that wakes up must not act."""
    stale, taker = open_journal(), open_journal()
    stale.start_run("a.yml", [], check=False, hosts=1)
    assert stale.acquire_leases(["gpu001"]) == {}
    taker.start_run("b.yml", [], check=False, hosts=1)
    stale.release_leases()  # as a lapse would
    assert taker.acquire_leases(["gpu001"]) == {}
    with pytest.raises(JournalError, match="lease was taken over"):
        stale(ActionStarted(host="gpu001", step="reboot", key="a:1", action="reboot"))
    assert taker.action_times("gpu001", "reboot", 0) == []


@pytest.mark.parametrize("journal_target", ["postgresql"], indirect=True)
def test_a_controller_that_loses_the_database_starts_no_action(
    postgres_server: PostgresServer, open_journal: Callable[[], Journal]
) -> None:
    """PostgreSQL only: a SQLite journal is a local file, there is no database to lose."""
    journal = open_journal()
    journal.start_run("a.yml", [], check=False, hosts=1)
    assert journal.acquire_leases(["gpu001"]) == {}
    assert postgres_server.terminate_sessions() >= 1  # the network, or the server, is gone
    with pytest.raises(JournalError, match="journal postgresql://fleetfix@"):
        journal(ActionStarted(host="gpu001", step="reboot", key="a:1", action="reboot"))
    with pytest.raises(JournalError):  # and stays refused: nothing after a lost write
        journal(ActionStarted(host="gpu001", step="reset", key="a:2", action="gpu_reset"))


@pytest.mark.parametrize("journal_target", ["postgresql"], indirect=True)
def test_a_database_lost_under_a_read_stops_every_write_and_ends_quietly(
    backend: Backend,
) -> None:
    """Whichever call meets the lost database first (here the attempt count read before an
    action, not a write), nothing is written after it, and ending the run (releasing its
    leases, closing) does not raise: the server freed the leases with the session.
    PostgreSQL only: a SQLite journal is a local file, there is no database to lose."""
    journal = backend.open()
    run_id = journal.start_run("a.yml", [], check=False, hosts=1)
    assert journal.acquire_leases(["gpu001"]) == {}
    backend.kill_controller(run_id)  # the network, or the server, is gone
    with pytest.raises(JournalError, match="journal postgresql://fleetfix@"):
        journal.action_times("gpu001", "reboot", 0)
    journal.release_leases()  # as the CLI does on its way out
    with pytest.raises(JournalError):
        journal(ActionStarted(host="gpu001", step="reboot", key="a:1", action="reboot"))
    journal.close()
    assert backend.committed("SELECT count(*) FROM actions") == [0]
    assert backend.committed("SELECT count(*) FROM leases") == [1]  # its holder is known dead


@pytest.mark.parametrize("journal_target", ["postgresql"], indirect=True)
def test_the_dsn_password_is_never_shown(
    journal_target: str, open_journal: Callable[[], Journal], postgres_server: PostgresServer
) -> None:
    """PostgreSQL only: a SQLite journal has no password."""
    password = journal_target.split(":", 2)[2].split("@", 1)[0]
    assert len(password) >= 16
    journal = open_journal()
    assert password not in journal.where and "fleetfix@" in journal.where
    wrong = journal_target.replace(password, "not-the-password")
    with pytest.raises(JournalError) as refused:
        Journal(wrong)
    assert "not-the-password" not in str(refused.value)
    assert "password authentication failed" in str(refused.value)


def test_output_with_nul_bytes_is_kept(open_journal: Callable[[], Journal]) -> None:
    journal = open_journal()
    run_id = journal.start_run("a.yml", [], check=False, hosts=1)
    result = CommandResult("cat /proc/1/cmdline", 0, "init\x00--flag\x00", "", 0.1)
    journal(CommandRan(host="gpu001", step="probe", result=result))
    (event,) = list(open_journal().events(run_id))
    assert isinstance(event, CommandRan)
    assert event.result.stdout.startswith("init")
    assert "--flag" in event.result.stdout


def test_the_sqlite_journal_is_created_private(tmp_path: Path) -> None:
    """SQLite only: the modes of its files (PostgreSQL keeps its data in its own cluster)."""
    journal = Journal(tmp_path / "new" / "j.sqlite")
    journal.start_run("a.yml", ["fleetfix", "run"], check=False, hosts=1)
    journal.close()
    for name in os.listdir(tmp_path / "new"):
        path = tmp_path / "new" / name
        mode = path.stat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), (name, oct(mode))  # runs' locks


def test_leases_leave_out_only_the_hosts_a_live_run_holds(
    journal_target: str | Path, open_journal: Callable[[], Journal]
) -> None:
    """One engineer holding gpu001 does not stop a whole-fleet run: the other hosts are leased
    to it, and the one left out names its holder."""
    mine = open_journal()
    mine.start_run("fleet.yml", [], check=False, hosts=3)
    with controller(journal_target, "gpu001") as other:
        busy = mine.acquire_leases(["gpu001", "gpu002", "gpu003"])
        assert list(busy) == ["gpu001"]
        assert f"pid {other.pid}" in busy["gpu001"] and "from controller" in busy["gpu001"]
        held = open_journal()
        held.start_run("third.yml", [], check=False, hosts=2)
        assert sorted(held.acquire_leases(["gpu002", "gpu003"])) == ["gpu002", "gpu003"]
    mine.release_leases()


@pytest.mark.parametrize("journal_target", ["sqlite"], indirect=True)
def test_a_killed_run_is_dead_even_when_its_pid_is_reused(
    journal_target: Path, open_journal: Callable[[], Journal], backend: Backend
) -> None:
    """SQLite: a run is alive while it holds its lock file, which the kernel releases when the
    process dies. A pid taken by another process seconds later (pid_max wraps on a busy
    machine) does not make it look alive: its leases are free and it may be resumed."""
    with controller(journal_target, "gpu001") as other:
        other.send_signal(signal.SIGKILL)
        other.wait(timeout=30)
    run_id = backend.committed("SELECT run_id FROM leases WHERE host='gpu001'")[0]
    # The dead run's pid now belongs to a live process (this one), its lease not yet expired.
    backend.change("UPDATE leases SET pid=?, expires=? WHERE run_id=?",
                   (os.getpid(), time.time() + 3600, run_id))  # fmt: skip
    taker = open_journal()
    assert taker.resume_state(run_id).run_id == run_id  # not "still running (pid ...)"
    taker.start_run("mine.yml", [], check=False, hosts=1)
    assert taker.acquire_leases(["gpu001"]) == {}
    taker.release_leases()


RACK_TAKE_OUT = """
import sys
from fleetfix.journal import Journal
from fleetfix.topology.caps import DomainCap
journal = Journal(sys.argv[1])
journal.start_run("rack.yml", [], check=False, hosts=1)
rack = DomainCap("rack r01", frozenset(f"gpu{n:03d}" for n in range(8)), 1)
sys.stdin.readline()  # every process starts at once
print(journal.take_out(sys.argv[2], "reboot", None, [rack]) is None, flush=True)
journal.close()
"""


def test_two_controllers_cannot_both_take_a_racks_last_slot(
    journal_target: str | Path, open_journal: Callable[[], Journal]
) -> None:
    """max_unavailable_per {rack: 1} across controllers: eight processes, eight hosts of one
    rack, disjoint --limit sets: exactly one is admitted."""
    open_journal()
    answers = _race(RACK_TAKE_OUT, journal_target)
    assert sorted(answers) == ["False"] * 7 + ["True"], answers
    assert len(open_journal().out_of_service()) == 1


def test_a_rack_cap_counts_the_schedulers_out_nodes_and_names_them(
    open_journal: Callable[[], Journal],
) -> None:
    """A node a human drained (Slurm says out) fills rack r01's one slot; the journal names
    who is out, by run or by Slurm."""
    from fleetfix.topology.caps import DomainCap  # noqa: PLC0415

    members = frozenset({"gpu001", "gpu002", "gpu003"})
    journal = open_journal()
    run_id = journal.start_run("a.yml", [], check=False, hosts=2)
    human = DomainCap("rack r01", members, 1, frozenset({"gpu003"}))
    refused = journal.take_out("gpu001", "reboot", None, [human])
    assert refused is not None and "gpu003 (Slurm)" in refused and "rack r01" in refused
    clear = DomainCap("rack r01", members, 1)
    assert journal.take_out("gpu001", "reboot", None, [clear]) is None
    other = open_journal()
    other.start_run("b.yml", [], check=False, hosts=1)
    refused = other.take_out("gpu002", "reboot", None, [clear])
    assert refused is not None and f"gpu001 (run {run_id})" in refused
    roomy = DomainCap("rack r01", members, 2)
    assert other.take_out("gpu002", "reboot", None, [roomy]) is None


def test_only_a_run_that_stopped_in_the_middle_is_abandoned(
    open_journal: Callable[[], Journal], backend: Backend
) -> None:
    """Adoption's rule: a finished run left its drains on purpose; a killed or interrupted one
    whose controller is gone left them mid-remediation; a live one is still working."""
    journal = open_journal()
    done = journal.start_run("drain.yml", [], check=False, hosts=1)
    assert journal.take_out("gpu001", "slurm_drain", None) is None
    journal.finish_run(0)
    stopped = journal.start_run("xid79.yml", [], check=False, hosts=1)
    assert journal.take_out("gpu002", "reboot", None) is None
    journal.finish_run(99)
    live = open_journal()
    running = live.start_run("xid79.yml", [], check=False, hosts=1)
    assert live.take_out("gpu003", "reboot", None) is None
    killed_journal = open_journal()
    killed = killed_journal.start_run("xid79.yml", [], check=False, hosts=1)
    assert killed_journal.take_out("gpu004", "reboot", None) is None
    backend.kill_controller(killed)

    observer = open_journal()
    observer.start_run("sweep.yml", [], check=False, hosts=4)
    assert not observer.abandoned(done)
    assert observer.abandoned(stopped)
    assert not observer.abandoned(running)
    assert observer.abandoned(killed)
    assert not observer.abandoned("20990101-000000-another-journal")
    hosts = ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert observer.stranded(hosts) == {"gpu002": stopped, "gpu004": killed}
    observer.settled("gpu004")
    assert observer.stranded(hosts) == {"gpu002": stopped}
