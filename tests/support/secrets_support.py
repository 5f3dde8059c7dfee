"""Reading everything a run stored, to prove a secret is in none of it.

`journal_texts(path)` reads a SQLite journal, `postgres_journal_texts(dsn, data_dir)` a
PostgreSQL one: every value of every table, compressed values decompressed, and the raw bytes
where the database keeps them."""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterable
from pathlib import Path

ZLIB_HEADER = 0x78
"""The first byte of a zlib stream (journal/rows.py `_stored` compresses long step data)."""


def journal_texts(path: Path) -> list[str]:
    """Everything a SQLite journal holds, as text: the raw bytes of the database file and of
    its WAL (and shared-memory) siblings, then every value of every table, each compressed
    BLOB decompressed. A secret absent from all of them is absent from the journal."""
    texts = [_raw(file) for file in _files(path)]
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            for row in db.execute(f'SELECT * FROM "{table}"'):
                texts.extend(_value_texts(row))
    finally:
        db.close()
    return texts


def _files(path: Path) -> list[Path]:
    siblings = (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
    return [file for file in siblings if file.exists()]


def _raw(file: Path) -> str:
    return file.read_bytes().decode("latin-1")


def _value_texts(row: Iterable[object]) -> list[str]:
    found = []
    for value in row:
        if isinstance(value, bytes):
            found.append(value.decode("latin-1"))
            if value[:1] == bytes([ZLIB_HEADER]):
                found.append(zlib.decompress(value).decode("utf-8"))
        elif value is not None:
            found.append(str(value))
    return found


def holding(texts: Iterable[str], secrets: Iterable[str]) -> list[tuple[str, str]]:
    """(secret, an excerpt around it) for each text that holds a secret; empty when none."""
    found = []
    for text in texts:
        for secret in secrets:
            at = text.find(secret)
            if at >= 0:
                found.append((secret, text[max(at - 80, 0) : at + len(secret) + 80]))
    return found


def postgres_journal_texts(dsn: str, data_dir: Path, admin: str) -> list[str]:
    """Everything a PostgreSQL journal holds, as text: every value of every table of its
    database (compressed step data decompressed), then, after a checkpoint, the raw bytes of
    the database's files and of the cluster's write-ahead log (`data_dir`: the cluster's;
    `admin`: a superuser's connection string, for the checkpoint)."""
    import psycopg  # noqa: PLC0415

    texts: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as db:
        tables = db.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
        for (table,) in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                texts.extend(_value_texts(row))
        oid = db.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        database = oid.fetchone()
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute("CHECKPOINT")
    assert database is not None
    for folder in (data_dir / "base" / str(database[0]), data_dir / "pg_wal"):
        texts.extend(_raw(file) for file in sorted(folder.iterdir()) if file.is_file())
    return texts
