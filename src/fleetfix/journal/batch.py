"""Batched journal writes: queued in event order, committed together, never reordered.

Every write the journal makes goes through one `WriteQueue`. A write that must be durable at
once commits the queue up to and including itself (`flush`); the others wait for the next
flush: at most `every` seconds later (a timer on the running event loop), when `rows` writes
are waiting, or at close. So the file on disk always holds a prefix of the run's writes: a
kill -9 loses at most the unflushed tail, never a write from the middle.

Without a running event loop (fleetfix used as a library, synchronously) there is no timer to
bound the wait, so each write is committed at once, as before batching.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from fleetfix.journal.db import Database, DatabaseError

Write = Callable[[Database, int | None], int | None]
"""One queued write: run inside the flush's transaction with the row id the write before it
made (an event row refers to the step or command row queued just before it); returns the id
of the row it made, if any."""

FLUSH_SECONDS = 0.1
"""The longest a queued write waits for its commit while the run goes on."""
FLUSH_ROWS = 500
"""Queued writes that trigger a commit without waiting for the timer."""


class WriteQueue:
    """The writes not yet committed, and the timer that commits them."""

    def __init__(
        self, db: Database, *, every: float = FLUSH_SECONDS, rows: int = FLUSH_ROWS
    ) -> None:
        self._db = db
        self._every = every
        self._rows = rows
        self._pending: list[Write] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.failure: DatabaseError | None = None
        """A commit that failed: every later write fails too, so nothing after a lost
        write is ever committed (the file stays a prefix of the run)."""

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def scheduled(self) -> bool:
        """A timer will commit the queue."""
        return self._timer is not None

    def add(self, write: Write) -> None:
        """Queue `write`; it is committed by the next flush."""
        self._raise_failure()
        if self._closed:
            raise DatabaseError("the journal is closed")
        self._pending.append(write)

    def soon(self) -> None:
        """Commit what is queued within `every` seconds (at once without an event loop, or
        when `rows` writes wait)."""
        if not self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if len(self._pending) >= self._rows:
            self.flush()
        elif self._timer is None or self._timer_loop is not loop:
            self._timer = loop.call_later(self._every, self._timed_flush)
            self._timer_loop = loop

    def flush(self) -> None:
        """Commit every queued write, in order, in one transaction. Raises DatabaseError
        (then, and from every later call, as the queued writes are lost)."""
        self._cancel_timer()
        self._raise_failure()
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        try:
            self._commit(pending)
        except DatabaseError as exc:
            self.failure = exc
            raise

    def fail(self, exc: DatabaseError) -> None:
        """The database failed a call made outside the queue (a read, a fleet decision): every
        later write fails as after a failed commit (the first failure is the one kept)."""
        if self.failure is None:
            self.failure = exc

    def close(self) -> None:
        """Commit what is queued; no timer fires after this."""
        try:
            self.flush()
        finally:
            self._closed = True
            self._cancel_timer()

    def discard(self) -> None:
        """Close without committing: the queue's writes can no longer be committed."""
        self._pending = []
        self._closed = True
        self._cancel_timer()

    def _commit(self, pending: list[Write]) -> None:
        db = self._db
        db.begin()
        try:
            made: int | None = None
            for write in pending:
                made = write(db, made)
            db.commit()
        except BaseException:
            with contextlib.suppress(DatabaseError):  # a lost connection has no transaction
                db.rollback()
            raise

    def _timed_flush(self) -> None:
        self._timer = None
        if self._closed or self.failure is not None:
            return
        with contextlib.suppress(DatabaseError):  # kept in self.failure: the next write raises it
            self.flush()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_loop = None

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure
