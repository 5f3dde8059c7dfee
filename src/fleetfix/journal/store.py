"""The journal store: SQLite in WAL mode, written in batches, the crash-critical part at once.

What is committed at once, before the engine goes on (each commit also commits every write
queued before it, so the file is always a prefix of the run; docs/safety.md, invariant 1):

- the write-ahead intent of an action (`ActionStarted`), before its first command is sent;
- an action's outcome (`ActionTaken`) and an intent proved undelivered (`mark_undelivered`):
  max_attempts, cooldowns and a resumed run's settling read them;
- the verdict of a step that acted, or that ran a command the journal cannot tell was
  read-only (a shell, command or script step: anything but a probe's parsed read): a resumed
  run replays it instead of running it again;
- leases and the repair-budget admission (other controllers read them);
- the run's start and finish, and its markers (play, batch, step banners, safety stops,
  findings, ownership overrides): a handful per step, not per host.

Everything else (a host's step start, its commands, the verdict of a read-only step, GPUs
seen, back in service) is queued and committed within FLUSH_SECONDS, by the next commit above,
or at close. A kill -9 loses at most that tail, whose steps only read: `--resume` runs them
again. Losing a queued "back in service" only keeps a host counted against the repair budget
a little longer; GPUs seen are committed with the next intent, before any action acts on
them.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetfix.config import setting_text
from fleetfix.errors import FleetfixError
from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    BatchStarted,
    CommandRan,
    Event,
    FindingRaised,
    HostBackInService,
    HostObserved,
    HostStepFinished,
    LoopItemFinished,
    OwnershipOverridden,
    PlayFinished,
    PlayStarted,
    RunFinished,
    RunStarted,
    SafetyStop,
    TaskStarted,
)
from fleetfix.journal import fleet, leases, rows, transfer
from fleetfix.journal.batch import FLUSH_ROWS, FLUSH_SECONDS, Write, WriteQueue
from fleetfix.journal.codec import decode, encode
from fleetfix.journal.db import Database, DatabaseError, is_postgres, open_database, shown
from fleetfix.journal.resume import resume_state, why_not_resumable
from fleetfix.results import ResumeState
from fleetfix.topology.caps import DomainCap

SYSTEM_JOURNAL = Path("/var/lib/fleetfix/journal.sqlite")
DURABLE_EVENTS: tuple[type[Event], ...] = (
    RunStarted,
    PlayStarted,
    BatchStarted,
    TaskStarted,
    PlayFinished,
    RunFinished,
    SafetyStop,
    FindingRaised,
    OwnershipOverridden,
    ActionStarted,
    ActionTaken,
)
"""Events committed at once (with everything queued before them); see the module docstring."""


class JournalError(FleetfixError):
    """The journal file cannot be opened or written."""


class ResumeRefused(JournalError):
    """--resume of a run that finished or that a live controller still runs."""

    def __init__(self, message: str, *, live: bool) -> None:
        super().__init__(message)
        self.live = live


def journal_target(chosen: str | None = None) -> Path | str:
    """The journal a command uses: `chosen` (--journal), else $FLEETFIX_JOURNAL, else the
    config file's `journal`, else `default_journal_path()`. A `postgresql://` DSN stays a
    string (a Path would fold its `//`)."""
    value = chosen or os.environ.get("FLEETFIX_JOURNAL") or setting_text("journal")
    if value:
        return str(value) if is_postgres(str(value)) else Path(str(value))
    return default_journal_path()


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
    """One open journal: a SQLite file, or a team's PostgreSQL database (`postgresql://...`).
    Not shared across processes except through the database itself.

    Call `close()` when done: it commits what is still queued (a Journal dropped without it
    loses its queued tail, as a kill -9 would)."""

    def __init__(
        self,
        target: Path | str,
        *,
        flush_every: float = FLUSH_SECONDS,
        flush_rows: int = FLUSH_ROWS,
    ) -> None:
        self.path = target if isinstance(target, Path) else Path(target)
        """The SQLite file (meaningless for PostgreSQL: see `where`)."""
        self.where = shown(target)
        """Where the journal is, fit to print: a DSN never shows its password."""
        try:
            self._db: Database = open_database(target)
        except (OSError, DatabaseError) as exc:
            raise JournalError(f"cannot open journal {self.where}: {exc}") from exc
        self._queue = WriteQueue(self._db, every=flush_every, rows=flush_rows)
        self.run_id: str | None = None
        self._intents: dict[tuple[str, str, str], int] = {}
        self._acting: set[tuple[str, str]] = set()
        """(host, step key) of steps that started or settled an action and have no verdict
        yet: their verdict is committed at once."""

    @property
    def commit_scheduled(self) -> bool:
        """Writes are queued and a timer will commit them."""
        return self._queue.scheduled

    def flush(self) -> None:
        """Commit everything queued, in order, in one transaction."""
        self._guarded(lambda _db: self._queue.flush())

    def close(self) -> None:
        """Commit what is queued and close the file; no timer fires after this. A journal
        whose database already failed (that failure was raised to the run) just closes."""
        lost = self._queue.failure is not None
        try:
            if lost:
                self._queue.discard()
            else:
                self._guarded(lambda _db: self._queue.close())
        finally:
            if self.run_id is not None:
                with contextlib.suppress(DatabaseError):
                    self._db.release_run(self.run_id)
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
        if self.run_id is not None:
            previous = self.run_id
            self._guarded(lambda db: db.release_run(previous))
        if run_id is None:
            # 6 random hex digits; not uuid, which imports platform (6 ms of every start)
            run_id = time.strftime("%Y%m%d-%H%M%S-") + os.urandom(3).hex()
            self._durable(
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
            self._durable("UPDATE runs SET finished=NULL, outcome=NULL WHERE run_id=?", (run_id,))
        if not self._guarded(lambda db: db.hold_run(run_id)):
            raise ResumeRefused(
                f"cannot resume run {run_id}: another controller holds it", live=True
            )
        self.run_id = run_id
        return run_id

    def __call__(self, event: Event) -> None:
        """Subscribe the journal to a run's events."""
        if self.run_id is None:
            return
        durable = self._queue_event(self.run_id, event)
        if durable:
            self.flush()
        else:
            self._guarded(lambda _db: self._queue.soon())

    def _queue_event(self, run_id: str, event: Event) -> bool:
        """Queue the event's rows; True when they must be committed at once."""
        kind, body = encode(event)
        if isinstance(event, CommandRan):
            self._add(rows.command_write(run_id, event))
            self._add(rows.event_write(run_id, kind, body, refers=True))
            return False
        if isinstance(event, HostStepFinished | LoopItemFinished):
            self._add(rows.step_write(run_id, event))
            self._add(rows.event_write(run_id, kind, body, refers=True))
            return self._verdict_is_durable(event)
        self._add(rows.event_write(run_id, kind, body))
        if isinstance(event, ActionStarted):
            self._acting.add((event.host, event.key))
            self._add(self._intent(run_id, event))
        elif isinstance(event, ActionTaken):
            self._acting.add((event.host, event.key))
            self._add(self._action_outcome(run_id, event))
        elif isinstance(event, HostObserved):
            self._add(self._observed(run_id, event))
        elif isinstance(event, HostBackInService):
            host = event.host
            self._add(lambda db, _made: fleet.back_in_service(db, host))
        return isinstance(event, DURABLE_EVENTS)

    def _verdict_is_durable(self, event: HostStepFinished | LoopItemFinished) -> bool:
        """A step that acted, or ran a command it did not parse as a probe's read."""
        result = event.result
        acted = (result.host, result.key) in self._acting
        self._acting.discard((result.host, result.key))
        return acted or (bool(result.commands) and result.data.get("facts") is None)

    def _intent(self, run_id: str, event: ActionStarted) -> Write:
        """The write-ahead record: committed before the action's first command is sent."""
        params = (
            run_id,
            event.host,
            event.action,
            event.at,
            event.key,
            json.dumps(event.evidence),
        )
        key = (event.host, event.key, event.action)

        def write(db: Database, _made: int | None) -> int | None:
            leases.still_leased(db, run_id, event.host)
            made = db.insert(
                "INSERT INTO actions (run_id, host, action, failed, at, step_key, state,"
                " evidence) VALUES (?,?,?,0,?,?,'started',?)",
                params,
            )
            self._intents[key] = made
            return made

        return write

    def _action_outcome(self, run_id: str, event: ActionTaken) -> Write:
        state = "failed" if event.failed else "ok"

        def write(db: Database, _made: int | None) -> int | None:
            record = self._intents.pop((event.host, event.key, event.action), None)
            if record is None:
                record = _interrupted_intent(db, run_id, event)
            if record is not None:
                db.execute(
                    "UPDATE actions SET state=?, failed=? WHERE id=?",
                    (state, int(event.failed), record),
                )
                return record
            return db.insert(
                "INSERT INTO actions (run_id, host, action, failed, at, step_key, state)"
                " VALUES (?,?,?,?,?,?,?)",
                (run_id, event.host, event.action, int(event.failed), event.at, event.key, state),
            )

        return write

    def _observed(self, run_id: str, event: HostObserved) -> Write:
        def write(db: Database, _made: int | None) -> int | None:
            if event.gpu_count:
                fleet.saw_gpus(db, event.host, event.gpu_count)
            if event.in_service:
                owner = fleet.out_of_service(db).get(event.host)
                if owner is not None and owner != run_id:
                    # Back in service by someone else's hand since fleetfix took it out.
                    fleet.back_in_service(db, event.host)
            return None

        return write

    def mark_undelivered(self, record: int) -> None:
        """A resumed run proved an interrupted action never happened: it no longer counts."""
        self._durable("UPDATE actions SET state='undelivered' WHERE id=?", (record,))

    def finish_run(self, outcome: int) -> None:
        """Record the run's end; from now on no controller runs it (it may be resumed if
        it was interrupted)."""
        if self.run_id is not None:
            run_id = self.run_id
            self._durable(
                "UPDATE runs SET finished=?, outcome=? WHERE run_id=?",
                (time.time(), outcome, run_id),
            )
            self._guarded(lambda db: db.release_run(run_id))

    def _add(self, write: Write) -> None:
        self._guarded(lambda _db: self._queue.add(write))

    def _durable(self, sql: str, params: tuple[Any, ...]) -> None:
        """Commit this statement at once, after everything queued before it."""

        def write(db: Database, _made: int | None) -> int | None:
            db.execute(sql, params)
            return None

        self._add(write)
        self.flush()

    def _failed(self, exc: DatabaseError) -> JournalError:
        """The journal stops at its first database failure, whichever call met it (on
        PostgreSQL a lost connection is often first met by a read): nothing is written after
        it, and releasing or closing after it does not raise."""
        self._queue.fail(exc)
        return JournalError(f"journal {self.where}: {exc}")

    def _guarded(self, call: Callable[[Database], Any]) -> Any:
        try:
            return call(self._db)
        except DatabaseError as exc:
            raise self._failed(exc) from exc

    # --- the fleet across runs -----------------------------------------------------------

    def take_out(
        self,
        host: str,
        action: str,
        limit: int | None,
        domains: Sequence[DomainCap] = (),
    ) -> str | None:
        """Count `host` against the fleet-wide repair budget and its domains' caps, across
        every controller sharing this journal; why not, or None if admitted."""
        self.flush()
        run_id = self.run_id or ""
        result: str | None = self._guarded(
            lambda db: fleet.take_out(db, run_id, host, action, limit=limit, domains=domains)
        )
        return result

    def stranded(self, hosts: Sequence[str]) -> dict[str, str]:
        """Hosts of `hosts` an abandoned run took out of service and left: host -> that run."""
        self.flush()
        run_id = self.run_id or ""
        found: dict[str, str] = self._guarded(lambda db: fleet.stranded(db, run_id, hosts))
        return found

    def run_alive(self, run_id: str) -> bool | None:
        """Is `run_id`'s controller alive, as the database can tell (its session lock on
        PostgreSQL, its lock file on SQLite); None when it cannot (a run it never held)."""
        alive: bool | None = self._guarded(lambda db: db.run_alive(run_id))
        return alive

    def abandoned(self, run_id: str) -> bool:
        """Did `run_id` (a run this journal knows) stop in the middle, its controller gone?"""
        self.flush()
        gone: bool = self._guarded(lambda db: fleet.abandoned(db, run_id))
        return gone

    def settled(self, host: str) -> None:
        """`host`'s state is settled (returned to service, or left drained with the reason a
        human acts on): it no longer counts against the repair budget."""
        self._durable("DELETE FROM out_of_service WHERE host=?", (host,))

    def gpus_seen(self, host: str) -> int | None:
        self.flush()
        result: int | None = self._guarded(lambda db: fleet.gpus_seen(db, host))
        return result

    def out_of_service(self) -> dict[str, str]:
        self.flush()
        result: dict[str, str] = self._guarded(fleet.out_of_service)
        return result

    def out_of_service_since(self) -> dict[str, float]:
        """host -> when fleetfix took it out of service (Unix time), for every host it has out
        and has not returned, across runs and controllers (what the repair budget counts)."""
        self.flush()
        found = self._guarded(
            lambda db: db.execute("SELECT host, since FROM out_of_service").fetchall()
        )
        return {str(host): float(since) for host, since in found}

    # --- reading (each read first commits what is queued: it reads what happened) -----------

    def history(self, limit: int = 20) -> list[RunSummary]:
        self.flush()
        found = self._guarded(
            lambda db: db.execute(
                "SELECT run_id, playbook, check_mode, started, finished, outcome, hosts FROM runs"
                " ORDER BY started DESC LIMIT ?",
                (limit,),
            ).fetchall()
        )
        return [RunSummary(r[0], r[1], bool(r[2]), r[3], r[4], r[5], r[6]) for r in found]

    def run(self, run_id: str) -> RunSummary:
        found = [r for r in self.history(limit=1_000_000) if r.run_id == run_id]
        if not found:
            raise JournalError(f"no run {run_id!r} in {self.where}")
        return found[0]

    def run_argv(self, run_id: str) -> list[str]:
        """The command line the run was started with, as stored (secrets masked)."""
        self.flush()
        found = self._guarded(
            lambda db: db.execute("SELECT argv FROM runs WHERE run_id=?", (run_id,)).fetchall()
        )
        if not found:
            raise JournalError(f"no run {run_id!r} in {self.where}")
        return [str(word) for word in json.loads(found[0][0])]

    def run_hosts(self, run_id: str) -> list[str] | None:
        """The hosts the run set out to cover (its first RunStarted), or None if it never
        said (killed before its first event)."""
        self.flush()
        found = self._guarded(
            lambda db: db.execute(
                "SELECT body FROM events WHERE run_id=? AND type='RunStarted' ORDER BY id LIMIT 1",
                (run_id,),
            ).fetchall()
        )
        if not found:
            return None
        return [str(host) for host in json.loads(found[0][0]).get("hosts", ())]

    def events(self, run_id: str) -> Iterator[Event]:
        """The run's events in the order they happened, for replaying into a report."""
        self.flush()
        cursor = self._guarded(lambda db: db.execute(rows.EVENTS_QUERY, (run_id,)))
        for kind, body, ref, data, command, stdout, stderr in cursor:
            yield decode(kind, body, rows.attached(kind, ref, data, (command, stdout, stderr)))

    def step_rows(self, run_id: str) -> list[dict[str, Any]]:
        """The run's step verdicts in order, each with its registered data."""
        self.flush()
        names = (
            *("host", "step", "step_key", "status", "changed", "message", "attempts"),
            *("duration", "data", "at"),
        )
        found = []
        for row in self._guarded(lambda db: db.execute(rows.STEPS_QUERY, (run_id,))):
            value = dict(zip(names, row[:10], strict=True))
            value["data"] = json.dumps(rows.step_data(row[8], *row[10:]))
            found.append(value)
        return found

    def resume_state(self, run_id: str) -> ResumeState:
        """What `--resume run_id` replays; refuses (JournalError) a finished or live run."""
        summary = self.run(run_id)
        holder = self._guarded(lambda db: leases.live_holder(db, run_id))
        problem = why_not_resumable(summary.finished, summary.outcome, holder)
        if problem is not None:
            raise ResumeRefused(f"cannot resume run {run_id}: {problem}", live=holder is not None)
        return self._guarded(lambda db: resume_state(db, run_id))  # type: ignore[no-any-return]

    def action_times(self, host: str, action: str, since: float) -> list[float]:
        """When `action` was started on `host` since `since` (epoch seconds), across all runs
        and controllers sharing this journal; an interrupted start counts (it may have run)."""
        self.flush()
        found = self._guarded(
            lambda db: db.execute(
                "SELECT at FROM actions WHERE host=? AND action=? AND at>=?"
                " AND state!='undelivered' ORDER BY at",
                (host, action, since),
            ).fetchall()
        )
        return [float(r[0]) for r in found]

    # --- moving the history ----------------------------------------------------------------

    def export(self, run_id: str | None = None) -> Iterator[str]:
        """Every row (or one run's) as JSON lines; see journal/transfer.py."""
        self.flush()
        if run_id is not None:
            self.run(run_id)  # a clear error for an unknown id
        try:  # row by row: a large history is never held whole
            yield from transfer.export_lines(self._db, run_id)
        except DatabaseError as exc:
            raise self._failed(exc) from exc

    def migrate_to(self, target: Journal) -> transfer.Moved:
        """Copy this journal's history into `target` (runs it has are skipped). Refused while
        a run recorded here is live: its controller would go on writing here."""
        self.flush()
        live = self._guarded(
            lambda db: [
                r.run_id for r in self.history(1_000_000) if leases.live_holder(db, r.run_id)
            ]
        )
        if live:
            raise JournalError(
                f"run {live[0]} in {self.where} is still running; migrate when it has ended"
            )
        target.flush()
        moved: transfer.Moved = target._guarded(
            lambda into: self._guarded(lambda db: transfer.migrate(db, into))
        )
        return moved

    # --- leases --------------------------------------------------------------------------

    def acquire_leases(self, hosts: Sequence[str]) -> dict[str, str]:
        """Lease every host to this run; returns host -> holder for hosts another live run holds."""
        self.flush()
        busy: dict[str, str] = self._guarded(lambda db: leases.take(db, self.run_id, hosts))
        return busy

    def renew_leases(self) -> None:
        """Push this run's leases LEASE_SECONDS ahead; called every LEASE_RENEW while it lives."""
        self._durable(leases.RENEW, (time.time() + leases.LEASE_SECONDS, self.run_id))

    def release_leases(self) -> None:
        """Free this run's hosts. After a lost database there is nothing to release through:
        PostgreSQL freed them with the session, a SQLite lease lapses with its process."""
        if self._queue.failure is None:
            self._durable(leases.RELEASE, (self.run_id,))


def _interrupted_intent(db: Database, run_id: str, event: ActionTaken) -> int | None:
    """The row a resumed run settles: this run's latest start of that action in that step."""
    row = db.execute(
        "SELECT id FROM actions WHERE run_id=? AND host=? AND step_key=? AND action=?"
        " AND state!='undelivered' ORDER BY id DESC LIMIT 1",
        (run_id, event.host, event.key, event.action),
    ).fetchone()
    return int(row[0]) if row else None
