"""After a run (or a replay): the topology summary on the console and the report files.

A run imports this before its first command (its topology, its options); what draws and
writes (rich, the report writers) is imported when the run ends.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fleetfix.errors import UsageError
from fleetfix.topology import Topology

if TYPE_CHECKING:
    from rich.console import Console

    from fleetfix.report.model import Report


class VarsSource(Protocol):
    """Anything that gives a host's merged vars (an Inventory)."""

    def host_vars(self, host: str) -> dict[str, Any]: ...


def fleet_topology(
    inventory: VarsSource, selection: Mapping[int, Iterable[str]], topology_file: str | None
) -> Topology:
    """The topology of every host the run may touch, from inventory vars (and a file)."""
    hosts = dict.fromkeys(h for hs in selection.values() for h in hs)
    host_vars = {h: inventory.host_vars(h) for h in hosts}
    return Topology.from_hosts(host_vars, Path(topology_file) if topology_file else None)


def add_report_steps_option(parser: argparse.ArgumentParser) -> None:
    """`--report-steps`, for `fleetfix run` and `fleetfix report`."""
    parser.add_argument(
        "--report-steps",
        action="store_true",
        help="JSON and JUnit reports carry every step's record with its commands and output"
        " excerpts (default: compact, each host's verdict and output digests)",
    )


def publish(
    report: Report,
    paths: Iterable[str],
    console: Console | None = None,
    *,
    steps: bool = False,
) -> list[str]:
    """Print the topology summary and write every requested report file (`steps`: with
    every step's detail); returns why each file that could not be written was not (the
    others are written all the same)."""
    # Drawing and writing: the end of a run, not its start (see the module docstring)
    from rich.console import Console  # noqa: PLC0415

    from fleetfix.report.render import write_report  # noqa: PLC0415
    from fleetfix.report.terminal import TerminalReport  # noqa: PLC0415

    out = console or Console(highlight=False)
    out.print(TerminalReport(report))
    failed = []
    for path in paths:
        try:
            write_report(report, Path(path), steps=steps)
        except UsageError as exc:
            failed.append(str(exc))
        else:
            out.print(f"report: {path}")
    return failed
