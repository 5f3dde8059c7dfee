"""Console output that may lose its reader: `fleetfix run ... | head`, a pager quit, a log
shipper that died, an SSH session that dropped (the terminal hung up), a full disk.

The console is a view of the run; the journal is its record. A write that fails stops the
view, never the run: before, `| head` ended a remediation mid-way, journaled unfinished, with
exit 0 (a BrokenPipeError took the run down and was read as a quiet success). Once a write
fails, the stream's descriptor points at /dev/null, so the interpreter's last flush at exit has
nothing to complain about, and later output is dropped.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class TolerantStream:
    """A text stream whose writes never raise OSError: the first failure drops the rest."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self.lost: OSError | None = None

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._inner.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._inner.flush()
            except OSError as exc:
                self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        self.lost = exc
        with contextlib.suppress(OSError, ValueError):  # no descriptor (a test's capture)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._inner.fileno())
            finally:
                os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextlib.contextmanager
def tolerant_output() -> Iterator[None]:
    """stdout and stderr as TolerantStreams for the block; the originals again after it."""
    saved = sys.stdout, sys.stderr
    with contextlib.ExitStack() as stack:
        sys.stdout = TolerantStream(_or_devnull(saved[0], stack))
        sys.stderr = TolerantStream(_or_devnull(saved[1], stack))
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved


def _or_devnull(stream: TextIO | None, stack: contextlib.ExitStack) -> TextIO:
    """The stream, or /dev/null where Python found the descriptor closed at start (None: a
    cron job's `>&-`)."""
    if stream is not None:
        return stream
    return stack.enter_context(open(os.devnull, "w", encoding="utf-8"))
