"""`fleetfix journal export|migrate`: read a journal's whole history out, or move it into
another journal (a machine's SQLite history into the team's PostgreSQL)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fleetfix.cli.options import add_journal_option
from fleetfix.journal import Journal, journal_target
from fleetfix.journal.db import is_postgres


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("journal", help="export a journal, or migrate it into another")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    export = verbs.add_parser(
        "export", help="every row as JSON lines (a step's data decompressed), on stdout"
    )
    add_journal_option(export)
    export.add_argument("--run", metavar="RUN_ID", help="only this run's rows")
    export.set_defaults(handler=export_command)
    migrate = verbs.add_parser(
        "migrate",
        help="copy this journal's runs, actions and fleet memory into another (e.g. SQLite"
        " into the team's PostgreSQL); runs already there are skipped",
    )
    add_journal_option(migrate)
    migrate.add_argument("--to", required=True, metavar="PATH|DSN", help="the journal to copy into")
    migrate.set_defaults(handler=migrate_command)


def export_command(args: argparse.Namespace) -> int:
    journal = Journal(journal_target(args.journal))
    try:
        for line in journal.export(args.run):
            sys.stdout.write(line + "\n")
    finally:
        journal.close()
    return 0


def migrate_command(args: argparse.Namespace) -> int:
    source = Journal(journal_target(args.journal))
    try:
        target = Journal(args.to if is_postgres(args.to) else journal_target(args.to))
        try:
            moved = source.migrate_to(target)
        finally:
            target.close()
    finally:
        source.close()
    copied = ", ".join(f"{count} {table}" for table, count in sorted(moved.rows.items()))
    print(
        f"migrated {moved.runs} runs from {source.where} to {target.where}: {copied or 'no rows'}"
    )
    if moved.skipped_runs:
        print(f"skipped {len(moved.skipped_runs)} runs already there")
    return 0
