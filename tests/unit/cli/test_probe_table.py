"""`fleetfix probe`'s table: one line per host at 80 columns, worst first, a problem column."""

from __future__ import annotations

import io

from rich.console import Console

from fleetfix.cli.probe_cmd import UNREACHABLE_PROBE, Cell, health_table, host_problem
from fleetfix.knowledge.health import Level

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
