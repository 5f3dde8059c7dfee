"""What `fleetfix run` asks the operator: confirm a run that may change more than a few hosts,
and, with --step, each step (Ansible's (N)o/(y)es/(c)ontinue).

No answer is a no: a closed stdin, end of input (Ctrl-D) or no terminal never lets a step run.
A --step question waits off the event loop, so Ctrl-C at it stops the run at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable

from fleetfix.engine.context import StepGate
from fleetfix.errors import UsageError
from fleetfix.modules.specs import MODULE_SPECS
from fleetfix.playbook.model import Playbook, Step, StepKind

CONFIRM_ABOVE = 3
"""Mutating runs on more hosts than this ask for confirmation unless --yes."""

READ_ONLY_KINDS = frozenset(
    {
        StepKind.PROBE,
        StepKind.DEBUG,
        StepKind.SET_FACT,
        StepKind.ASSERT,
        StepKind.FAIL,
        StepKind.META,
        StepKind.ADD_HOST,
        StepKind.GROUP_BY,
    }
)


def leaf_steps(steps: tuple[Step, ...]) -> list[Step]:
    """Every step but blocks, whose block, rescue and always steps are walked instead."""
    out: list[Step] = []
    for step in steps:
        if step.kind is StepKind.BLOCK:
            out.extend(leaf_steps(step.block + step.rescue + step.always))
        else:
            out.append(step)
    return out


def _reads_only(step: Step) -> bool:
    """A step that cannot change a node: a probe, debug, ..., or a read-only module (stat)."""
    if step.kind is StepKind.MODULE:
        spec = MODULE_SPECS.get(str(step.args.get("module")))
        return spec is not None and spec.read_only
    return step.kind in READ_ONLY_KINDS


def _mutating(playbook: Playbook) -> bool:
    for play in playbook.plays:
        for step in leaf_steps(play.pre_tasks + play.tasks + play.post_tasks + play.handlers):
            if not _reads_only(step) and step.check_mode is not True:
                return True
    return False


def confirm(args: argparse.Namespace, playbook: Playbook, selection: dict[int, list[str]]) -> None:
    """Ask before a run that may change more than CONFIRM_ABOVE hosts (unless --yes, --check,
    or only reads); raise UsageError when there is no terminal to ask or the answer is not yes."""
    hosts = {h for hs in selection.values() for h in hs}
    if args.check or args.yes or len(hosts) <= CONFIRM_ABOVE or not _mutating(playbook):
        return
    question = f"This run may change {len(hosts)} hosts. Continue? [y/N] "
    if sys.stdin is None or not sys.stdin.isatty():  # None: stdin closed (`<&-`)
        raise UsageError(
            f"refusing to change {len(hosts)} hosts without --yes (no terminal to ask)"
        )
    try:
        answer = input(question).strip().lower()
    except EOFError:  # Ctrl-D: no
        answer = ""
    if answer not in ("y", "yes"):
        raise UsageError("not confirmed; nothing was run")


def ask_each_step() -> StepGate:
    """--step: ask before each step, Ansible's (N)o/(y)es/(c)ontinue. At end of input (Ctrl-D,
    no terminal) no one can say yes: that step and every later one are not performed."""
    answers = {"continue": False, "ended": False}
    stdin = _Lines(0)  # the descriptor: sys.stdin is None when it was closed at start

    async def gate(name: str) -> bool:
        if answers["continue"]:
            return True
        if answers["ended"]:
            return False
        print(f"Perform task: {name} (N)o/(y)es/(c)ontinue: ", end="", flush=True)
        reply = await _off_the_loop(stdin.line)
        if reply is None:
            print("\nno answer (end of input): this step and the rest are not performed")
            answers["ended"] = True
            return False
        reply = reply.strip().lower()
        if reply in ("c", "continue"):
            answers["continue"] = True
        return reply in ("y", "yes", "c", "continue")

    return gate


class _Lines:
    """Lines of a file descriptor, read with os.read: a thread blocked here holds no lock of
    sys.stdin's, so the interpreter can exit while it waits."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending = b""

    def line(self) -> str | None:
        """The next line, without its newline; None at end of input."""
        while b"\n" not in self._pending:
            try:
                chunk = os.read(self._fd, 1024)
            except OSError:
                chunk = b""
            if not chunk:
                rest, self._pending = self._pending, b""
                return rest.decode(errors="replace") if rest else None
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode(errors="replace")


async def _off_the_loop(read: Callable[[], str | None]) -> str | None:
    """`read()` in a daemon thread: the event loop stays free, so Ctrl-C at a question stops
    the run at once (a read on the loop held the signal until the operator answered)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str | None] = loop.create_future()

    def settle(reply: str | None) -> None:
        if not answer.done():  # else the run was stopped while the question waited
            answer.set_result(reply)

    def work() -> None:
        reply = read()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, reply)

    threading.Thread(target=work, name="step-question", daemon=True).start()
    return await answer
