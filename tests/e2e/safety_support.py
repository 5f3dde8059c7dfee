"""Helpers for the safety e2e tests: start `fleetfix run` and stop it at a journaled point,
read the journal (read-only, while a run may still write it) and hold it against the lab's audit
of disruptive tool calls."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetfix.journal.failpoint import STOP_AT_ENV
from tests.e2e.labrun import run_env

POLL = 0.01
"""Seconds between two looks at a controller that should stop itself at its kill point."""
REBOOT_TOOLS = frozenset({"reboot", "shutdown"})
SYSTEMCTL_REBOOTS = frozenset({"reboot", "poweroff", "halt", "kexec"})
UNDELIVERED = "undelivered"
LOOK = os.WSTOPPED | os.WEXITED | os.WNOHANG | os.WNOWAIT
"""waitid flags: has the child stopped or exited? Without reaping it (Popen.wait does)."""
HARMFUL_TOOLS = frozenset({"reboot", "shutdown", "rmmod", "insmod", "modprobe", "scancel", "kill"})


@dataclass(frozen=True, slots=True)
class StopAt:
    """The journaled event a controller stops itself at (fleetfix.journal.failpoint): the
    `nth` of type `kind` whose body contains `contains`."""

    kind: str
    nth: int = 1
    contains: str | None = None


@dataclass
class Started:
    """A `fleetfix run` started in the background, its output going to files."""

    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def output(self) -> str:
        """Both streams so far, for assertion messages."""
        out = self.stdout.read_text(errors="replace")
        err = self.stderr.read_text(errors="replace")
        return f"--- stdout\n{out[-6000:]}\n--- stderr\n{err[-3000:]}"

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)


def stopping_env(stop_at: StopAt | None) -> dict[str, str]:
    """run_env(), with the failpoint that stops the controller at `stop_at`."""
    env = run_env()
    if stop_at is not None:
        env[STOP_AT_ENV] = json.dumps(
            {"type": stop_at.kind, "nth": stop_at.nth, "contains": stop_at.contains}
        )
    return env


@contextmanager
def started_run(
    argv: Sequence[str], workdir: Path, name: str, stop_at: StopAt | None = None
) -> Iterator[Started]:
    """Start `argv` in `workdir`, stopping itself at `stop_at` (wait_stopped); on leaving the
    block a process still running is killed and reaped, so no controller outlives its test."""
    out, err = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    env = stopping_env(stop_at)
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(list(argv), stdout=stdout, stderr=stderr, env=env, cwd=workdir)
    started = Started(process, out, err)
    try:
        yield started
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def query(journal: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows from the journal through a read-only connection (a run may be writing it)."""
    uri = f"file:{journal}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=10.0)) as db:
        return db.execute(sql, tuple(params)).fetchall()


def count_events(journal: Path, kind: str, body_contains: str | None = None) -> int:
    if not journal.exists():
        return 0
    if body_contains is None:
        rows = query(journal, "SELECT count(*) FROM events WHERE type=?", (kind,))
    else:
        rows = query(
            journal,
            "SELECT count(*) FROM events WHERE type=? AND instr(body, ?) > 0",
            (kind, body_contains),
        )
    return int(rows[0][0])


def stop_state(process: subprocess.Popen[bytes]) -> str | None:
    """ "stopped" once the controller stopped itself (SIGSTOP: it stays stopped), "exited"
    once it ended, else None; without reaping it (Popen.wait does)."""
    state = os.waitid(os.P_PID, process.pid, LOOK)
    if state is None:
        return None
    return "stopped" if state.si_code == os.CLD_STOPPED else "exited"


def wait_stopped(run: Started, timeout: float = 180.0) -> None:
    """Return once the controller has stopped itself at its StopAt event; fail when it exits
    first or the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = stop_state(run.process)
        if state == "stopped":
            return
        if state == "exited":
            raise AssertionError(f"the run exited before its stop point\n{run.output()}")
        time.sleep(POLL)  # waitid has no timeout; a stop is a state that stays: poll it
    raise AssertionError(f"the run did not reach its stop point within {timeout}s\n{run.output()}")


def interrupt(run: Started, signum: int, timeout: float = 90.0) -> int:
    """Send `signum` to the controller (stopped or not) and return its exit code."""
    run.process.send_signal(signum)
    if signum != signal.SIGKILL:
        run.process.send_signal(signal.SIGCONT)  # a stopped controller takes it on waking
    try:
        return run.wait(timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"fleetfix did not exit within {timeout}s of {signal.Signals(signum).name}\n"
            + run.output()
        ) from exc


def only_run_id(journal: Path) -> str:
    rows = query(journal, "SELECT run_id FROM runs")
    assert len(rows) == 1, f"expected one run in a fresh journal, found {rows}"
    return str(rows[0][0])


@dataclass(frozen=True, slots=True)
class ActionRow:
    """One row of the journal's `actions` table."""

    id: int
    run_id: str
    host: str
    action: str
    state: str
    at: float
    step_key: str


