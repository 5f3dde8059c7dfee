"""`fleetfix report RUN_ID`: replay a journaled run into its reports."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fleetfix.cli.options import add_inventory_option, add_journal_option
from fleetfix.errors import UsageError
from fleetfix.inventory import load_inventory
from fleetfix.journal import Journal, journal_target
from fleetfix.report.collect import ReportCollector
from fleetfix.report.publish import fleet_topology, publish
from fleetfix.report.render import check_report_path
from fleetfix.results import Outcome
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
    add_inventory_option(parser, required=False)
    parser.add_argument("--topology-file", metavar="PATH", help="switches and links")
    parser.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace) -> int:
    for path in args.report:
        check_report_path(Path(path))
    journal = Journal(journal_target(args.journal))
    try:
        journal.run(args.run_id)  # a clear error for an unknown id
        collector = ReportCollector(run_id=args.run_id)
        for event in journal.events(args.run_id):
            collector(event)
    finally:
        journal.close()
    topology = None
    if args.inventory:
        inventory = load_inventory(args.inventory)
        topology = fleet_topology(inventory, {0: inventory.host_names()}, args.topology_file)
    failed = publish(collector.model(topology or Topology.from_hosts({})), args.report)
    if failed:
        raise UsageError("; ".join(failed))
    return Outcome.OK
