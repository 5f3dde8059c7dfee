"""`fleetfix probe`: an ad-hoc fleet health snapshot, one row per host, one column per probe."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetfix.actions import action_registry
from fleetfix.cli.ansible_options import resolve_ansible_options
from fleetfix.cli.options import (
    add_connection_options,
    add_inventory_option,
    add_probing_options,
)
from fleetfix.engine import Engine, RunOptions
from fleetfix.engine.hoststep import ABSENT_KEY
from fleetfix.errors import InputError
from fleetfix.events import EventBus
from fleetfix.inventory import Inventory, load_inventory
from fleetfix.knowledge.health import Level, summarize
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.model import Play, Playbook, Step, StepKind
from fleetfix.probes import probe_registry
from fleetfix.results import Outcome, RunResult, Status, StepResult
from fleetfix.runtime import open_runtime

DEFAULT_PROBES = ("pci_gpus", "nvidia_smi", "xid", "gpu_processes", "shm", "services")
"""pci_gpus first: the engine holds nvidia-smi to the GPUs on the bus (knowledge/gpu_count.py)."""
STYLE = {Level.OK: "green", Level.WARN: "yellow", Level.BAD: "bold red"}
WIDE = 1000
"""Columns the table may use when stdout is not a terminal and COLUMNS is not set: a file or a
pipe gets every cell whole."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("probe", help="run probes across the fleet and print a health table")
    parser.add_argument(
        "probes", nargs="*", help=f"probe names (default: {' '.join(DEFAULT_PROBES)})"
    )
    add_inventory_option(parser)
    add_connection_options(parser)
    parser.add_argument("-l", "--limit", default="all", help="host pattern (default: all)")
    add_probing_options(parser)
    parser.add_argument("--json", action="store_true", help="facts as JSON instead of a table")
    parser.set_defaults(handler=probe_command, yes=True)


def probe_command(args: argparse.Namespace) -> int:
    resolve_ansible_options(args)
    names = tuple(args.probes) or DEFAULT_PROBES
    registry = probe_registry()
    for name in names:
        registry.get(name)  # unknown names fail before anything connects
    inventory = load_inventory(args.inventory)
    hosts = inventory.limit(inventory.select("all"), args.limit)
    if not hosts:
        raise InputError(f"no hosts matched {args.limit!r}")
    result = asyncio.run(_probe(args, inventory, hosts, names))
    if args.json:
        print(json.dumps(_as_json(result), indent=2, default=str))
    else:
        _table(result, hosts, names)
    return int(probe_outcome(result))


def snapshot_playbook(names: tuple[str, ...]) -> Playbook:
    """Probe-only playbook: every probe runs on every host, a failing one does not stop the rest."""
    steps = tuple(
        Step(
            kind=StepKind.PROBE,
            name=name,
            args={"name": name, "params": {}},
            register=name,
            ignore_errors=True,
        )
        for name in names
    )
    return Playbook(path="<fleetfix probe>", plays=(Play(name="probe", hosts="all", tasks=steps),))


async def _probe(
    args: argparse.Namespace, inventory: Inventory, hosts: list[str], names: tuple[str, ...]
) -> RunResult:
    bus = EventBus()
    async with open_runtime(args, inventory, bus, hosts=len(hosts)) as runtime:
        engine = Engine(
            inventory=inventory,
            transport=runtime.transport,
            templar=Templar(),
            spec_factory=runtime.spec_factory,
            probes=probe_registry(),
            actions=action_registry(),
            bus=bus,
            # Every probe's facts are printed at the end: the run keeps them.
            options=RunOptions(forks=args.forks, command_timeout=args.timeout, keep_facts=True),
        )
        return await engine.run(snapshot_playbook(names), lambda _pattern: hosts)


@dataclass(frozen=True, slots=True)
class Cell:
    """One probe's verdict on one host, as the table shows it."""

    text: str
    level: Level
    dim: bool = False
    """Nothing to judge (the probe's tool is not installed): shown dim."""


UNREACHABLE_PROBE = "*"
RANK = {Level.BAD: 0, Level.WARN: 1, Level.OK: 2}


def health_cells(result: RunResult) -> dict[tuple[str, str], Cell]:
    """(host, probe) -> its cell; (host, "*") for a host that could not be reached."""
    cells: dict[tuple[str, str], Cell] = {}
    for r in result.results:
        if r.status is Status.UNREACHABLE:
            cells[(r.host, UNREACHABLE_PROBE)] = Cell(f"unreachable: {r.message}", Level.BAD)
            continue
        health = summarize(r.step, r.data.get("facts"), r.message, absent_tool(r))
        cells[(r.host, r.step)] = Cell(health.text, health.level, dim=health.absent)
    return cells


def absent_tool(result: StepResult) -> str | None:
    """The tool a probe step found missing on the node (the engine registers it as `absent`,
    engine.hoststep.ABSENT_KEY, from errors.ToolNotInstalled), or None."""
    tool = result.data.get(ABSENT_KEY)
    return tool if isinstance(tool, str) and tool else None


