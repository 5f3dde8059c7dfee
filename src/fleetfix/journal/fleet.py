"""What the journal remembers about the fleet across runs: who is out of service, GPUs seen.

Every controller on a machine shares one journal file (see `default_journal_path`), and a
team's controllers one PostgreSQL database, so these answers hold across runs, operators,
timers and controllers, not just inside one run.
"""

from __future__ import annotations

import contextlib
import time

from fleetfix.journal.db import Database, DatabaseError


def take_out(db: Database, run_id: str, host: str, action: str, limit: int | None) -> str | None:
    """Count `host` as taken out of service by fleetfix, unless that would exceed the fleet-wide
    repair budget `limit` (hosts). Atomic across processes and controllers (one fleet
    transaction, `db.begin(fleet=True)`): two controllers cannot both take the last slot.
    Returns why not, or None when admitted."""
    db.begin(fleet=True)
    try:
        if db.execute("SELECT 1 FROM out_of_service WHERE host=?", (host,)).fetchone():
            db.commit()
            return None
        if limit is not None:
            out = [row[0] for row in db.execute("SELECT host FROM out_of_service ORDER BY since")]
            if len(out) >= limit:
                db.rollback()
                shown = ", ".join(out[:5]) + (" ..." if len(out) > 5 else "")
                return (
                    f"repair budget reached: {len(out)} hosts already out of service by "
                    f"fleetfix (limit {limit}: {shown})"
                )
        db.execute(
            "INSERT INTO out_of_service VALUES (?,?,?,?)", (host, run_id, time.time(), action)
        )
        db.commit()
    except BaseException:  # Ctrl-C too: never leave the fleet transaction (and its lock) open
        with contextlib.suppress(DatabaseError):  # a lost connection: the real error wins
            db.rollback()
        raise
    return None


def back_in_service(db: Database, host: str) -> None:
    db.execute("DELETE FROM out_of_service WHERE host=?", (host,))


def out_of_service(db: Database) -> dict[str, str]:
    """host -> the run that took it out."""
    return dict(db.execute("SELECT host, run_id FROM out_of_service").fetchall())


def saw_gpus(db: Database, host: str, count: int) -> None:
    """Remember the most GPUs `host` ever showed: the count a node must come back with."""
    db.execute(
        "INSERT INTO host_facts VALUES (?, 'gpus_seen', ?, ?) ON CONFLICT(host, key) DO UPDATE"
        " SET value=excluded.value, at=excluded.at"
        " WHERE CAST(excluded.value AS INTEGER) > CAST(host_facts.value AS INTEGER)",
        (host, str(count), time.time()),
    )


def gpus_seen(db: Database, host: str) -> int | None:
    row = db.execute(
        "SELECT value FROM host_facts WHERE host=? AND key='gpus_seen'", (host,)
    ).fetchone()
    return int(row[0]) if row else None
