"""TolerantStream on a real pipe whose reader went away (EPIPE); a run whose output is closed."""

from __future__ import annotations

import os
import shlex
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from fleetfix.cli.streams import TolerantStream


def test_a_reader_gone_drops_the_output_and_never_raises() -> None:
    read_end, write_end = os.pipe()
    inner = os.fdopen(write_end, "w", buffering=1)
    stream = TolerantStream(inner)
    stream.write("seen\n")
    assert os.read(read_end, 100) == b"seen\n"
    os.close(read_end)  # `| head` exits
    assert stream.write("lost\n") == len("lost\n")
    assert isinstance(stream.lost, BrokenPipeError)
    stream.write("dropped too\n")
    stream.flush()
    inner.close()  # the descriptor now points at /dev/null: a last flush cannot fail


def test_a_working_stream_is_passed_through(tmp_path: Path) -> None:
    path = tmp_path / "out"
    with path.open("w") as inner:
        stream = TolerantStream(inner)
        stream.write("a\n")
        stream.flush()
        assert stream.lost is None
        assert stream.isatty() is False  # everything else is the inner stream's
    assert path.read_text() == "a\n"


def test_a_run_with_its_output_closed_from_the_start_runs(tmp_path: Path) -> None:
    """A cron job's `>&- 2>&-`: Python starts with no sys.stdout at all; the run goes on."""
    (tmp_path / "site.yml").write_text("- hosts: localhost\n  tasks:\n    - debug: {msg: hi}\n")
    (tmp_path / "hosts.ini").write_text("localhost ansible_connection=local\n")
    journal = tmp_path / "j.sqlite"
    fleetfix = shlex.join([sys.executable, "-m", "fleetfix", "run", "-i", "hosts.ini"])
    options = f"--transport local --yes --journal {shlex.quote(str(journal))} site.yml"
    done = subprocess.run(
        ["sh", "-c", f"{fleetfix} {options} >&- 2>&-"], cwd=tmp_path, timeout=120, check=False
    )
    assert done.returncode == 0
    with closing(sqlite3.connect(journal)) as db:
        assert db.execute("SELECT outcome FROM runs").fetchall() == [(0,)]
