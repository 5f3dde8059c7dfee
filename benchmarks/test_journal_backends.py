"""Tests of benchmarks/journal_backends.py: a row per backend, each figure measured; no timing
asserts."""

from __future__ import annotations

from pathlib import Path

from journal_backends import HEADERS, journal_costs, table


def test_each_backend_gets_a_row_of_figures() -> None:
    costs = journal_costs(hosts=3, steps=1)
    installed = any(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    assert [c.backend for c in costs] == ["sqlite", "postgresql"] if installed else ["sqlite"]
    for cost in costs:
        assert cost.hosts == 3
        assert cost.cpu_ms_per_host > 0 and cost.wall_ms_per_host > 0
        assert cost.lease_ms > 0 and cost.admit_ms > 0
    lines = table(costs).splitlines()
    assert lines[0].split()[:2] == list(HEADERS[:2])
    assert len(lines) == len(costs) + 1