def host_problem(cells: Mapping[tuple[str, str], Cell], host: str, names: Sequence[str]) -> Cell:
    """The host's worst verdict, named by its probe ("xid: Xid 79 ..."), or ok."""
    down = cells.get((host, UNREACHABLE_PROBE))
    if down is not None:
        return down
    found = [(name, cells[(host, name)]) for name in names if (host, name) in cells]
    bad = sorted((c for c in found if c[1].level is not Level.OK), key=lambda c: RANK[c[1].level])
    if not bad:
        return Cell("-", Level.OK)
    name, worst = bad[0]
    more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
    return Cell(f"{name}: {worst.text}{more}", worst.level)


def health_table(
    cells: Mapping[tuple[str, str], Cell],
    hosts: Sequence[str],
    names: Sequence[str],
    width: int | None = None,
) -> Table:
    """Worst hosts first, a problem column naming each host's problem. No cell wraps: within
    `width` columns (None: no limit) a long one is cut with an ellipsis."""
    problems = {host: host_problem(cells, host, names) for host in hosts}
    rows = []
    for host in sorted(hosts, key=lambda h: RANK[problems[h].level]):
        down = cells.get((host, UNREACHABLE_PROBE))
        row = [down or cells.get((host, n), Cell("-", Level.OK)) for n in names]
        rows.append((host, [problems[host], *row]))
    headers = ["host", "problem", *names]
    natural = [
        max([len(headers[i]), *(len(_texts(r)[i]) for r in rows)]) for i in range(len(headers))
    ]
    widths = natural if width is None else fit_widths(natural, width - 3 * len(headers) - 1)
    table = Table(title="fleet health", show_lines=False)
    for header, size in zip(headers, widths, strict=True):
        table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=size)
    for host, shown in rows:
        table.add_row(host, *(Text(c.text, style=_style(c)) for c in shown))
    return table


def _texts(row: tuple[str, list[Cell]]) -> list[str]:
    return [row[0], *(c.text for c in row[1])]


def fit_widths(natural: Sequence[int], room: int) -> list[int]:
    """Column widths within `room` characters: host names whole; the problem column (second)
    up to 40% of the room, since it is what the reader came for; every probe column its natural
    width when that fits its fair share of what is left, the rest share the remainder equally
    (water filling), down to one character (`…`) when many probes meet a narrow terminal. The
    widths add up to at most `room` whenever the host names and a character per column fit."""
    widths = list(natural)
    probes = list(range(2, len(widths)))
    crowded = room - natural[0] - len(probes)
    widths[1] = max(1, min(natural[1], max(16, room * 2 // 5), crowded))
    left = room - widths[0] - widths[1]
    while probes:
        share = left // len(probes)
        narrow = [i for i in probes if natural[i] <= share]
        if not narrow:
            break
        for i in narrow:
            left -= natural[i]
            probes.remove(i)
    for rank, i in enumerate(probes):  # the first columns take what does not divide evenly
        widths[i] = max(1, left // len(probes) + (rank < left % len(probes)))
    return widths


def _style(cell: Cell) -> str:
    return "dim" if cell.dim or cell.text == "-" else STYLE[cell.level]


def table_width(terminal: int | None, environ: Mapping[str, str]) -> int | None:
    """The columns the table may use: the terminal's width (`terminal`, None when stdout is
    not one); off a terminal, COLUMNS when it is set, as rich and most CLIs read it; else None,
    no limit: a file or a pipe gets every cell whole."""
    if terminal is not None:
        return terminal
    columns = environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def _table(result: RunResult, hosts: list[str], names: tuple[str, ...]) -> None:
    console = Console(highlight=False)
    width = table_width(console.width if console.is_terminal else None, os.environ)
    console.width = width or WIDE
    console.print(health_table(health_cells(result), hosts, names, width))


def _as_json(result: RunResult) -> dict[str, Any]:
    hosts: dict[str, dict[str, Any]] = {}
    for r in result.results:
        entry = hosts.setdefault(r.host, {})
        entry[r.step] = {
            "status": r.status.value,
            "message": r.message,
            "facts": r.data.get("facts"),
            "absent": absent_tool(r),
        }
    return {"hosts": hosts}


def probe_outcome(result: RunResult) -> Outcome:
    """Unreachable hosts exit 4; a failed probe or a BAD verdict 2. A probe whose tool the
    node does not have has no facts and its step did not pass, but that is not a fault of the
    node: it alone never makes the exit code 2."""
    if any(s.unreachable for s in result.stats.values()):
        return Outcome.UNREACHABLE
    bad = any(
        (r.status is not Status.OK and absent_tool(r) is None)
        or summarize(r.step, r.data.get("facts"), r.message, absent_tool(r)).level is Level.BAD
        for r in result.results
    )
    return Outcome.HOST_FAILED if bad else Outcome.OK
