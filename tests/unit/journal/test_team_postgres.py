"""The README's team setup: scripts/team-postgres starts a PostgreSQL that controllers reach
over TCP with the password it made, and starts it again, same DSN, after a stop (a reboot)."""

from __future__ import annotations

import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.journal import Journal
from tests.support.postgres import SCRIPT, require_postgres


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def directory() -> Iterator[Path]:
    require_postgres()
    made = Path(tempfile.mkdtemp(prefix="fleetfix-pg."))
    try:
        yield made
    finally:
        subprocess.run([str(SCRIPT), "stop", str(made)], capture_output=True, check=False)
        shutil.rmtree(made, ignore_errors=True)


def _start(directory: Path, port: int) -> str:
    done = subprocess.run(
        [str(SCRIPT), "start", str(directory), "--listen", "127.0.0.1", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_the_team_database_is_reached_over_tcp_and_survives_a_restart(directory: Path) -> None:
    port = _free_port()
    dsn = _start(directory, port)
    assert dsn.startswith("postgresql://fleetfix:") and dsn.endswith(f"@127.0.0.1:{port}/fleetfix")
    assert stat.S_IMODE((directory / "dsn").stat().st_mode) == 0o600
    journal = Journal(dsn)
    run_id = journal.start_run("xid79.yml", [], check=False, hosts=1)
    journal.finish_run(0)
    journal.close()

    subprocess.run([str(SCRIPT), "stop", str(directory)], check=True, timeout=60)
    assert _start(directory, port) == dsn  # the same cluster, role and password
    again = Journal(dsn)
    assert [run.run_id for run in again.history()] == [run_id]
    again.close()
