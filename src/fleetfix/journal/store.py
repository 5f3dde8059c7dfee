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
from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    CommandRan,
    Event,
    HostBackInService,
    HostObserved,
    HostStepFinished,
)
from fleetfix.journal import fleet
from fleetfix.journal.codec import decode, encode, excerpt
from fleetfix.journal.resume import resume_state, why_not_resumable
from fleetfix.results import ResumeState

LEASE_SECONDS = 600.0
"""A lease outlives its holder by at most this long; a live run renews it (LEASE_RENEW)."""
LEASE_RENEW = 60.0
SYSTEM_JOURNAL = Path("/var/lib/fleetfix/journal.sqlite")
_ACTION_COLUMNS = {
    "step_key": "TEXT NOT NULL DEFAULT ''",
    "state": "TEXT NOT NULL DEFAULT 'ok'",
    "evidence": "TEXT NOT NULL DEFAULT '{}'",
}


class JournalError(FleetfixError):
    """The journal file cannot be opened or written."""


class ResumeRefused(JournalError):
    """--resume of a run that finished or that a live controller still runs."""

    def __init__(self, message: str, *, live: bool) -> None:
        super().__init__(message)
        self.live = live


def default_journal_path() -> Path:
    """One journal every controller on this machine shares, so attempt caps, cooldowns, leases
    and the repair budget hold across runs, users and timers: $FLEETFIX_JOURNAL if set, the
    system journal when root, else the user's state dir (set FLEETFIX_JOURNAL to a shared,
    group-writable path when several non-root users operate one fleet)."""
    chosen = os.environ.get("FLEETFIX_JOURNAL")
    if chosen:
        return Path(chosen)
    if os.geteuid() == 0:
        return SYSTEM_JOURNAL
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
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open journal {path}: {exc}") from exc
        self.run_id: str | None = None
        self._intents: dict[tuple[str, str, str], int] = {}

    def _migrate(self) -> None:
        """Version 1 journals lack the intent columns of `actions`."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(actions)")}
        for column, ddl in _ACTION_COLUMNS.items():
            if column not in have:
                self._db.execute(f"ALTER TABLE actions ADD COLUMN {column} {ddl}")

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
        elif isinstance(event, ActionStarted):
            self._intent(event)
        elif isinstance(event, ActionTaken):
            self._action_outcome(event)
        elif isinstance(event, HostObserved):
            self._observed(event)
        elif isinstance(event, HostBackInService):
            self._guarded(fleet.back_in_service, event.host)

    def _intent(self, event: ActionStarted) -> None:
        """The write-ahead record: committed before the action's first command is sent."""
        cursor = self._execute(
            "INSERT INTO actions (run_id, host, action, failed, at, step_key, state, evidence)"
            " VALUES (?,?,?,0,?,?,'started',?)",
            (
                self.run_id,
                event.host,
                event.action,
                event.at,
                event.key,
                json.dumps(event.evidence),
            ),
        )
        if cursor.lastrowid is not None:
            self._intents[(event.host, event.key, event.action)] = cursor.lastrowid

    def _action_outcome(self, event: ActionTaken) -> None:
        record = self._intents.pop((event.host, event.key, event.action), None)
        if record is None:
            record = self._interrupted_intent(event)
        state = "failed" if event.failed else "ok"
        if record is None:
            self._write(
                "INSERT INTO actions (run_id, host, action, failed, at, step_key, state)"
                " VALUES (?,?,?,?,?,?,?)",
                (
                    self.run_id,
                    event.host,
                    event.action,
                    int(event.failed),
                    event.at,
                    event.key,
                    state,
                ),
            )
        else:
            self._write(
                "UPDATE actions SET state=?, failed=? WHERE id=?",
                (state, int(event.failed), record),
            )

    def _interrupted_intent(self, event: ActionTaken) -> int | None:
        """The row a resumed run settles: this run's latest start of that action in that step."""
        row = self._db.execute(
            "SELECT id FROM actions WHERE run_id=? AND host=? AND step_key=? AND action=?"
            " AND state!='undelivered' ORDER BY id DESC LIMIT 1",
            (self.run_id, event.host, event.key, event.action),
        ).fetchone()
        return int(row[0]) if row else None

    def _observed(self, event: HostObserved) -> None:
        if event.gpu_count:
            self._guarded(fleet.saw_gpus, event.host, event.gpu_count)
        if event.in_service:
            owner = fleet.out_of_service(self._db).get(event.host)
            if owner is not None and owner != self.run_id:
                # Back in service by someone else's hand since fleetfix took it out.
                self._guarded(fleet.back_in_service, event.host)

    def mark_undelivered(self, record: int) -> None:
        """A resumed run proved an interrupted action never happened: it no longer counts."""
        self._write("UPDATE actions SET state='undelivered' WHERE id=?", (record,))

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
        self._execute(sql, params)

    def _execute(self, sql: str, params: Iterable[Any]) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, tuple(params))
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from exc

    def _guarded(self, write: Any, *args: Any) -> Any:
        try:
            return write(self._db, *args)
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: {exc}") from exc

    # --- the fleet across runs -----------------------------------------------------------

    def take_out(self, host: str, action: str, limit: int | None) -> str | None:
        """Count `host` against the fleet-wide repair budget; why not, or None if admitted."""
        result: str | None = self._guarded(fleet.take_out, self.run_id or "", host, action, limit)
        return result

    def gpus_seen(self, host: str) -> int | None:
        result: int | None = self._guarded(fleet.gpus_seen, host)
        return result

    def out_of_service(self) -> dict[str, str]:
        result: dict[str, str] = self._guarded(fleet.out_of_service)
        return result

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

    def resume_state(self, run_id: str) -> ResumeState:
        """What `--resume run_id` replays; refuses (JournalError) a finished or live run."""
        summary = self.run(run_id)
        holder = self._live_holder(run_id)
        problem = why_not_resumable(summary.finished, summary.outcome, holder)
        if problem is not None:
            raise ResumeRefused(f"cannot resume run {run_id}: {problem}", live=holder is not None)
        return self._guarded(resume_state, run_id)  # type: ignore[no-any-return]

    def _live_holder(self, run_id: str) -> str | None:
        now = time.time()
        for controller, pid, expires in self._db.execute(
            "SELECT controller, pid, expires FROM leases WHERE run_id=?", (run_id,)
        ).fetchall():
            if _alive(controller, pid, expires, now):
                return f"pid {pid} on {controller}"
        return None

    def action_times(self, host: str, action: str, since: float) -> list[float]:
        """When `action` was started on `host` since `since` (epoch seconds), across all runs
        and controllers sharing this journal; an interrupted start counts (it may have run)."""
        rows = self._db.execute(
            "SELECT at FROM actions WHERE host=? AND action=? AND at>=? AND state!='undelivered'"
            " ORDER BY at",
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

    def renew_leases(self) -> None:
        """Push this run's leases LEASE_SECONDS ahead; called every LEASE_RENEW while it lives."""
        self._write(
            "UPDATE leases SET expires=? WHERE run_id=?", (time.time() + LEASE_SECONDS, self.run_id)
        )

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
