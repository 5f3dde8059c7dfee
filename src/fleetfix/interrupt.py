"""Ctrl-C where no code is there to catch it: exit 99 (interrupted), never a traceback.

The command line catches KeyboardInterrupt while it parses, loads and runs (cli.run_cli);
outside that guard (importing the modules it needs, printing the last message, exiting) a
Ctrl-C goes to `exit_interrupted` instead. Nothing is half-done there: no run was started or
its journal already holds it. Only this module and `os`/`signal` are imported before it is in
place, so `python -m fleetfix` is covered from its first line.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

INTERRUPTED = 99
"""results.Outcome.INTERRUPTED (not imported: this runs before anything else is)."""
MESSAGE = b"ERROR: interrupted\n"

Handler = Callable[[int, FrameType | None], Any] | int | None


def exit_interrupted(_signum: int, _frame: FrameType | None) -> None:
    """A SIGINT handler: say so on stderr and exit 99 at once (no clean-up left to do)."""
    with suppress(OSError):
        os.write(2, MESSAGE)
    os._exit(INTERRUPTED)


def exit_on_ctrl_c() -> None:
    """From now on a Ctrl-C ends the process with 99 (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, exit_interrupted)


def forget_caught_ctrl_c() -> None:
    """Clear CPython's record of a Ctrl-C that a run caught, before the process exits.

    Under `python -m fleetfix`, a KeyboardInterrupt that passed through code made by exec() of
    a string (dataclasses and namedtuple build their methods that way while a module loads)
    leaves the interpreter's "unhandled KeyboardInterrupt" flag set even though run_cli caught
    it, and CPython 3.11 then ends the process by SIGINT (-2) instead of exit 99. Every exec()
    of a string clears that flag as it starts (pythonrun.c, run_eval_code_obj)."""
    exec("pass")


@contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """In the block a Ctrl-C raises KeyboardInterrupt (Python's default, which asyncio.run
    turns into cancelling the run); after it, the handler from before is back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before: Handler = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)
