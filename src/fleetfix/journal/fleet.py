"""What the journal remembers about the fleet across runs: who is out of service, GPUs seen.

Every controller on a machine shares one journal file (see `default_journal_path`), and a
team's controllers one PostgreSQL database, so these answers hold across runs, operators,
timers and controllers, not just inside one run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

from fleetfix.journal import leases
from fleetfix.journal.db import Database, DatabaseError
from fleetfix.topology.caps import DomainCap


def take_out(
    db: Database,
    run_id: str,
    host: str,
    action: str,
    *,
    limit: int | None,
    domains: Sequence[DomainCap] = (),
) -> str | None:
    """Count `host` as taken out of service by fleetfix, unless that would exceed the fleet-wide
    repair budget `limit` (hosts) or a domain's cap. Atomic across processes and controllers
    (one fleet transaction, `db.begin(fleet=True)`): two controllers cannot both take the last
    slot of the budget or of a rack. Returns why not, or None when admitted."""
    db.begin(fleet=True)
    try:
        if db.execute("SELECT 1 FROM out_of_service WHERE host=?", (host,)).fetchone():
            db.commit()
            return None
        rows = db.execute("SELECT host, run_id FROM out_of_service ORDER BY since").fetchall()
        why = _over_cap(host, {h: r for h, r in rows}, domains) or _over_budget(
            [h for h, _ in rows], limit
        )
        if why is not None:
            db.rollback()
            return why
        db.execute(
            "INSERT INTO out_of_service VALUES (?,?,?,?)", (host, run_id, time.time(), action)
        )
        db.commit()
    except BaseException:  # Ctrl-C too: never leave the fleet transaction (and its lock) open
        with contextlib.suppress(DatabaseError):  # a lost connection: the real error wins
            db.rollback()
        raise
    return None


def _over_budget(out: list[str], limit: int | None) -> str | None:
    if limit is None or len(out) < limit:
        return None
    shown = ", ".join(out[:5]) + (" ..." if len(out) > 5 else "")
    return (
        f"repair budget reached: {len(out)} hosts already out of service by "
        f"fleetfix (limit {limit}: {shown})"
    )


def _over_cap(host: str, journal_out: dict[str, str], domains: Sequence[DomainCap]) -> str | None:
    """The first domain `host` would push past its cap, said with who is out there."""
    for domain in domains:
        out = {h: f"run {r}" for h, r in journal_out.items() if h in domain.members}
        for other in domain.scheduler_out & domain.members:
            out.setdefault(other, "Slurm")
        out.pop(host, None)
        if len(out) >= domain.cap:
            shown = ", ".join(f"{h} ({who})" for h, who in sorted(out.items())[:5])
            return (
                f"max_unavailable_per reached in {domain.label} across controllers: "
                f"{len(out)} out (cap {domain.cap}: {shown})"
            )
    return None


INTERRUPTED = 99
"""A run's outcome when Ctrl-C or a signal stopped it (results.Outcome.INTERRUPTED)."""


def abandoned(db: Database, run_id: str) -> bool:
    """Did `run_id` stop in the middle, its controller gone? Never finished (killed, crashed,
    its machine lost) or interrupted, and no live controller runs it. A run that finished
    left its nodes as it meant to (drained for maintenance, for an RMA): never abandoned."""
    row = db.execute("SELECT finished, outcome FROM runs WHERE run_id=?", (run_id,)).fetchone()
    if row is None:
        return False  # a run this journal does not know: another journal's, alive or not
    finished, outcome = row
    if finished is not None and outcome != INTERRUPTED:
        return False
    return leases.live_holder(db, run_id) is None


def stranded(db: Database, run_id: str, hosts: Sequence[str]) -> dict[str, str]:
    """Hosts of `hosts` that an abandoned run other than `run_id` took out of service and
    never returned: host -> that run. The next run covering them adopts them."""
    wanted = set(hosts)
    found: dict[str, str] = {}
    gone: dict[str, bool] = {}
    for host, other in db.execute("SELECT host, run_id FROM out_of_service").fetchall():
        if host not in wanted or other == run_id:
            continue
        if other not in gone:
            gone[other] = abandoned(db, other)
        if gone[other]:
            found[host] = other
    return found


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
