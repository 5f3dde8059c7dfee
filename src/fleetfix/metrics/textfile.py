"""`--metrics-file`: a run's metrics as a Prometheus textfile for node_exporter's textfile
collector, rewritten every few seconds while the run goes on and once more at its end.

Each write is atomic (`<path>.tmp.<pid>`, then rename over the path), so the collector never
reads half a file; the file is mode 0644 whatever the umask, so node_exporter running as
another user can read it. Runs that share the path merge their figures under a file lock
(metrics/shared.py): two runs on one controller never lose each other's. A path that cannot
be written is a warning on stderr, never a failed run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from fleetfix.errors import FleetfixError
from fleetfix.events import Event
from fleetfix.metrics.exposition import render
from fleetfix.metrics.run import RunMetrics
from fleetfix.metrics.shared import RunShare, write_shared

WRITE_EVERY = 5.0
"""Seconds between rewrites of the file during a run."""
FILE_MODE = 0o644

OutOfService = Callable[[], Mapping[str, float]]
"""host -> since (Unix time) for every host fleetfix has out of service (the journal's)."""


def warn_on_stderr(message: str) -> None:
    print(f"WARNING: {message}", file=sys.stderr)


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `<path>.tmp.<pid>` (mode 0644), then rename it over `path`.

    Raises:
        OSError: the directory is missing or not writable, the disk is full, ...
    """
    temporary = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            os.fchmod(stream.fileno(), FILE_MODE)  # the umask must not hide it from the collector
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


class MetricsTextfile:
    """A run observer (cli.team_options.RunObserver) keeping `path` up to date."""

    def __init__(
        self,
        path: Path,
        metrics: RunMetrics,
        *,
        out_of_service: OutOfService | None = None,
        every: float = WRITE_EVERY,
        warn: Callable[[str], None] = warn_on_stderr,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.metrics = metrics
        self.writes = 0
        self._out_of_service = out_of_service
        self._every = every
        self._warn = warn
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None
        self._finished = False
        self._periodic = every > 0
        self._warned: set[str] = set()

    def __call__(self, event: Event) -> None:
        try:
            self.metrics(event)
        except Exception as exc:  # metrics must never cost the run
            self._warn_once(f"metrics: {type(exc).__name__}: {exc} (event {type(event).__name__})")
        if self._timer is None and self._periodic and not self._finished:
            self._schedule()

    def journal_lost(self, reason: str) -> None:
        """The run stopped because it lost its journal: its outcome is 6 (SAFETY_ABORT)."""
        try:
            self.metrics.journal_lost(self._clock())
        except Exception as exc:  # metrics must never cost the run
            self._warn_once(f"metrics: {type(exc).__name__}: {exc} (journal lost: {reason})")

    async def finish(self) -> None:
        """The last write, with the run's outcome; never raises."""
        self._finished = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.write()

    def text(self) -> str:
        """The exposition text as of now."""
        return render(self.metrics.families(self._clock(), self._fleet()))

    def share(self) -> RunShare:
        """This run's figures as of now, as the shared file keeps them."""
        now = self._clock()
        metrics = self.metrics
        return RunShare(
            run_id=metrics.run_id or f"pid-{os.getpid()}",
            playbook=metrics.playbook,
            pid=os.getpid(),
            started=metrics.started if metrics.started is not None else now,
            updated=now,
            finished=self._finished,
            families=tuple(metrics.families(now, self._fleet())),
        )

    def write(self) -> bool:
        """Rewrite the file now (merged with the other runs that share it); False (and a
        warning) when it could not be written."""
        try:
            write_shared(self.path, self.share(), write_atomically, render)
        except OSError as exc:
            self._warn_once(f"cannot write the metrics file {self.path}: {exc.strerror or exc}")
            return False
        except Exception as exc:  # never lose a run to its metrics
            self._warn_once(f"metrics file {self.path} not written: {type(exc).__name__}: {exc}")
            return False
        self.writes += 1
        return True

    def _fleet(self) -> Mapping[str, float] | None:
        if self._out_of_service is None:
            return None
        try:
            return self._out_of_service()
        except FleetfixError as exc:
            self._warn_once(f"metrics: hosts out of service not read: {exc}")
            return None

    def _schedule(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # fed outside a loop (a replay): only finish() writes
            self._periodic = False
            return
        self._timer = loop.call_later(self._every, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self._finished:
            return
        self.write()
        self._schedule()

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self._warn(message)
