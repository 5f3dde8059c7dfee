"""`fleetfix inventory`: --list (ansible-inventory's JSON), --graph, --host."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fleetfix.cli.ansible_options import resolve_ansible_options
from fleetfix.cli.options import add_inventory_option
from fleetfix.errors import UsageError
from fleetfix.inventory import load_inventory, render_graph, render_host, render_list
from fleetfix.results import Outcome


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "inventory", help="show an inventory as fleetfix (and Ansible) reads it"
    )
    add_inventory_option(parser)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="all groups, hosts and vars as JSON")
    mode.add_argument("--graph", nargs="?", const="all", metavar="GROUP", help="group tree")
    mode.add_argument("--host", metavar="HOST", help="one host's merged vars as JSON")
    parser.add_argument("--vars", action="store_true", help="with --graph: show vars")
    parser.set_defaults(handler=inventory_command)


def inventory_command(args: argparse.Namespace) -> int:
    resolve_ansible_options(args)
    inventory = load_inventory(args.inventory)
    if args.list:
        print(json.dumps(render_list(inventory), indent=4, sort_keys=True, default=str))
    elif args.graph:
        if args.graph not in inventory.group_names():
            raise UsageError(f"no group named {args.graph!r} in the inventory")
        print(render_graph(inventory, args.graph, with_vars=args.vars))
    else:
        if args.host not in inventory.host_names():
            raise UsageError(f"no host named {args.host!r} in the inventory")
        print(json.dumps(render_host(inventory, args.host), indent=4, sort_keys=True, default=str))
    return Outcome.OK
