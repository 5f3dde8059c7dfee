"""Leases: which run works on which host, shared by every controller using the journal.

A run leases every host no other live run holds, in one fleet transaction
(`Database.begin(fleet=True)`), leaves the others out, renews its leases while it lives and
releases them when it ends. A lease's holder is alive while the database says so (PostgreSQL:
the run's session lock, dropped when its connection ends; SQLite: the run's lock file beside
the journal, which the kernel unlocks when the process dies), or, for a run recorded by an
older fleetfix, until the lease expires or its process is gone on this same machine.
docs/team.md tells the whole story; docs/safety.md invariant 14.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Sequence

from fleetfix.journal.db import Database, DatabaseError

LEASE_SECONDS = 600.0
"""A lease outlives its holder by at most this long; a live run renews it (LEASE_RENEW)."""
LEASE_RENEW = 60.0
RENEW = "UPDATE leases SET expires=? WHERE run_id=?"
RELEASE = "DELETE FROM leases WHERE run_id=?"


def take(db: Database, run_id: str | None, hosts: Sequence[str]) -> dict[str, str]:
    """Lease to `run_id` every host of `hosts` no other live run holds, in one fleet
    transaction: returns host -> holder for the hosts left out. Of two controllers asking for
    the same host at once, one gets it; each gets every host nobody else holds, so one leased
    host never stops a whole fleet's run (issue 19)."""
    now = time.time()
    controller = socket.gethostname()
    wanted = set(hosts)
    busy: dict[str, str] = {}
    alive: dict[str, bool | None] = {}
    db.begin(fleet=True)
    try:
        for host, other, holder, pid, expires, started in db.execute(
            "SELECT l.host, l.run_id, l.controller, l.pid, l.expires, r.started"
            " FROM leases l LEFT JOIN runs r ON r.run_id = l.run_id"
        ).fetchall():
            if host not in wanted or other == run_id:
                continue
            if other not in alive:
                alive[other] = db.run_alive(other)
            if holder_alive(holder, pid, expires, now, alive[other]):
                busy[host] = holder_text(other, holder, pid, started)
        free = [h for h in hosts if h not in busy]
        if free:
            db.executemany(
                "INSERT INTO leases VALUES (?,?,?,?,?) ON CONFLICT(host) DO UPDATE SET"
                " run_id=excluded.run_id, controller=excluded.controller,"
                " pid=excluded.pid, expires=excluded.expires",
                [(h, run_id, controller, os.getpid(), now + LEASE_SECONDS) for h in free],
            )
        db.commit()
    except BaseException:
        with contextlib.suppress(DatabaseError):
            db.rollback()
        raise
    return busy


def holder_text(run_id: str, controller: str, pid: int, started: float | None) -> str:
    """'run X from controller Y (pid P) since T': who holds a host, for the one line a run
    prints for each host it leaves out."""
    since = ""
    if started is not None:
        since = " since " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(started)))
    return f"run {run_id} from controller {controller} (pid {pid}){since}"


def live_holder(db: Database, run_id: str) -> str | None:
    """Who still runs `run_id` (a live controller), or None."""
    now = time.time()
    held = db.run_alive(run_id)
    found = db.execute(
        "SELECT controller, pid, expires FROM leases WHERE run_id=?", (run_id,)
    ).fetchall()
    for controller, pid, expires in found:
        if holder_alive(controller, pid, expires, now, held):
            return f"pid {pid} on {controller}"
    if held:
        return "a live controller (it holds the run's lock)"
    return None


def still_leased(db: Database, run_id: str, host: str) -> None:
    """Refuse an intent (so the action is never sent) when another run has taken the host's
    lease: this controller was presumed dead (its lease lapsed, its database session ended)."""
    row = db.execute("SELECT run_id FROM leases WHERE host=?", (host,)).fetchone()
    if row is not None and row[0] != run_id:
        raise DatabaseError(f"{host}'s lease was taken over by run {row[0]}; not acting on it")


def holder_alive(controller: str, pid: int, expires: float, now: float, held: bool | None) -> bool:
    """Is a lease's holder alive? When the database can tell (PostgreSQL: the run's session
    lock), it decides: a controller is known dead when its database session has ended,
    whatever the lease's expiry says. Otherwise a lease holds until it expires, or until its
    process is gone on this same machine."""
    if held is not None:
        return held
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
