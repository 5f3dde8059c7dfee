"""A SQLite journal is never left open to every user: a new one is created 0600, and an
existing one (and its -wal and -shm) that grants "other" anything loses those rights when
fleetfix opens it, with one warning; owner and group keep theirs (a journal a group shares
keeps working)."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.journal import Journal


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _siblings(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


@pytest.fixture
def open_to_all(tmp_path: Path) -> Iterator[Path]:
    """A journal an older fleetfix made 0644, its -wal and -shm 0644 too, held open by another
    connection (as a running controller would) so the siblings stay."""
    path = tmp_path / "j.sqlite"
    Journal(path).close()
    path.chmod(0o644)
    other = sqlite3.connect(path)
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("INSERT INTO meta VALUES ('written by', 'another controller')")
    other.commit()
    for sibling in _siblings(path)[1:]:
        sibling.chmod(0o644)
    try:
        yield path
    finally:
        other.close()


def test_an_existing_journal_open_to_all_is_narrowed_once_with_a_warning(
    open_to_all: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert [_mode(file) for file in _siblings(open_to_all)] == [0o644, 0o644, 0o644]
    Journal(open_to_all).close()
    assert [_mode(file) for file in _siblings(open_to_all)] == [0o640, 0o640, 0o640]
    err = capsys.readouterr().err
    assert err.count("WARNING") == 1, err
    assert f"the journal {open_to_all} was open to every user" in err
    assert "j.sqlite 0644 -> 0640, j.sqlite-wal 0644 -> 0640, j.sqlite-shm 0644 -> 0640" in err
    Journal(open_to_all).close()
    assert capsys.readouterr().err == ""  # said once: the next open finds nothing to do


def test_a_journal_a_group_shares_keeps_its_group_rights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.sqlite"
    Journal(path).close()
    assert _mode(path) == 0o600  # created so
    path.chmod(0o660)
    Journal(path).close()
    assert _mode(path) == 0o660
    path.chmod(0o666)
    Journal(path).close()
    assert _mode(path) == 0o660
    assert capsys.readouterr().err.count("WARNING") == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_journal_another_user_owns_is_left_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.sqlite"
    Journal(path).close()
    os.chown(path, 65534, 65534)
    path.chmod(0o666)
    Journal(path).close()
    assert _mode(path) == 0o666
    assert capsys.readouterr().err == ""
