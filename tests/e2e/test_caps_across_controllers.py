"""A rack cap holds across controllers: two `fleetfix run` processes started together on
disjoint hosts of one rack, `max_unavailable_per: {rack: 1}` (xid79.yml), with one shared
PostgreSQL journal and with two SQLite journals (two engineers, two laptops). Judged by the
lab's audit: from every Slurm drain and resume it saw, no instant has two nodes of rack-01
out of service.

The lab (tests/e2e/scenarios/rack-cap.yml): one rack of four; rc01 has an Xid 79 a reboot
fixes, rc02 one no reboot fixes (it stays drained for a human).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import fleetfix_run, run_argv, write_inventory
from tests.e2e.safety_support import reboots, started_run
from tests.lab.support import running_lab
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.timeout(600)

SCENARIO = Path(__file__).parent / "scenarios" / "rack-cap.yml"
RACK = ["rc01", "rc02", "rc03", "rc04"]


def out_intervals(
    audit: Mapping[str, Sequence[Mapping[str, Any]]],
) -> list[tuple[float, float, str]]:
    """(start, end, node) for each time the lab saw a node drained until it was resumed; a
    node never resumed is out until the end of time."""
    spans: list[tuple[float, float, str]] = []
    for node, entries in audit.items():
        start: float | None = None
        for entry in sorted(entries, key=lambda e: float(e["at"])):
            argv = " ".join(entry.get("argv", ()))
            if "State=DRAIN" in argv and start is None:
                start = float(entry["at"])
            elif "State=RESUME" in argv and start is not None:
                spans.append((start, float(entry["at"]), node))
                start = None
        if start is not None:
            spans.append((start, math.inf, node))
    return spans


def most_out_at_once(spans: list[tuple[float, float, str]], members: Sequence[str]) -> int:
    edges = sorted(
        [(s, 1) for s, _, n in spans if n in members]
        + [(e, -1) for _, e, n in spans if n in members]
    )
    most = level = 0
    for _, step in edges:  # at a tie an end (-1) sorts first: a resume then a drain is one
        level += step
        most = max(most, level)
    return most


@pytest.mark.parametrize("journals", ["two-sqlite", "one-postgresql"])
def test_two_controllers_never_have_two_nodes_of_a_rack_out(
    journals: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if journals == "one-postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        dsn = server.fresh_database()
        targets: tuple[str | Path, str | Path] = (dsn, dsn)
    else:
        targets = (tmp_path / "a.sqlite", tmp_path / "b.sqlite")
    with running_lab(str(SCENARIO), tmp_path / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        argvs = []
        for target, host in zip(targets, ("rc01", "rc02"), strict=True):
            argv = run_argv("xid79.yml", inventory, Path("journal"), "--limit", host)
            argv[argv.index("journal")] = str(target)
            argvs.append(argv)
        with (
            started_run(argvs[0], tmp_path, "a") as one,
            started_run(argvs[1], tmp_path, "b") as two,
        ):
            codes = (one.wait(300), two.wait(300))
            said = one.output() + two.output()
        assert "Traceback" not in said, said
        audit = lab.audit()
    spans = out_intervals(audit)
    assert most_out_at_once(spans, RACK) == 1, (codes, spans, said)
    # One of them was taken out; the other either waited its turn (rc01 came back first)
    # or was held, naming why: the rack's slot, or the node the scheduler shows out.
    drained = {node for _, _, node in spans if node in RACK}
    assert drained, said
    if len(drained) == 1:
        assert 6 in codes, (codes, said)
        assert "max_unavailable_per reached in rack" in said, said
    assert all(n <= 1 for n in reboots(audit).values())


def test_a_node_a_human_drained_fills_its_racks_place(tmp_path: Path) -> None:
    """rc06 was drained by erin: rack-02 is at its cap of one, so rc05's Xid 79 is held, not
    drained or rebooted (exit 6, naming rc06); erin's drain is untouched."""
    with running_lab(str(SCENARIO), tmp_path / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, tmp_path / "lab.ini")
        run = fleetfix_run("xid79.yml", inventory, tmp_path, "--limit", "rc05")
        truth = lab.truth()["nodes"]
        audit = lab.audit()
    assert run.returncode == 6, run.output
    assert "max_unavailable_per reached in rack rack-02 (rc06 out)" in run.stdout, run.output
    assert audit["rc05"] == [] and audit["rc06"] == [], audit
    assert truth["rc06"]["slurm"]["reason"] == "swap PSU, ticket OPS-3301"
    assert not truth["rc05"]["slurm"]["drain"]
