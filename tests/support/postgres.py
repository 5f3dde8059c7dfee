"""A real PostgreSQL for the tests: Debian's package, started once per session on a private
socket by scripts/team-postgres (the README's team setup uses the same script), and a fresh
database for each test that asks for one.

Outside CI a machine without PostgreSQL skips these tests with a note; under CI=1 (where .ci/run
installs it) a missing server fails them.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pytest

from fleetfix.journal import Journal

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "team-postgres"
_numbers = itertools.count(1)


class PostgresServer:
    """One cluster in a private directory, its admin reachable through the socket only."""

    def __init__(self, directory: Path, dsn: str) -> None:
        self.directory = directory
        self.dsn = dsn
        """The `fleetfix` role's DSN (with its password) to the `fleetfix` database."""

    @property
    def admin(self) -> str:
        """The admin's connection string: through the private socket, no password."""
        port = parse_qs(urlsplit(self.dsn).query).get("port", ["5432"])[0]
        return f"host={self.directory} port={port} user=fleetfix_admin dbname=postgres"

    def fresh_database(self) -> str:
        """A new, empty database owned by `fleetfix`; its DSN."""
        import psycopg  # noqa: PLC0415

        name = f"fleetfix_t{os.getpid()}_{next(_numbers)}"
        with psycopg.connect(self.admin, autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}" OWNER fleetfix')
        parts = urlsplit(self.dsn)
        return urlunsplit(parts._replace(path=f"/{name}"))

    def terminate_sessions(self, application: str = "fleetfix") -> int:
        """End every session of `application` (as a lost network or a restarted database
        would); returns how many."""
        import psycopg  # noqa: PLC0415

        with psycopg.connect(self.admin, autocommit=True) as db:
            row = db.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name=%s",
                (application,),
            ).fetchone()
        return int(row[0]) if row else 0


def postgres_available() -> bool:
    return any(Path("/usr/lib/postgresql").glob("*/bin/postgres"))


def require_postgres() -> None:
    """Skip without PostgreSQL on a developer's machine; fail under CI=1, where it must be."""
    if not postgres_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed (.ci/run installs Debian's postgresql)")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    require_postgres()
    directory = Path(tempfile.mkdtemp(prefix="fleetfix-pg."))
    try:
        started = subprocess.run(
            [str(SCRIPT), "start", str(directory)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if started.returncode != 0:
            pytest.fail(f"scripts/team-postgres start failed: {started.stderr.strip()}")
        yield PostgresServer(directory, started.stdout.strip())
    finally:
        subprocess.run([str(SCRIPT), "stop", str(directory)], capture_output=True, check=False)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_target(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """Each test using this runs once on each backend: a SQLite file, a fresh PostgreSQL
    database (its DSN)."""
    if request.param == "sqlite":
        return tmp_path / "j.sqlite"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.fresh_database()


@pytest.fixture
def open_journal(journal_target: str | Path) -> Iterator[Callable[[], Journal]]:
    """`open_journal()`: a Journal on this test's backend (a new connection each call, as a new
    process would open); every one opened is closed after the test."""
    opened: list[Journal] = []

    def make() -> Journal:
        journal = Journal(journal_target)
        opened.append(journal)
        return journal

    yield make
    for journal in opened:
        journal.close()
