"""The journal store: SQLite in WAL mode; each event is committed as it arrives (kill -9 safe)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fleetfix.errors import FleetfixError
from fleetfix.events import ActionTaken, CommandRan, Event, HostStepFinished
from fleetfix.journal.codec import decode, encode, excerpt
from fleetfix.results import Status

DONE = frozenset({Status.OK.value, Status.CHANGED.value, Status.SKIPPED.value})
LEASE_SECONDS = 6 * 3600


class JournalError(FleetfixError):
    """The journal file cannot be opened or written."""


def default_journal_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "fleetfix" / "journal.sqlite"


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: str
    playbook: str
    check_mode: bool
    started: float
    finished: float | None
    outcome: int | None
    hosts: int


class Journal:
    """One open journal file. Not shared across processes except through SQLite itself."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, timeout=10.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            schema = resources.files("fleetfix.journal").joinpath("schema.sql").read_text()
            self._db.executescript(schema)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open journal {path}: {exc}") from exc
        self.run_id: str | None = None

    def close(self) -> None:
        self._db.close()

    # --- writing -------------------------------------------------------------------------

    def start_run(
        self,
        playbook: str,
        argv: Sequence[str],
        *,
        check: bool,
        hosts: int,
        run_id: str | None = None,
    ) -> str:
        """Record a new run (or reopen `run_id` when resuming) and return its id."""
        if run_id is None:
            run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
            self._write(
                "INSERT INTO runs VALUES (?,?,?,?,?,NULL,NULL,?,?)",
                (
                    run_id,
                    playbook,
                    json.dumps(list(argv)),
                    int(check),
                    time.time(),
                    hosts,
                    socket.gethostname(),
                ),
            )
        else:
            self._write("UPDATE runs SET finished=NULL, outcome=NULL WHERE run_id=?", (run_id,))
        self.run_id = run_id
        return run_id

    def __call__(self, event: Event) -> None:
        """Subscribe the journal to a run's events."""
        if self.run_id is None:
            return
        kind, body = encode(event)
        self._write(
            "INSERT INTO events (run_id, type, body) VALUES (?,?,?)", (self.run_id, kind, body)
        )
        if isinstance(event, HostStepFinished):
            self._step(event)
        elif isinstance(event, CommandRan):
            self._command(event)
        elif isinstance(event, ActionTaken):
            self._write(
                "INSERT INTO actions (run_id, host, action, failed, at) VALUES (?,?,?,?,?)",
                (self.run_id, event.host, event.action, int(event.failed), event.at),
            )

    def finish_run(self, outcome: int) -> None:
        if self.run_id is not None:
            self._write(
                "UPDATE runs SET finished=?, outcome=? WHERE run_id=?",
                (time.time(), outcome, self.run_id),
            )

    def _step(self, event: HostStepFinished) -> None:
        r = event.result
        data = json.dumps(_bounded(dict(r.data)), default=str)
        self._write(
            "INSERT INTO steps (run_id, host, step, step_key, status, changed, message, attempts,"
            " duration, data, at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.run_id,
                r.host,
                r.step,
                r.key,
                r.status.value,
                int(r.changed),
                r.message,
                r.attempts,
                r.duration,
                data,
                event.at,
            ),
        )

    def _command(self, event: CommandRan) -> None:
        c = event.result
        self._write(
            "INSERT INTO commands (run_id, host, step, command, rc, timed_out, planned, duration,"
            " stdout, stderr, at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.run_id,
                event.host,
                event.step,
                c.command,
                c.rc,
                int(c.timed_out),
                int(event.planned_only),
                c.duration,
                excerpt(c.stdout),
                excerpt(c.stderr),
                event.at,
            ),
        )

    def _write(self, sql: str, params: Iterable[Any]) -> None:
        try:
            self._db.execute(sql, tuple(params))
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from exc

    # --- reading -------------------------------------------------------------------------

    def history(self, limit: int = 20) -> list[RunSummary]:
        rows = self._db.execute(
            "SELECT run_id, playbook, check_mode, started, finished, outcome, hosts FROM runs"
            " ORDER BY started DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [RunSummary(r[0], r[1], bool(r[2]), r[3], r[4], r[5], r[6]) for r in rows]

    def run(self, run_id: str) -> RunSummary:
        rows = [r for r in self.history(limit=1_000_000) if r.run_id == run_id]
        if not rows:
            raise JournalError(f"no run {run_id!r} in {self.path}")
        return rows[0]

    def events(self, run_id: str) -> Iterator[Event]:
        """The run's events in the order they happened, for replaying into a report."""
        cursor = self._db.execute(
            "SELECT type, body FROM events WHERE run_id=? ORDER BY id", (run_id,)
        )
        for kind, body in cursor:
            yield decode(kind, body)

    def step_rows(self, run_id: str) -> list[dict[str, Any]]:
        cursor = self._db.execute(
            "SELECT host, step, step_key, status, changed, message, attempts, duration, data, at"
            " FROM steps WHERE run_id=? ORDER BY id",
            (run_id,),
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def completed(self, run_id: str) -> dict[tuple[str, str], dict[str, Any]]:
        """(host, step_key) -> registered data, for steps a resumed run may skip."""
        done: dict[tuple[str, str], dict[str, Any]] = {}
        for row in self.step_rows(run_id):
            key = (row["host"], row["step_key"])
            if row["status"] in DONE:
                done[key] = json.loads(row["data"])
            else:
                done.pop(key, None)
        return done

    def action_times(self, host: str, action: str, since: float) -> list[float]:
        """When `action` really ran on `host` since `since` (epoch seconds), across all runs."""
        rows = self._db.execute(
            "SELECT at FROM actions WHERE host=? AND action=? AND at>=? ORDER BY at",
            (host, action, since),
        ).fetchall()
        return [float(r[0]) for r in rows]

    # --- leases --------------------------------------------------------------------------

    def acquire_leases(self, hosts: Sequence[str]) -> dict[str, str]:
        """Lease every host to this run; returns host -> holder for hosts another live run holds."""
        now = time.time()
        controller = socket.gethostname()
        busy: dict[str, str] = {}
        self._write("BEGIN IMMEDIATE", ())
        try:
            for host, run_id, holder, pid, expires in self._db.execute(
                "SELECT host, run_id, controller, pid, expires FROM leases"
            ).fetchall():
                if host in hosts and run_id != self.run_id and _alive(holder, pid, expires, now):
                    busy[host] = f"run {run_id} (pid {pid} on {holder})"
            if not busy:
                self._db.executemany(
                    "INSERT OR REPLACE INTO leases VALUES (?,?,?,?,?)",
                    [(h, self.run_id, controller, os.getpid(), now + LEASE_SECONDS) for h in hosts],
                )
        finally:
            self._write("COMMIT", ())
        return busy

    def release_leases(self) -> None:
        self._write("DELETE FROM leases WHERE run_id=?", (self.run_id,))


def _alive(controller: str, pid: int, expires: float, now: float) -> bool:
    """A lease holds until it expires, or until its process is gone on this same machine."""
    if expires < now:
        return False
    if controller != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bounded(data: dict[str, Any]) -> dict[str, Any]:
    """Registered data with long output cut, so a resumed run can restore it cheaply."""
    for key in ("stdout", "stderr"):
        if isinstance(data.get(key), str):
            data[key] = excerpt(data[key], 65536)
    data.pop("stdout_lines", None)
    data.pop("stderr_lines", None)
    return data
