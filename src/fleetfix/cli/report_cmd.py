"""`fleetfix report RUN_ID`: replay a journaled run into its reports.

The journal alone is enough: the run's topology is journaled with its start (each host's
domains), its verdicts with its end, and a resumed run's attempts (same run id) in order, so
the reports are the ones the live run wrote. `-i` (and `--topology-file`) draw the tree from
today's inventory instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fleetfix.cli.options import add_inventory_option, add_journal_option
from fleetfix.errors import UsageError
from fleetfix.inventory import load_inventory
from fleetfix.journal import Journal, journal_target
from fleetfix.report.collect import run_collector
from fleetfix.report.console import banner, recap_lines
from fleetfix.report.publish import add_report_steps_option, fleet_topology, publish
from fleetfix.report.render import check_report_path
from fleetfix.report.summary import left_lines
from fleetfix.results import Outcome, RunResult
from fleetfix.topology import Topology


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("report", help="re-render a past run's report from the journal")
    parser.add_argument("run_id", help="run id (fleetfix history lists them)")
    add_journal_option(parser)
    parser.add_argument(
        "--report",
        action="append",
        default=[],
        metavar="PATH",
        help="write a report (.json, .html, .xml=JUnit); repeatable",
    )
    add_report_steps_option(parser)
    add_inventory_option(parser, required=False)
    parser.add_argument("--topology-file", metavar="PATH", help="switches and links")
    parser.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace) -> int:
    for path in args.report:
        check_report_path(Path(path))
    journal = Journal(journal_target(args.journal))
    try:
        journal.run(args.run_id)  # a clear error for an unknown id
        collector = run_collector(args.run_id, journaled=journal.events(args.run_id))
    finally:
        journal.close()
    _recap(collector.run_result, args.run_id)
    failed = publish(collector.model(_topology(args)), args.report, steps=args.report_steps)
    if failed:
        raise UsageError("; ".join(failed))
    return Outcome.OK


def _topology(args: argparse.Namespace) -> Topology | None:
    """Today's inventory's topology with -i; None: the one the run journaled."""
    if not args.inventory:
        return None
    inventory = load_inventory(args.inventory)
    return fleet_topology(inventory, {0: inventory.host_names()}, args.topology_file)


def _recap(result: RunResult | None, run_id: str) -> None:
    """The PLAY RECAP and the hosts left, as the live run printed them after its steps."""
    if result is None:
        print(f"run {run_id} did not finish: no recap, no verdicts (fleetfix run ... --resume)")
        return
    print(banner("PLAY RECAP"))
    for line in recap_lines(result):
        print(line)
    left = left_lines(result.verdicts.values(), run_id)
    if left:
        print("\nLEFT UNHEALTHY OR UNTOUCHED (the run exits non-zero for these):")
        for text in left:
            print(text.plain)
