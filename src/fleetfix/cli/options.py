"""Command-line options shared by several subcommands."""

from __future__ import annotations

import argparse

from fleetfix.inventory import Inventory
from fleetfix.inventory.runtime import with_host_var


def add_inventory_option(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """A required inventory may also come from ansible.cfg or $ANSIBLE_INVENTORY: the command
    checks it after parsing (cli.ansible_options)."""
    parser.add_argument(
        "-i",
        "--inventory",
        action="append",
        default=None,
        metavar="INVENTORY",
        help="inventory file or directory (INI or YAML); repeatable, merged in order"
        + (" (default: ansible.cfg's inventory, $ANSIBLE_INVENTORY)" if required else ""),
    )


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument(
        "-u",
        "--user",
        help="remote user (default: inventory, $ANSIBLE_REMOTE_USER, ansible.cfg, ssh config)",
    )
    group.add_argument(
        "--private-key",
        action="append",
        default=[],
        metavar="FILE",
        help="SSH private key file; repeatable (default: $ANSIBLE_PRIVATE_KEY_FILE, ansible.cfg)",
    )
    group.add_argument("-b", "--become", action="store_true", help="run commands via sudo")
    group.add_argument("--become-user", default="root", help="user to become (root)")
    group.add_argument("--transport", default="ssh", help="ssh (default), local, or fabric")
    group.add_argument("--known-hosts", metavar="FILE", help="known_hosts file to verify against")
    group.add_argument(
        "--accept-new-host-keys",
        action="store_true",
        help="trust and record unknown host keys (mismatched keys are still refused); also"
        " host_key_checking=False in ansible.cfg or $ANSIBLE_HOST_KEY_CHECKING",
    )
    group.add_argument(
        "-T",
        "--connect-timeout",
        type=float,
        help="seconds to establish a connection (ansible-playbook's -T/--timeout; default:"
        " $ANSIBLE_TIMEOUT, ansible.cfg's timeout, else 20)",
    )
    group.add_argument(
        "--max-handshakes",
        type=int,
        default=16,
        help="SSH handshakes in flight at once, separate from --forks (16)",
    )
    group.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="start N worker processes at once that hold SSH connections and parse probe "
        "output, besides the main process (default: none; from 64 hosts one starts when the "
        "main process is measured saturated, up to one per usable CPU beyond the first)",
    )


def add_journal_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--journal",
        metavar="PATH|DSN",
        help="the journal: a SQLite file, or a team's PostgreSQL as postgresql://user@host/db"
        " (default: $FLEETFIX_JOURNAL, the config file's `journal`, /var/lib/fleetfix as"
        " root, else the user's state dir; every controller of a fleet should share one)",
    )


def run_id(text: str) -> str:
    """A run id as `--resume` takes it: not empty (`--resume ""` from an unset variable in a
    script must not start a fresh full run instead)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "expected the id of the run to resume (fleetfix history lists them), not an empty value"
        )
    return text.strip()


def port_number(text: str) -> int:
    """A TCP port as an option takes it: 1 to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (1-65535), not {text!r}")
    return port


def add_lab_port_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lab-port",
        type=port_number,
        metavar="PORT",
        help="SSH port of the lab an inventory with fleetfix_lab_scenario starts (default: the"
        " scenario's, else a free one; a port in use is an error)",
    )


def with_lab_port(args: argparse.Namespace, inventory: Inventory) -> Inventory:
    """The inventory with --lab-port as its fleetfix_lab_port (what the embedded lab reads)."""
    port = getattr(args, "lab_port", None)
    return inventory if port is None else with_host_var(inventory, "fleetfix_lab_port", port)


def add_probing_options(parser: argparse.ArgumentParser) -> None:
    """`-f/--forks` and `--timeout` of the commands that only probe (probe, triage)."""
    parser.add_argument(
        "-f", "--forks", type=int, help="hosts probed at once ($ANSIBLE_FORKS, ansible.cfg, 50)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="per-probe timeout (120)")
