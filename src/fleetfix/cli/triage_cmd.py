"""`fleetfix triage JOB`: from a failed or hung Slurm job to its suspects, read-only.

Prints the job, then its suspects most accused first, each with its evidence, then the commands
that remediate them. Exit codes: 0 no suspect, 2 suspects named, 4 a node of the job could not
be reached (it is a suspect too), 1 the job or a log could not be read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.text import Text

from fleetfix.cli.ansible_options import resolve_ansible_options
from fleetfix.cli.options import (
    add_connection_options,
    add_inventory_option,
    add_probing_options,
)
from fleetfix.inventory import load_inventory
from fleetfix.probes.slurm_job import valid_job_id
from fleetfix.results import Outcome
from fleetfix.triage.logs import log_suspects
from fleetfix.triage.run import Triage, read_logs, triage
from fleetfix.triage.suspects import Kind, remediation

STYLE = {
    Kind.SWITCH: "bold magenta",
    Kind.NODE: "bold red",
    Kind.GPU: "bold red",
    Kind.LINK: "yellow",
    Kind.PROCESS: "yellow",
}


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "triage", help="from a failed or hung Slurm job to its suspect nodes, GPUs and links"
    )
    parser.add_argument("job", help="Slurm job id (48213, 48213_7 for an array task)")
    add_inventory_option(parser)
    add_connection_options(parser)
    parser.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="PATH",
        help="the job's log file (NCCL_DEBUG output, torchrun errors); repeatable",
    )
    parser.add_argument(
        "--slurm-host",
        help="host that runs scontrol/sacct (default: the first of group slurm_controller,"
        " else the inventory's first host)",
    )
    parser.add_argument(
        "--topology-file",
        metavar="PATH",
        help="switches and links (YAML, or an ibnetdiscover dump): the domains a switch suspect"
        " is looked for in, beside the inventory's leaf/rack vars",
    )
    parser.add_argument(
        "--counter-wait",
        type=float,
        default=2.0,
        help="seconds at least between the two reads of InfiniBand error counters (2)",
    )
    add_probing_options(parser)
    parser.add_argument("--json", action="store_true", help="the triage as JSON")
    parser.set_defaults(handler=triage_command, yes=True)


def triage_command(args: argparse.Namespace) -> int:
    resolve_ansible_options(args)
    job = valid_job_id(args.job)  # PlaybookError (exit 1) before anything connects
    texts = read_logs(args.log)  # an unreadable log fails before anything connects
    inventory = load_inventory(args.inventory)
    found = asyncio.run(triage(args, inventory, job, log_suspects(texts), list(texts)))
    if args.json:
        print(json.dumps(as_json(found, _inventory_name(args)), indent=2, default=str))
    else:
        # soft_wrap: each line whole, into a terminal, a file or a pager alike (no fold mid-word)
        show(Console(highlight=False, soft_wrap=True), found, _inventory_name(args))
    return int(outcome(found))


def _inventory_name(args: argparse.Namespace) -> str:
    names = args.inventory or []
    return " -i ".join(names) if names else "INVENTORY"


def outcome(found: Triage) -> Outcome:
    if any(r.unreachable for r in found.readings.values()):
        return Outcome.UNREACHABLE
    return Outcome.HOST_FAILED if found.suspects else Outcome.OK


def show(console: Console, found: Triage, inventory: str) -> None:
    job = found.job
    running = job.get("state") == "RUNNING"
    when = f"since {job.get('start')}" if running else f"{job.get('start')} .. {job.get('end')}"
    ended = "" if running or not job.get("exit_code") else f", exit {_exit(job.get('exit_code'))}"
    console.print(
        Text.assemble(
            (f"job {job.get('job_id')}", "bold"),
            f" {job.get('name') or ''} ({job.get('user') or '?'}): {job.get('state')}{ended}, "
            f"{when}",
        )
    )
    console.print(
        f"  {len(found.hosts)} nodes probed read-only ({job.get('node_list')}), "
        f"via {found.slurm_host}; {len(found.logs)} log files; {found.elapsed:.1f} s"
    )
    if found.missing:
        console.print(f"  not in the inventory, not probed: {', '.join(found.missing)}")
    for host, failures in sorted(found.unread.items()):
        text = "; ".join(f"{p}: {why}" for p, why in sorted(failures.items()))
        console.print(Text(f"  unread on {host}: {text}", style="yellow"))
    if not found.suspects:
        console.print(Text("no suspect: every node of the job reads healthy", style="green"))
        return
    console.print(Text(f"\nsuspects ({len(found.suspects)}), most accused first:", style="bold"))
    for number, suspect in enumerate(found.suspects, start=1):
        console.print(
            Text.assemble(
                f"{number:>3}. ",
                (f"{suspect.kind.value} {suspect.target}", STYLE[suspect.kind]),
                f"  (score {suspect.score})",
            )
        )
        for evidence in suspect.evidence:
            console.print(Text(f"       {evidence.source}: {evidence.text}"))
    commands = remediation(found.suspects, inventory)
    if commands:
        console.print(
            Text("\nto remediate (fleetfix asks before it changes anything):", style="bold")
        )
        for command in commands:
            console.print(f"  {command}")
    if any(s.kind is Kind.SWITCH for s in found.suspects):
        console.print(
            "  the switch suspects' nodes are left out: look at the switch before any node"
        )


def _exit(code: Any) -> str:
    if isinstance(code, list | tuple) and len(code) == 2:
        return f"{code[0]}:{code[1]}"
    return str(code)


def as_json(found: Triage, inventory: str) -> Mapping[str, Any]:
    return {
        "job": found.job,
        "slurm_host": found.slurm_host,
        "hosts": list(found.hosts),
        "missing": list(found.missing),
        "unread": found.unread,
        "logs": list(found.logs),
        "elapsed_s": round(found.elapsed, 3),
        "suspects": [{**asdict(s), "kind": s.kind.value, "score": s.score} for s in found.suspects],
        "remediation": remediation(found.suspects, inventory),
    }
