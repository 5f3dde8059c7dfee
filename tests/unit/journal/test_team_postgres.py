"""The README's team setup: scripts/team-postgres starts a PostgreSQL that controllers reach
over TCP with the password it made, and starts it again, same DSN, after a stop (a reboot);
each start sets the server's TCP keepalives, so a controller cut off by the network loses its
session (and its run's lock) within about 25 s (docs/team.md)."""

from __future__ import annotations

import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from fleetfix.journal import Journal
from fleetfix.journal.db import PostgresDatabase
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


KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "25000",
}
"""What the server applies to a controller's TCP session: silence noticed after 10 + 3 x 5 s,
unacknowledged data after 25 s (the OS defaults would hold a dead session for hours)."""


def _server_keepalives(dsn: str) -> dict[str, str]:
    """The settings of this TCP session, as the server applies them."""
    with psycopg.connect(dsn) as db:
        rows = db.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", (list(KEEPALIVES),)
        ).fetchall()
    return {str(name): str(setting) for name, setting in rows}


def test_the_team_database_is_reached_over_tcp_and_survives_a_restart(directory: Path) -> None:
    port = _free_port()
    dsn = _start(directory, port)
    assert dsn.startswith("postgresql://fleetfix:") and dsn.endswith(f"@127.0.0.1:{port}/fleetfix")
    assert stat.S_IMODE((directory / "dsn").stat().st_mode) == 0o600
    assert _server_keepalives(dsn) == KEEPALIVES
    journal = Journal(dsn)
    run_id = journal.start_run("xid79.yml", [], check=False, hosts=1)
    journal.finish_run(0)
    journal.close()

    subprocess.run([str(SCRIPT), "stop", str(directory)], check=True, timeout=60)
    assert _start(directory, port) == dsn  # the same cluster, role and password
    assert _server_keepalives(dsn) == KEEPALIVES
    again = Journal(dsn)
    assert [run.run_id for run in again.history()] == [run_id]
    again.close()


def test_a_journal_session_sets_its_keepalives_on_a_server_that_does_not(directory: Path) -> None:
    """A team's own server, left at the OS defaults: fleetfix's session sets them itself."""
    port = _free_port()
    dsn = _start(directory, port)
    admin = f"host={directory} port={port} user=fleetfix_admin dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as db:
        for name in KEEPALIVES:  # 0: the operating system's value
            db.execute(f"ALTER DATABASE fleetfix SET {name} = 0")
    assert _server_keepalives(dsn) == {
        "tcp_keepalives_idle": "7200",
        "tcp_keepalives_interval": "75",
        "tcp_keepalives_count": "9",
        "tcp_user_timeout": "0",
    }
    database = PostgresDatabase(dsn)
    try:
        rows = database.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(?)", (list(KEEPALIVES),)
        ).fetchall()
    finally:
        database.close()
    assert {str(name): str(setting) for name, setting in rows} == KEEPALIVES
