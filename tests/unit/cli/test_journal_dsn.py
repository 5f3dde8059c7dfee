"""A team journal's DSN password is kept out of what fleetfix stores: `fleetfix run` on the
local transport against a real PostgreSQL, the DSN given as `--journal DSN`, `--journal=DSN`
and `$FLEETFIX_JOURNAL` (the README's form), then the journal read back whole, exported and
migrated into SQLite; the password is in none of it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from fleetfix.journal.db import shown
from tests.support.parity import VENV_BIN
from tests.support.postgres import PostgresServer
from tests.support.secrets_support import holding, journal_texts, postgres_journal_texts

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: say something
      debug:
        msg: hello
"""


def _fleetfix(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "fleetfix"), *argv],
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _run(tmp_path: Path, *journal: str, env: dict[str, str] | None = None) -> str:
    """`fleetfix run` of a debug step on gpu001 (local transport); its stdout."""
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.ini").write_text("gpu001 ansible_connection=local\n")
    done = _fleetfix(
        tmp_path,
        "run",
        "-i",
        "hosts.ini",
        "--transport",
        "local",
        "--yes",
        *journal,
        "site.yml",
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.parametrize("form", ["--journal DSN", "--journal=DSN", "FLEETFIX_JOURNAL=DSN"])
def test_a_dsn_password_is_in_no_journal_row_export_or_migrated_copy(
    tmp_path: Path, postgres_server: PostgresServer, form: str
) -> None:
    dsn = postgres_server.fresh_database()
    password = urlsplit(dsn).password
    assert password and len(password) >= 16
    if form == "--journal DSN":
        output = _run(tmp_path, "--journal", dsn)
    elif form == "--journal=DSN":
        output = _run(tmp_path, f"--journal={dsn}")
    else:
        output = _run(tmp_path, env={"FLEETFIX_JOURNAL": dsn})
    with psycopg.connect(dsn) as db:
        [(argv,)] = db.execute("SELECT argv FROM runs").fetchall()
    if form != "FLEETFIX_JOURNAL=DSN":  # the DSN stays in the command line, as messages show it
        assert shown(dsn) in argv and shown(dsn).startswith("postgresql://fleetfix@"), argv
    stored = postgres_journal_texts(dsn, postgres_server.directory / "data", postgres_server.admin)
    exported = _fleetfix(tmp_path, "journal", "export", "--journal", dsn)
    assert exported.returncode == 0 and '"table":"runs"' in exported.stdout, exported.stderr
    copy = tmp_path / "copy.sqlite"
    migrated = _fleetfix(tmp_path, "journal", "migrate", "--journal", dsn, "--to", str(copy))
    assert migrated.returncode == 0 and "migrated 1 runs" in migrated.stdout, migrated.stderr
    texts = [output, exported.stdout, exported.stderr, migrated.stdout, *journal_texts(copy)]
    assert holding([*stored, *texts], [password]) == []
