"""After a run (or a replay): the topology summary on the console and the report files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from fleetfix.errors import UsageError
from fleetfix.report.model import Report
from fleetfix.report.render import write_report
from fleetfix.report.terminal import TerminalReport
from fleetfix.topology import Topology


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


def publish(report: Report, paths: Iterable[str], console: Console | None = None) -> list[str]:
    """Print the topology summary and write every requested report file; returns why each
    file that could not be written was not (the others are written all the same)."""
    out = console or Console(highlight=False)
    out.print(TerminalReport(report))
    failed = []
    for path in paths:
        try:
            write_report(report, Path(path))
        except UsageError as exc:
            failed.append(str(exc))
        else:
            out.print(f"report: {path}")
    return failed