def action_rows(journal: Path) -> list[ActionRow]:
    rows = query(
        journal, "SELECT id, run_id, host, action, state, at, step_key FROM actions ORDER BY id"
    )
    return [ActionRow(int(r[0]), r[1], r[2], r[3], r[4], float(r[5]), r[6]) for r in rows]


def delivered(rows: Sequence[ActionRow]) -> set[tuple[str, str]]:
    """(host, action) of every action row a resumed run did not prove undelivered."""
    return {(row.host, row.action) for row in rows if row.state != UNDELIVERED}


def is_reboot(entry: Mapping[str, Any]) -> bool:
    """An audit entry that takes the node down for a reboot."""
    words = [a for a in entry["argv"] if not a.startswith("-")]
    if entry["tool"] in REBOOT_TOOLS:
        return True
    return entry["tool"] == "systemctl" and bool(words) and words[0] in SYSTEMCTL_REBOOTS


def harmful(entry: Mapping[str, Any]) -> bool:
    """A call that kills a job or takes GPUs away: reboot, GPU reset, module (un)load,
    scancel, a kill of a GPU process."""
    argv = entry["argv"]
    reset = entry["tool"] == "nvidia-smi" and bool({"-r", "--gpu-reset"} & set(argv))
    return is_reboot(entry) or reset or entry["tool"] in HARMFUL_TOOLS


REBOOT_ACTIONS = frozenset({"reboot", "command (reboot)"})
"""fleetfix's reboot action, and a step's own reboot command (engine/disruptive.py)."""


def actions_for(entry: Mapping[str, Any]) -> frozenset[str] | None:
    """The fleetfix actions that may issue this disruptive call; None: any action may."""
    tool, argv = entry["tool"], list(entry["argv"])
    if is_reboot(entry):
        return REBOOT_ACTIONS
    if tool == "scontrol" and argv[:1] in (["create"], ["delete"]):
        return frozenset({"slurm_reserve" if argv[0] == "create" else "slurm_release"})
    if tool == "scontrol":
        states = {a.partition("=")[2].upper() for a in argv if a.lower().startswith("state=")}
        if states & {"RESUME", "UNDRAIN"}:
            return frozenset({"slurm_resume"})
        if states & {"DRAIN", "DOWN"}:
            return frozenset({"slurm_drain"})
        return frozenset({"slurm_drain", "slurm_resume"})  # a reason that says why
    if tool == "nvidia-smi" and {"-r", "--gpu-reset"} & set(argv):
        return frozenset({"gpu_reset", "command (GPU reset)"})
    if tool in ("rmmod", "insmod", "modprobe"):
        return frozenset({"reload_driver", "command (driver unload)"})
    return None


def unjournaled(
    audit: Mapping[str, Sequence[Mapping[str, Any]]], rows: Sequence[ActionRow]
) -> list[str]:
    """Every disruptive call in the lab's audit that no journal intent covers: an action row
    on that host, for an action that issues such a call, journaled no later than the call.
    Reboots are matched one to one (two reboots need two intents)."""
    problems: list[str] = []
    for host, entries in sorted(audit.items()):
        unused_reboots = sorted(
            (
                row
                for row in rows
                if row.host == host and row.action in REBOOT_ACTIONS and row.state != UNDELIVERED
            ),
            key=lambda row: row.at,
        )
        for entry in entries:
            wanted = actions_for(entry)
            candidates = [
                row
                for row in rows
                if row.host == host
                and row.at <= entry["at"]
                and (wanted is None or row.action in wanted)
            ]
            if is_reboot(entry):
                candidates = [row for row in unused_reboots if row.at <= entry["at"]]
                if candidates:
                    unused_reboots.remove(candidates[0])
            if not candidates:
                shown = " ".join([entry["tool"], *entry["argv"]])
                problems.append(f"{host}: {shown!r} at {entry['at']:.3f} has no journal intent")
    return problems


def is_reservation(entry: Mapping[str, Any]) -> bool:
    """`scontrol create reservation` / `scontrol delete ReservationName=`: a node held out of
    scheduling for a test, not taken out of service."""
    argv = list(entry["argv"])
    return entry["tool"] == "scontrol" and argv[:1] in (["create"], ["delete"])


def reboots(audit: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, int]:
    """host -> reboot calls the lab saw."""
    return {host: sum(1 for e in entries if is_reboot(e)) for host, entries in audit.items()}


def slurm_view(truth_nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per node: boots and the Slurm record (state, drain, reason, its author, job)."""
    return {
        name: {"boots": node["boots"], **{k: node["slurm"][k] for k in sorted(node["slurm"])}}
        for name, node in truth_nodes.items()
    }
