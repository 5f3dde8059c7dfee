"""`fleetfix probe`'s table: one line per host at 80 columns, worst first, a problem column;
within COLUMNS off a terminal; a tool the node lacks is "not installed", not a failure."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from fleetfix.cli.probe_cmd import (
    UNREACHABLE_PROBE,
    Cell,
    fit_widths,
    health_cells,
    health_table,
    host_problem,
    probe_outcome,
    table_width,
)
from fleetfix.knowledge.health import Level
from fleetfix.results import Outcome, RunResult, Status, StepResult
from tests.unit.cli.real_node import probe

NAMES = ("nvidia_smi", "xid", "gpu_processes", "shm", "services")
LONG = "8 GPUs, driver 550.54.15, CUDA 12.4, persistence on, 0 retired pages, 31-34 C"
CELLS = {
    **{("gpu001", n): Cell(LONG if n == "nvidia_smi" else "ok", Level.OK) for n in NAMES},
    **{("gpu002", n): Cell("ok", Level.OK) for n in NAMES},
    ("gpu002", "xid"): Cell("Xid 79 (GPU has fallen off the bus) on GPU 3 at 03:12", Level.BAD),
    ("gpu002", "shm"): Cell("12 stale segments, 3.1 GiB", Level.WARN),
    ("gpu003", UNREACHABLE_PROBE): Cell("unreachable: connection refused", Level.BAD),
    **{("gpu004", n): Cell("ok", Level.OK) for n in NAMES},
    ("gpu004", "shm"): Cell("12 stale segments, 3.1 GiB", Level.WARN),
}
HOSTS = ["gpu001", "gpu002", "gpu003", "gpu004"]
SHM = {"usage_percent": 0, "nccl_files": []}


def rendered(width: int, *, terminal: bool) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None)
    console.print(health_table(CELLS, HOSTS, NAMES, width if terminal else None))
    return out.getvalue().splitlines()


def host_lines(lines: list[str], host: str) -> list[str]:
    return [line for line in lines if host in line]


def test_fits_80_columns_one_line_per_host_long_cells_cut_with_an_ellipsis() -> None:
    lines = rendered(80, terminal=True)
    assert max(len(line) for line in lines) <= 80
    for host in HOSTS:
        assert len(host_lines(lines, host)) == 1, "\n".join(lines)
    (gpu001,) = host_lines(lines, "gpu001")
    assert "\u2026" in gpu001 and LONG not in gpu001


def test_full_width_when_not_a_terminal_shows_every_cell_whole() -> None:
    lines = rendered(1000, terminal=False)
    (gpu001,) = host_lines(lines, "gpu001")
    assert LONG in gpu001


def test_problem_column_names_each_hosts_problem_and_worst_come_first() -> None:
    lines = rendered(1000, terminal=False)
    assert "problem" in next(line for line in lines if "host" in line)
    order = [host for line in lines for host in HOSTS if host in line]
    assert order == ["gpu002", "gpu003", "gpu004", "gpu001"]
    (gpu002,) = host_lines(lines, "gpu002")
    assert "xid: Xid 79 (GPU has fallen off the bus) on GPU 3 at 03:12 (+1 more)" in gpu002
    assert host_problem(CELLS, "gpu003", NAMES).text == "unreachable: connection refused"
    assert host_problem(CELLS, "gpu004", NAMES) == Cell(
        "shm: 12 stale segments, 3.1 GiB", Level.WARN
    )
    assert host_problem(CELLS, "gpu001", NAMES) == Cell("-", Level.OK)


def test_a_tool_the_node_lacks_is_a_dim_ok_cell_and_no_reason_to_fail() -> None:
    absent = StepResult(
        host="gpu001",
        step="ib",
        status=Status.SKIPPED,
        message="ibstat is not installed on this node",
        data={"facts": None, "absent": "ibstat"},
    )
    healthy = StepResult(host="gpu001", step="shm", status=Status.OK, data={"facts": SHM})
    run = RunResult(results=[absent, healthy])
    cells = health_cells(run)
    assert cells[("gpu001", "ib")] == Cell("not installed", Level.OK, dim=True)
    assert host_problem(cells, "gpu001", ("ib", "shm")) == Cell("-", Level.OK)
    assert probe_outcome(run) is Outcome.OK
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True, color_system="standard")
    console.print(health_table(cells, ["gpu001"], ("ib", "shm"), 120))
    assert "\x1b[2mnot installed" in out.getvalue()  # dim


def test_a_probe_that_failed_without_a_missing_tool_still_fails_the_snapshot() -> None:
    failed = StepResult(
        host="gpu001",
        step="ib",
        status=Status.IGNORED,
        message="ib: not ibstat/ibstatus/ibv_devinfo output: no CA found: 'garbage'",
        data={"facts": None},
    )
    cells = health_cells(RunResult(results=[failed]))
    assert cells[("gpu001", "ib")].level is Level.BAD
    assert probe_outcome(RunResult(results=[failed])) is Outcome.HOST_FAILED


def test_the_width_is_the_terminals_or_columns_off_a_terminal_else_unlimited() -> None:
    assert table_width(132, {"COLUMNS": "100"}) == 132  # rich already read COLUMNS there
    assert table_width(None, {"COLUMNS": "100"}) == 100
    assert table_width(None, {}) is None  # a file or a pipe: every cell whole
    assert table_width(None, {"COLUMNS": "wide"}) is None
    assert table_width(None, {"COLUMNS": "0"}) is None


@pytest.mark.parametrize("room", [20, 40, 57, 80, 100, 157, 300])
def test_fit_widths_never_outgrow_the_room(room: int) -> None:
    natural = [9, 98, 25, 13, 14, 78, 8, 6, 107, 21, 13, 13, 13, 13, 13]
    widths = fit_widths(natural, room)
    assert sum(widths) <= max(room, natural[0] + len(natural) - 1)
    assert widths[0] == natural[0]  # host names whole
    assert all(1 <= w <= n for w, n in zip(widths, natural, strict=True))
    if sum(natural) <= room:
        assert widths == natural


def test_fleetfix_probe_off_a_terminal_fits_columns(tmp_path: Path) -> None:
    """A real run (tests/unit/cli/real_node.py), stdout a pipe, COLUMNS=100: every line within
    100 columns and one line per host; without COLUMNS the pipe gets every cell whole."""
    narrow = probe(tmp_path / "narrow", columns="100")
    lines = narrow.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 100, narrow.stdout + narrow.stderr
    assert len([line for line in lines if "localhost" in line]) == 1
    assert "\u2026" in narrow.stdout
    wide = probe(tmp_path / "wide")
    assert max(len(line) for line in wide.stdout.splitlines()) > 100
    assert "\u2026" not in wide.stdout
