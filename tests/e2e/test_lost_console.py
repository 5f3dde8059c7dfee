"""A run whose console or report goes away: the output ends, the run does not lie about it.

`fleetfix run ... | head` (or a pager quit, a log shipper that died) once ended a remediation
at its next line, journaled unfinished, with exit 0. Now the run finishes its work and exits
as a clean run does. A dropped SSH session hangs the terminal up: SIGHUP stops the run as
Ctrl-C does (interrupted, exit 99, journaled, resumable) and `--resume` ends it as a clean run.
A report file that cannot be written at the end is said, the others are written, and the exit
code stays the run's (1 when the run itself was clean: the file is missing).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import fleetfix_run, nodes, run_argv, run_env, write_inventory
from tests.e2e.safety_support import (
    StopAt,
    only_run_id,
    query,
    started_run,
    stop_state,
    stopping_env,
    wait_stopped,
)
from tests.lab.support import running_lab

pytestmark = [pytest.mark.slow]

EXTRA = ("-e", "drain_wait=3s")  # gpu005's job outlives the drain: deferred after 3 s
INTERRUPTED = 99
HOST_FAILED = 2
READ_TIMEOUT = 0.05
"""Seconds one look at the terminal waits for output before checking the controller."""


def _documented(view: dict[str, dict[str, Any]]) -> None:
    """The xid79 run tests/e2e/test_playbooks_lab.py shows: gpu003 and gpu011 fixed by one
    reboot each, gpu007 rebooted once and drained needing a cold power cycle (none allowed
    here), bob's gpu014 and the busy gpu005 never rebooted."""
    assert {n for n, v in view.items() if v["boots"] == 2} == {"gpu003", "gpu007", "gpu011"}
    assert {n for n, v in view.items() if v["boots"] > 2} == set()
    assert not view["gpu003"]["slurm"]["drain"] and not view["gpu011"]["slurm"]["drain"]
    assert "needs a human: cold power cycle" in str(view["gpu007"]["slurm"]["reason"])
    assert view["gpu014"]["slurm"]["reason"] == "reseat GPU 4, ticket OPS-1187"
    assert view["gpu005"]["slurm"]["job_id"] is not None


def _outcome(journal: Path) -> Any:
    return query(journal, "SELECT outcome FROM runs")[0][0]


def test_a_closed_pipe_ends_the_output_not_the_run(tmp_path: Path) -> None:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        journal = tmp_path / "j.sqlite"
        argv = run_argv("xid79.yml", inventory, journal, *EXTRA)
        with (tmp_path / "stderr").open("wb") as stderr:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, env=run_env())
        try:
            assert process.stdout is not None
            for line in process.stdout:  # `| head`: read to the first banner, then go away
                if line.startswith(b"TASK ["):
                    break
            process.stdout.close()
            returncode = process.wait(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        view = nodes(lab.truth())
    errors = (tmp_path / "stderr").read_text()
    assert returncode == HOST_FAILED, errors
    assert _outcome(journal) == HOST_FAILED, "the run must finish and journal its outcome"
    assert "Traceback" not in errors and "Exception ignored" not in errors, errors
    _documented(view)


TAKE_TERMINAL = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0);"
    " os.execv(sys.argv[1], sys.argv[1:])"
)
"""Run in the new session before exec'ing fleetfix (same process): the pty on stdin becomes its
controlling terminal, as a login shell's is, so a hangup sends the controller SIGHUP."""


def _read_until_stopped(terminal: int, process: subprocess.Popen[bytes]) -> bytes:
    """Read the terminal (a full pty would block the run) until the controller stops itself
    at its failpoint."""
    seen = bytearray()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([terminal], [], [], READ_TIMEOUT)
        if ready:
            seen += os.read(terminal, 65536)
        state = stop_state(process)
        if state == "stopped":
            return bytes(seen)
        assert state is None, f"the run ended before its stop point\n{seen.decode()[-3000:]}"
    raise AssertionError(f"no stop within 300 s\n{seen.decode()[-3000:]}")


def test_a_terminal_hangup_stops_the_run_cleanly_and_resume_finishes_it(tmp_path: Path) -> None:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        journal = tmp_path / "j.sqlite"
        # -v: on a terminal the task stream (which this test reads) comes with -v only
        argv = run_argv("xid79.yml", inventory, journal, *EXTRA, "-v")
        # the session drops just after the first reboot's intent is journaled
        env = stopping_env(StopAt("ActionStarted", 1, '"action": "reboot"'))
        terminal, pty = os.openpty()
        process = subprocess.Popen(
            [sys.executable, "-c", TAKE_TERMINAL, *argv],
            stdin=pty,
            stdout=pty,
            stderr=pty,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
        os.close(pty)
        try:
            shown = _read_until_stopped(terminal, process)
            os.close(terminal)  # the hangup: SIGHUP to the session leader, the controller
            process.send_signal(signal.SIGCONT)
            returncode = process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        journaled = _outcome(journal)
        resumed = fleetfix_run(
            "xid79.yml", inventory, tmp_path, "--resume", only_run_id(journal), *EXTRA
        )
        view = nodes(lab.truth())
    assert b"TASK [" in shown, shown.decode()[-3000:]
    assert returncode == INTERRUPTED, shown.decode()[-3000:]
    assert journaled == INTERRUPTED, "the hangup must stop the run the way Ctrl-C does"
    assert resumed.returncode == HOST_FAILED, resumed.output[-3000:]
    _documented(view)


REPORT_BOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: say
      debug: {msg: hello}
"""


def test_a_report_that_cannot_be_written_at_the_end_keeps_the_run(tmp_path: Path) -> None:
    """The report's directory exists when the run starts (checked then) and is gone when the
    run ends: the other report is written, the journal says the run was clean, exit 1."""
    (tmp_path / "site.yml").write_text(REPORT_BOOK)
    (tmp_path / "hosts.ini").write_text("localhost ansible_connection=local\n")
    (tmp_path / "gone").mkdir()
    (tmp_path / "kept").mkdir()
    journal = tmp_path / "j.sqlite"
    argv = run_argv(tmp_path / "site.yml", tmp_path / "hosts.ini", journal, "--transport", "local")
    argv += ["--report", "gone/run.json", "--report", "kept/run.html"]
    with started_run(argv, tmp_path, "first", StopAt("RunFinished")) as run:
        wait_stopped(run)
        (tmp_path / "gone").rmdir()
        run.process.send_signal(signal.SIGCONT)
        returncode = run.wait(120)
        output = run.output()
    assert returncode == 1, output
    assert "ERROR: --report gone/run.json: cannot write" in output
    assert (tmp_path / "kept" / "run.html").read_text().startswith("<!DOCTYPE html>")
    assert _outcome(journal) == 0, "the run was clean and is journaled so"
