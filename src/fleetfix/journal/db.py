"""The journal's two databases behind one small interface: SQLite (one machine, the default)
and PostgreSQL (a team: every controller and operator shares one database).

The journal's SQL is written once, in the dialect both accept (`?` placeholders are turned
into psycopg's `%s`; upserts are `ON CONFLICT ... DO UPDATE`; new ids come from `RETURNING
id`). What differs lives here:

- serialising the fleet-wide decisions (leases, the repair budget): SQLite's `BEGIN IMMEDIATE`
  takes the file's write lock; PostgreSQL takes a transaction-level advisory lock;
- knowing a run's controller is alive: on SQLite, an exclusive `flock` the run holds on a file
  beside the journal (`JOURNAL.runs/RUN_ID.lock`), which the kernel releases the moment the
  process dies, so a reused pid never looks alive; on PostgreSQL, the run's session-level
  advisory lock, which the server drops the moment the controller's connection ends (killed,
  crashed, cut off). Either way a lease is taken over only when its holder is known dead;
- text: PostgreSQL text cannot hold NUL, so a NUL in command output is stored as `\\x00`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sqlite3
import stat
import sys
import zlib
from collections.abc import Iterator, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    import psycopg

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
LOCK_SPACE = 0x6666
"""The first key of every advisory lock fleetfix takes (\"ff\"), so it shares none with other
applications on the same database."""
_FLEET_LOCK = 0
"""Second key of the lock that serialises fleet-wide decisions (leases, the repair budget)."""
SERVER_KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "25000",
}
"""The server's side of a session's TCP timeouts, set by each session for itself (any user may):
a server ends a controller's session, and so releases its run's lock, about 25 s after the
network cut it off, not after the OS defaults' two hours (docs/team.md)."""
_SQLITE_COLUMNS = {
    # version 1 journals lack the intent columns of `actions`
    "actions": {
        "step_key": "TEXT NOT NULL DEFAULT ''",
        "state": "TEXT NOT NULL DEFAULT 'ok'",
        "evidence": "TEXT NOT NULL DEFAULT '{}'",
    },
    # version 2 journals repeat facts and output in events; their rows keep reading as before
    "commands": {"stdout_size": "INTEGER", "stderr_size": "INTEGER"},
    "steps": {"command_id": "INTEGER"},
    "events": {"ref": "INTEGER"},
}
SCHEMA_VERSION = "3"


class DatabaseError(Exception):
    """The database refused or lost a statement (either backend)."""


class Rows(Protocol):
    @property
    def rowcount(self) -> int:
        """Rows the statement changed (an INSERT that a conflict skipped: 0)."""
        ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


def is_postgres(target: str | Path) -> bool:
    return str(target).startswith(POSTGRES_SCHEMES)


def shown(target: str | Path) -> str:
    """Where the journal is, for messages: a DSN without its password (or any secret query
    parameter), a file as its path."""
    text = str(target)
    if not is_postgres(text):
        return text
    parts = urlsplit(text)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = re.sub(r"(?i)(password|sslpassword|passfile)=[^&]*", r"\1=***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


class Database:
    """One connection to the journal's database, in autocommit mode: the journal opens its own
    transactions (`begin`) and commits them."""

    dialect = "sqlite"

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        raise NotImplementedError

    def insert(self, sql: str, params: Sequence[Any]) -> int:
        """Run an INSERT and return the new row's id."""
        raise NotImplementedError

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def begin(self, *, fleet: bool = False) -> None:
        """Open a transaction; with `fleet`, one no other controller's fleet decision
        (lease, repair budget) interleaves with."""
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def rollback(self) -> None:
        raise NotImplementedError

    @property
    def in_transaction(self) -> bool:
        raise NotImplementedError

    def hold_run(self, run_id: str) -> bool:
        """Mark `run_id` as run by this connection for as long as it lives; False when another
        live connection holds it. SQLite has no sessions: always True (pids tell instead)."""
        return True

    def release_run(self, run_id: str) -> None:
        """Stop marking `run_id` as run by this connection (the run ended)."""

    def run_alive(self, run_id: str) -> bool | None:
        """Is a live controller running `run_id`? None when the database cannot tell."""
        return None

    def close(self) -> None:
        raise NotImplementedError


class SqliteDatabase(Database):
    """A journal file in WAL mode, created 0600 (it holds the fleet's history); an existing one
    open to every user is narrowed (see `narrow_mode`)."""

    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._held: dict[str, int] = {}  # run id -> the descriptor holding its lock file
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            narrowed = narrow_mode(path)
            if narrowed:
                # The journal is opened by every command; this is the one place that knows.
                print(f"WARNING: {narrowed}", file=sys.stderr)
            self._db = sqlite3.connect(path, isolation_level=None, timeout=10.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # The journal appends and reads back by index: 256 KiB of page cache does that as
            # fast as SQLite's default 2 MiB, which was 2 MB of a 300-host run's peak RSS
            # (the OS caches the file anyway; docs/benchmarks.md, issue 21).
            self._db.execute("PRAGMA cache_size=-256")
            self._db.executescript(_schema("schema.sql"))
            self._migrate()
        except sqlite3.Error as exc:
            raise DatabaseError(str(exc)) from exc

    def _migrate(self) -> None:
        """Add the columns older journals lack; their rows read as they always did."""
        for table, columns in _SQLITE_COLUMNS.items():
            have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for column, ddl in columns.items():
                if column not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}")
        self._db.execute(
            "INSERT INTO meta VALUES ('schema', ?) ON CONFLICT(key) DO UPDATE"
            " SET value=excluded.value",
            (SCHEMA_VERSION,),
        )

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise DatabaseError(str(exc)) from exc

    def insert(self, sql: str, params: Sequence[Any]) -> int:
        try:
            made = self._db.execute(sql, params).lastrowid
        except sqlite3.Error as exc:
            raise DatabaseError(str(exc)) from exc
        assert made is not None
        return made

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        try:
            self._db.executemany(sql, params)
        except sqlite3.Error as exc:
            raise DatabaseError(str(exc)) from exc

    def begin(self, *, fleet: bool = False) -> None:
        # IMMEDIATE always: a deferred transaction that later writes can deadlock on upgrade.
        self.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        if self._db.in_transaction:
            self.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        return self._db.in_transaction

    def close(self) -> None:
        for run_id in list(self._held):
            self.release_run(run_id)
        self._db.close()

    # --- run liveness: a lock the kernel drops with the process ------------------------------

    def _run_lock(self, run_id: str) -> Path:
        return self.path.with_name(self.path.name + ".runs") / f"{_safe_name(run_id)}.lock"

    def hold_run(self, run_id: str) -> bool:
        """Take the run's lock file; False when another live process holds it."""
        if run_id in self._held:
            return True
        path = self._run_lock(run_id)
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise DatabaseError(f"cannot create the run's lock file {path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._held[run_id] = fd
        return True

    def release_run(self, run_id: str) -> None:
        fd = self._held.pop(run_id, None)
        if fd is None:
            return
        with contextlib.suppress(OSError):
            self._run_lock(run_id).unlink()
        os.close(fd)

    def run_alive(self, run_id: str) -> bool | None:
        """True while a process holds the run's lock file; False once none does (the kernel
        released it when the controller died, whatever became of its pid). None for a run
        with no lock file: finished, or recorded by an older fleetfix (pids tell then)."""
        if run_id in self._held:
            return True
        try:
            fd = os.open(self._run_lock(run_id), os.O_RDWR)
        except FileNotFoundError:
            return None
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops the probe's own shared lock
        return False


def _safe_name(run_id: str) -> str:
    """A run id as a file name: fleetfix's ids already are; anything else is made one."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:120] or "_"


def narrow_mode(path: Path) -> str | None:
    """Take every right of "other" users away from a journal file this user owns, and from its
    -wal and -shm (SQLite gives the ones it creates the file's mode); owner and group keep
    theirs, so a journal shared by a group (docs/safety.md, section 7) still works. What was
    done, for a warning; None when nothing needed it.

    Raises:
        OSError: a file could not be read or changed.
    """
    changed: list[tuple[Path, int, int]] = []
    for file in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm"))):
        try:
            status = file.stat()
        except FileNotFoundError:
            continue
        mode = stat.S_IMODE(status.st_mode)
        if mode & 0o007 and status.st_uid == os.geteuid():
            file.chmod(mode & ~0o007)
            changed.append((file, mode, mode & ~0o007))
    if not changed:
        return None
    files = ", ".join(f"{file.name} {old:04o} -> {new:04o}" for file, old, new in changed)
    return (
        f"the journal {path} was open to every user of this machine, and it holds command"
        f" lines and their output: other users' rights removed ({files})"
    )


class PostgresDatabase(Database):
    """The team's journal: one PostgreSQL database every controller shares (psycopg 3)."""

    dialect = "postgresql"

    def __init__(self, dsn: str) -> None:
        import psycopg  # noqa: PLC0415  (only a team's journal needs the driver loaded)

        self._errors: tuple[type[Exception], ...] = (psycopg.Error,)
        try:
            self._db: psycopg.Connection[Any] = psycopg.connect(
                dsn,
                autocommit=True,
                connect_timeout=10,
                # A controller cut off from the database must learn it within seconds: its
                # next intent fails and it starts no disruptive action (docs/team.md).
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
                application_name="fleetfix",
            )
            settings = ", ".join("set_config(%s, %s, false)" for _ in SERVER_KEEPALIVES)
            values = [text for item in SERVER_KEEPALIVES.items() for text in item]
            self._db.execute(f"SELECT {settings}", values)
            self.begin(fleet=True)
            self._db.execute(postgres_schema(_schema("schema.sql")))
            self._db.execute(
                "INSERT INTO meta VALUES ('schema', %s) ON CONFLICT(key) DO UPDATE"
                " SET value=excluded.value",
                (SCHEMA_VERSION,),
            )
            self.commit()
        except psycopg.Error as exc:
            raise DatabaseError(_one_line(exc)) from exc

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        try:
            return self._db.execute(_pg(sql), _pg_params(params))
        except self._errors as exc:
            raise DatabaseError(_one_line(exc)) from exc

    def insert(self, sql: str, params: Sequence[Any]) -> int:
        row = self.execute(sql + " RETURNING id", params).fetchone()
        return int(row[0])

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        try:
            with self._db.cursor() as cursor:
                cursor.executemany(_pg(sql), [_pg_params(p) for p in params])
        except self._errors as exc:
            raise DatabaseError(_one_line(exc)) from exc

    def begin(self, *, fleet: bool = False) -> None:
        self.execute("BEGIN")
        if fleet:
            self.execute("SELECT pg_advisory_xact_lock(?, ?)", (LOCK_SPACE, _FLEET_LOCK))

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        if self.in_transaction:
            self.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus  # noqa: PLC0415

        return self._db.info.transaction_status != TransactionStatus.IDLE

    def hold_run(self, run_id: str) -> bool:
        row = self.execute(
            "SELECT pg_try_advisory_lock(?, ?)", (LOCK_SPACE, run_key(run_id))
        ).fetchone()
        return bool(row[0])

    def release_run(self, run_id: str) -> None:
        self.execute("SELECT pg_advisory_unlock(?, ?)", (LOCK_SPACE, run_key(run_id)))

    def run_alive(self, run_id: str) -> bool:
        row = self.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype='advisory' AND granted"
            " AND classid=? AND objid=? AND objsubid=2",
            (LOCK_SPACE, run_key(run_id)),
        ).fetchone()
        return int(row[0]) > 0

    def close(self) -> None:
        with contextlib.suppress(*self._errors):
            self._db.close()


def open_database(target: str | Path) -> Database:
    if is_postgres(target):
        return PostgresDatabase(str(target))
    return SqliteDatabase(Path(target))


def run_key(run_id: str) -> int:
    """The second key of a run's advisory lock (31 bits: pg_locks shows it as an oid)."""
    return zlib.crc32(run_id.encode()) & 0x7FFFFFFF


def _schema(name: str) -> str:
    return resources.files("fleetfix.journal").joinpath(name).read_text()


_POSTGRES_TYPES = (
    (re.compile(r"\bINTEGER PRIMARY KEY\b"), "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"^(\s+(?:ref|command_id)\s+)INTEGER\b", re.M), r"\1BIGINT"),
    (re.compile(r"^(\s+data\s+)TEXT\b", re.M), r"\1BYTEA"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
)


def postgres_schema(sqlite: str) -> str:
    """The journal's one schema (schema.sql) in PostgreSQL's types: ids are identities (and
    the rows referring to them bigints), times double precision, a step's data bytes."""
    for pattern, replacement in _POSTGRES_TYPES:
        sqlite = pattern.sub(replacement, sqlite)
    return sqlite


@lru_cache(maxsize=256)
def _pg(sql: str) -> str:
    """The journal's SQL with psycopg's placeholders (no statement holds a literal ? or %)."""
    return sql.replace("?", "%s")


def _pg_params(params: Sequence[Any]) -> Sequence[Any]:
    if any(isinstance(p, str) and "\x00" in p for p in params):
        return [p.replace("\x00", "\\x00") if isinstance(p, str) else p for p in params]
    return params


def _one_line(exc: Exception) -> str:
    """A driver error as one line; never the DSN (libpq does not echo passwords, but say so)."""
    return " ".join(str(exc).split()) or type(exc).__name__
