"""Moving a journal's history: export it as JSON lines, migrate it into another journal (a
machine's SQLite history into the team's PostgreSQL).

A migration copies runs with everything they recorded (steps, commands, events, actions) and
the fleet's memory (hosts out of service, GPUs seen). Row ids are the target's own: references
between rows (a step's command, an event's row) are mapped as they are copied, so a history
can join a database other controllers already write. A run the target already has is skipped,
so running the migration twice copies nothing twice. Leases are not copied: they belong to
live runs, and a run being migrated must not be live (the command refuses).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fleetfix.journal.db import Database
from fleetfix.journal.rows import step_data

COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": (
        *("run_id", "playbook", "argv", "check_mode", "started", "finished", "outcome"),
        *("hosts", "controller"),
    ),
    "commands": (
        *("id", "run_id", "host", "step", "command", "rc", "timed_out", "planned"),
        *("duration", "stdout", "stderr", "at", "stdout_size", "stderr_size"),
    ),
    "steps": (
        *("id", "run_id", "host", "step", "step_key", "status", "changed", "message"),
        *("attempts", "duration", "data", "at", "command_id"),
    ),
    "events": ("id", "run_id", "type", "body", "ref"),
    "actions": (
        *("id", "run_id", "host", "action", "failed", "at", "step_key", "state"),
        "evidence",
    ),
    "out_of_service": ("host", "run_id", "since", "action"),
    "host_facts": ("host", "key", "value", "at"),
}
PER_RUN = ("commands", "steps", "events", "actions")
"""Tables whose rows belong to a run, copied in this order (events refer to the first two)."""


@dataclass
class Moved:
    """What a migration copied and skipped."""

    runs: int = 0
    skipped_runs: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)


def export_rows(db: Database, run_id: str | None = None) -> Iterator[dict[str, Any]]:
    """Every row as `{"table": ..., "row": {...}}`, a step's data as JSON (decompressed);
    with `run_id`, that run's rows only."""
    for table, columns in COLUMNS.items():
        if run_id is not None and table not in ("runs", *PER_RUN):
            continue
        where, params = (" WHERE run_id=?", (run_id,)) if run_id is not None else ("", ())
        order = " ORDER BY id" if "id" in columns else ""
        sql = f"SELECT {', '.join(columns)} FROM {table}{where}{order}"
        for found in db.execute(sql, params):
            row = dict(zip(columns, found, strict=True))
            if table == "steps":
                row["data"] = step_data(row["data"], None, None, None)
            yield {"table": table, "row": row}


def export_lines(db: Database, run_id: str | None = None) -> Iterator[str]:
    for record in export_rows(db, run_id):
        yield json.dumps(record, separators=(",", ":"), default=str)


def migrate(source: Database, target: Database) -> Moved:
    """Copy `source`'s history into `target`, in one transaction of the target's."""
    moved = Moved()
    have = {row[0] for row in target.execute("SELECT run_id FROM runs").fetchall()}
    target.begin(fleet=True)
    try:
        runs = source.execute(f"SELECT {', '.join(COLUMNS['runs'])} FROM runs ORDER BY started")
        for run in runs.fetchall():
            if run[0] in have:
                moved.skipped_runs.append(run[0])
                continue
            _insert(target, "runs", COLUMNS["runs"], run)
            _copy_run(source, target, run[0], moved)
            moved.runs += 1
        _merge_fleet(source, target, moved)
        target.commit()
    except BaseException:
        target.rollback()
        raise
    return moved


def _copy_run(source: Database, target: Database, run_id: str, moved: Moved) -> None:
    made: dict[str, dict[int, int]] = {"commands": {}, "steps": {}}
    for table in PER_RUN:
        columns = COLUMNS[table]
        kept = columns[1:]  # every column but the id: the target numbers its own rows
        sql = f"SELECT {', '.join(columns)} FROM {table} WHERE run_id=? ORDER BY id"
        for found in source.execute(sql, (run_id,)).fetchall():
            row = dict(zip(columns, found, strict=True))
            if table == "steps":
                row["data"] = _bytes(row["data"])
                row["command_id"] = made["commands"].get(row["command_id"])
            elif table == "events" and row["ref"] is not None:
                refers = "commands" if row["type"] == "CommandRan" else "steps"
                row["ref"] = made[refers].get(row["ref"])
            new_id = _insert(target, table, kept, tuple(row[c] for c in kept))
            if table in made:
                made[table][int(row["id"])] = new_id
            moved.rows[table] = moved.rows.get(table, 0) + 1


def _merge_fleet(source: Database, target: Database, moved: Moved) -> None:
    """Hosts out of service and GPUs seen: the target's own rows win (and are not counted as
    copied: a second migration copies nothing)."""
    for table, key in (("out_of_service", "host"), ("host_facts", "host, key")):
        columns = COLUMNS[table]
        for found in source.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall():
            marks = ", ".join("?" for _ in columns)
            inserted = target.execute(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
                f" ON CONFLICT({key}) DO NOTHING",
                found,
            ).rowcount
            if inserted > 0:
                moved.rows[table] = moved.rows.get(table, 0) + inserted


def _insert(target: Database, table: str, columns: tuple[str, ...], values: Any) -> int:
    marks = ", ".join("?" for _ in columns)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
    if table == "runs":
        target.execute(sql, tuple(values))
        return 0
    return target.insert(sql, tuple(values))


def _bytes(data: str | bytes | memoryview) -> bytes:
    """A step's data as the bytes both backends store (older SQLite rows hold text)."""
    if isinstance(data, str):
        return data.encode()
    return bytes(data)
