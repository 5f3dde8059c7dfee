"""`fleetfix probe`: an ad-hoc fleet health snapshot, one row per host, one column per probe."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleetfix.actions import action_registry
from fleetfix.cli.ansible_options import resolve_ansible_options
from fleetfix.cli.options import add_connection_options, add_inventory_option
from fleetfix.engine import Engine, RunOptions
from fleetfix.errors import InputError
from fleetfix.events import EventBus
from fleetfix.inventory import Inventory, load_inventory
from fleetfix.knowledge.health import Level, summarize
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.model import Play, Playbook, Step, StepKind
from fleetfix.probes import probe_registry
from fleetfix.results import Outcome, RunResult, Status
from fleetfix.runtime import open_runtime

DEFAULT_PROBES = ("nvidia_smi", "xid", "gpu_processes", "shm", "services")
STYLE = {Level.OK: "green", Level.WARN: "yellow", Level.BAD: "bold red"}
WIDE = 1000
"""Columns the table may use when stdout is not a terminal."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("probe", help="run probes across the fleet and print a health table")
    parser.add_argument(
        "probes", nargs="*", help=f"probe names (default: {' '.join(DEFAULT_PROBES)})"
    )
    add_inventory_option(parser)
    add_connection_options(parser)
    parser.add_argument("-l", "--limit", default="all", help="host pattern (default: all)")
    parser.add_argument(
        "-f", "--forks", type=int, help="hosts probed at once ($ANSIBLE_FORKS, ansible.cfg, 50)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="per-probe timeout (120)")
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
    return int(_outcome(result))


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
            options=RunOptions(forks=args.forks, command_timeout=args.timeout),
        )
        return await engine.run(snapshot_playbook(names), lambda _pattern: hosts)


@dataclass(frozen=True, slots=True)
class Cell:
    """One probe's verdict on one host, as the table shows it."""

    text: str
    level: Level


UNREACHABLE_PROBE = "*"
RANK = {Level.BAD: 0, Level.WARN: 1, Level.OK: 2}


def health_cells(result: RunResult) -> dict[tuple[str, str], Cell]:
    """(host, probe) -> its cell; (host, "*") for a host that could not be reached."""
    cells: dict[tuple[str, str], Cell] = {}
    for r in result.results:
        if r.status is Status.UNREACHABLE:
            cells[(r.host, UNREACHABLE_PROBE)] = Cell(f"unreachable: {r.message}", Level.BAD)
            continue
        health = summarize(r.step, r.data.get("facts"), r.message)
        cells[(r.host, r.step)] = Cell(health.text, health.level)
    return cells


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
    (water filling); at least 4 each."""
    widths = list(natural)
    widths[1] = min(natural[1], max(16, room * 2 // 5))
    left = room - widths[0] - widths[1]
    open_columns = list(range(2, len(widths)))
    while open_columns:
        share = max(4, left // len(open_columns))
        narrow = [i for i in open_columns if natural[i] <= share]
        if not narrow:
            for i in open_columns:
                widths[i] = share
            break
        for i in narrow:
            left -= natural[i]
            open_columns.remove(i)
    return widths


def _style(cell: Cell) -> str:
    return "dim" if cell.text == "-" else STYLE[cell.level]


def _table(result: RunResult, hosts: list[str], names: tuple[str, ...]) -> None:
    console = Console(highlight=False)
    # A file or a pipe gets every cell whole; a terminal gets a table that fits it.
    width = console.width if console.is_terminal else None
    if width is None:
        console.width = WIDE
    console.print(health_table(health_cells(result), hosts, names, width))


def _as_json(result: RunResult) -> dict[str, Any]:
    hosts: dict[str, dict[str, Any]] = {}
    for r in result.results:
        entry = hosts.setdefault(r.host, {})
        entry[r.step] = {
            "status": r.status.value,
            "message": r.message,
            "facts": r.data.get("facts"),
        }
    return {"hosts": hosts}


def _outcome(result: RunResult) -> Outcome:
    if any(s.unreachable for s in result.stats.values()):
        return Outcome.UNREACHABLE
    bad = any(
        r.status is not Status.OK
        or summarize(r.step, r.data.get("facts"), r.message).level is Level.BAD
        for r in result.results
    )
    return Outcome.HOST_FAILED if bad else Outcome.OK
