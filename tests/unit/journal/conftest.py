"""The journal's tests run on both backends: `journal_target` and `open_journal` (from
tests.support.postgres, shared with the end-to-end tests) give each test a SQLite file, then a
fresh PostgreSQL database. `backend` is what a test needs to look at that journal from outside
it, the same way on both: the rows a second connection finds, a change another client makes,
a controller's death as the database learns of it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from fleetfix.journal import Journal
from fleetfix.journal.db import LOCK_SPACE, is_postgres, run_key
from tests.support.postgres import PostgresServer


class Backend:
    """One test's journal database, reached without the journal's own code."""

    def __init__(self, target: Path | str, server: PostgresServer | None) -> None:
        self.target = target
        self._server = server
        self._opened: list[Journal] = []

    @property
    def name(self) -> str:
        return "postgresql" if self._server is not None else "sqlite"

    def open(self, **options: Any) -> Journal:
        """A Journal on this database with `options` (batching settings); closed after the
        test. `open_journal` is the same without options."""
        journal = Journal(self.target, **options)
        self._opened.append(journal)
        return journal

    def committed(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows a new connection finds (what a new process finds after kill -9), each
        one-column row as its value. `?` placeholders on both backends."""
        if self._server is None:
            with closing(sqlite3.connect(self.target)) as db:
                found = db.execute(sql, params).fetchall()
        else:
            import psycopg  # noqa: PLC0415

            with psycopg.connect(str(self.target), autocommit=True) as pg:
                found = pg.execute(sql.replace("?", "%s"), params).fetchall()
        return [row[0] if len(row) == 1 else tuple(row) for row in found]

    def change(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run and commit one statement as another client of the database would."""
        if self._server is None:
            with closing(sqlite3.connect(self.target)) as db, db:
                db.execute(sql, params)
        else:
            import psycopg  # noqa: PLC0415

            with psycopg.connect(str(self.target), autocommit=True) as pg:
                pg.execute(sql.replace("?", "%s"), params)

    def kill_controller(self, run_id: str) -> None:
        """Make `run_id`'s controller dead as the database knows it after a kill -9: on
        SQLite the kernel drops the run's lock file (its descriptor closes, the file stays)
        and its leases name a process that is gone; on PostgreSQL the session holding the
        run ends (returning once it has)."""
        if self._server is None:
            for journal in self._opened:
                held = getattr(journal._db, "_held", {})
                if run_id in held:
                    os.close(held.pop(run_id))  # as the process's death would: no unlink
            gone = subprocess.run(
                [sys.executable, "-c", "import os; print(os.getpid())"],
                capture_output=True,
                text=True,
                check=True,
            )
            self.change("UPDATE leases SET pid=? WHERE run_id=?", (int(gone.stdout), run_id))
            return
        import psycopg  # noqa: PLC0415

        with psycopg.connect(self._server.admin, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT bool_and(pg_terminate_backend(pid, 30000)) FROM pg_locks"
                " WHERE locktype='advisory' AND granted AND classid=%s AND objid=%s"
                " AND objsubid=2",
                (LOCK_SPACE, run_key(run_id)),
            ).fetchone()
        assert ended is not None and ended[0], f"no live session holds run {run_id}"

    def close(self) -> None:
        for journal in self._opened:
            journal.close()


@pytest.fixture
def backend(journal_target: Path | str, request: pytest.FixtureRequest) -> Iterator[Backend]:
    """This test's journal database (runs once on each backend, as `journal_target` does)."""
    server: PostgresServer | None = None
    if is_postgres(journal_target):
        server = request.getfixturevalue("postgres_server")
    made = Backend(journal_target, server)
    yield made
    made.close()


@pytest.fixture
def open_journal(backend: Backend) -> Callable[[], Journal]:
    """`open_journal()`: a Journal on this test's backend (a new connection each call, as a new
    process would open), known to `backend` so `kill_controller` reaches the run it holds;
    every one opened is closed after the test."""
    return backend.open
