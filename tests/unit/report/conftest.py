"""Report fixtures: the fabricated 32-node fleet run, its topology and its report."""

from __future__ import annotations

import pytest

from fleetfix.report.collect import ReportCollector
from fleetfix.report.model import Report
from fleetfix.topology.graph import Topology
from tests.unit.report.fleetrun import fleet_events, host_vars


@pytest.fixture
def topology() -> Topology:
    return Topology.from_hosts(host_vars())


def collect(topology: Topology, **options: object) -> Report:
    collector = ReportCollector(run_id="20240501-030000-abc123")
    for event in fleet_events(**options):
        collector(event)
    return collector.model(topology)


@pytest.fixture
def report(topology: Topology) -> Report:
    return collect(topology)


@pytest.fixture
def check_report(topology: Topology) -> Report:
    return collect(topology, check=True)
