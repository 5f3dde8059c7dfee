"""Operator tools around the engine: `parse` saved output, explain an `xid`, `probe` a fleet."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fleetfix.errors import FleetfixError, UsageError
from fleetfix.knowledge.xid import recommended_action, xid_catalog
from fleetfix.plugins import UnknownPluginError
from fleetfix.probes import probe_registry
from fleetfix.probes.base import Probe, to_data
from fleetfix.results import Outcome


def add_parsers(sub: Any) -> None:
    parse = sub.add_parser("parse", help="run a probe's parser on saved output, print JSON")
    parse.add_argument("probe", help="probe name (fleetfix parse --list shows them)")
    parse.add_argument("file", help="saved tool output, or - for standard input")
    parse.set_defaults(handler=parse_command)

    xid = sub.add_parser("xid", help="explain an Xid code and what fleetfix does about it")
    xid.add_argument("code", type=int)
    xid.add_argument("--recovery-action", help="the driver's reported recovery action, if any")
    xid.set_defaults(handler=xid_command)

    probes = sub.add_parser("probes", help="list the built-in probes")
    probes.set_defaults(handler=probes_command)


def _probe(name: str) -> Probe[Any]:
    try:
        return probe_registry().get(name)
    except UnknownPluginError as exc:
        raise UsageError(str(exc)) from None


def parse_command(args: argparse.Namespace) -> int:
    probe = _probe(args.probe)
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(args.file).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    facts = probe.parse(text)  # ProbeParseError -> exit 1 with the excerpt, via the CLI
    print(json.dumps(to_data(facts), indent=2, default=str))
    return Outcome.OK


def probes_command(args: argparse.Namespace) -> int:
    for probe in sorted(probe_registry(), key=lambda p: p.name):
        print(f"{probe.name:<16} {probe.summary}")
        for param, meaning in sorted(probe.params.items()):
            print(f"{'':<18}{param}: {meaning}")
    return Outcome.OK


def xid_command(args: argparse.Namespace) -> int:
    catalog = xid_catalog()
    info = catalog.get(args.code)
    try:
        advice = recommended_action(args.code, args.recovery_action)
    except FleetfixError as exc:
        raise UsageError(str(exc)) from None
    print(f"Xid {args.code}" + (f": {info.mnemonic}" if info else " (not in the catalog)"))
    if info is not None:
        print(f"  meaning:        {info.description}")
        print(f"  severity:       {info.severity}")
        print(f"  NVIDIA action:  {info.immediate_action}")
        if info.immediate_action_text:
            print(f'                  "{info.immediate_action_text}"')
        if info.investigatory_action_text not in (None, info.immediate_action_text):
            print(f"  investigate:    {info.investigatory_action_text}")
        if info.links_to_154:
            since = f" (driver {info.xid154_since}+)" if info.xid154_since else ""
            print(f"  recovery:       the driver reports a recovery action (Xid 154){since}")
    print(f"  fleetfix does:  {advice.action}: {advice.reason}")
    playbook = advice.playbook or (info.fleetfix_playbook if info else None)
    print(f"  playbook:       {('playbooks/' + playbook) if playbook else 'none (report only)'}")
    print(f"  catalog:        version {catalog.version}")
    return Outcome.OK
