"""`fleetfix history`: recent runs from the journal."""

from __future__ import annotations

import argparse
import time
from typing import Any

from fleetfix.cli.options import add_journal_option
from fleetfix.journal import Journal, journal_target
from fleetfix.results import Outcome


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("history", help="recent runs recorded in the journal")
    add_journal_option(parser)
    parser.add_argument("-n", "--limit", type=int, default=20, help="how many runs (20)")
    parser.set_defaults(handler=history_command)


def history_command(args: argparse.Namespace) -> int:
    journal = Journal(journal_target(args.journal))
    try:
        runs = journal.history(args.limit)
    finally:
        journal.close()
    print(f"{'RUN ID':<24} {'STARTED':<19} {'EXIT':>4} {'HOSTS':>5} {'MODE':<5} PLAYBOOK")
    for run in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.started))
        if run.outcome is not None:
            exit_code = str(run.outcome)
        else:
            exit_code = "?" if run.finished is None else "-"
        mode = "check" if run.check_mode else "run"
        print(
            f"{run.run_id:<24} {started:<19} {exit_code:>4} {run.hosts:>5} {mode:<5} {run.playbook}"
        )
    if not runs:
        print("(no runs recorded)")
    return Outcome.OK
