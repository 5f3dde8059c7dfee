"""`fleetfix probe`: an ad-hoc fleet health snapshot, one row per host, one column per probe."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from rich.console import Console
from rich.table import Table

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


def _table(result: RunResult, hosts: list[str], names: tuple[str, ...]) -> None:
    table = Table(title="fleet health", show_lines=False)
    table.add_column("host", no_wrap=True)
    for name in names:
        table.add_column(name)
    cells: dict[tuple[str, str], tuple[str, str]] = {}
    for r in result.results:
        if r.status is Status.UNREACHABLE:
            cells[(r.host, "*")] = (f"unreachable: {r.message}", "bold red")
            continue
        health = summarize(r.step, r.data.get("facts"), r.message)
        cells[(r.host, r.step)] = (health.text, STYLE[health.level])
    for host in hosts:
        down = cells.get((host, "*"))
        row = [down if down else cells.get((host, n), ("-", "dim")) for n in names]
        table.add_row(host, *(f"[{style}]{_escape(text)}[/]" for text, style in row))
    Console(highlight=False).print(table)


def _escape(text: str) -> str:
    return text.replace("[", "\\[")


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
