"""Options that ansible.cfg and ANSIBLE_* variables give defaults to, applied after parsing so
the command line wins exactly: command line, then environment, then ansible.cfg, then fleetfix's
own default (fleetfix.ansible_cfg reads the file and the variables)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fleetfix.ansible_cfg import AnsibleSettings, read_settings
from fleetfix.errors import UsageError
from fleetfix.facts.step import DEFAULT_GATHERING
from fleetfix.transport.base import DEFAULT_CONNECT_TIMEOUT

DEFAULT_FORKS = 50


def resolve_ansible_options(args: argparse.Namespace) -> AnsibleSettings:
    """Fill the options of `args` the user did not give (None) from the environment and
    ansible.cfg, then fleetfix's defaults; with -v, say which file was used and what in its
    [ssh_connection] has no effect.

    Raises:
        UsageError: no inventory anywhere, or a bad ANSIBLE_* value.
        InputError: a bad ansible.cfg.
    """
    settings = read_settings(os.environ, Path.cwd())
    _resolve_inventory(args, settings)
    if hasattr(args, "forks") and args.forks is None:
        forks = settings.get("forks")
        args.forks = forks.value if forks else DEFAULT_FORKS
    if hasattr(args, "connect_timeout"):
        _resolve_connection(args, settings)
    if getattr(args, "force_handlers", True) is None:
        forced = settings.get("force_handlers")
        args.force_handlers = bool(forced.value) if forced else False
        gathering = settings.get("gathering")
        args.gathering = str(gathering.value) if gathering else DEFAULT_GATHERING
    missing = settings.get("error_on_missing_handler")
    args.error_on_missing_handler = bool(missing.value) if missing else True
    if getattr(args, "verbose", 0):
        _say(settings)
    return settings


def _resolve_inventory(args: argparse.Namespace, settings: AnsibleSettings) -> None:
    if args.inventory is not None:
        return
    inventory = settings.get("inventory")
    if inventory is None or not inventory.value:
        raise UsageError(
            "the following arguments are required: -i/--inventory"
            " (or `inventory` in ansible.cfg, or $ANSIBLE_INVENTORY)"
        )
    args.inventory = list(inventory.value)


def _resolve_connection(args: argparse.Namespace, settings: AnsibleSettings) -> None:
    user, key = settings.get("remote_user"), settings.get("private_key_file")
    timeout, checking = settings.get("timeout"), settings.get("host_key_checking")
    if args.user is None and user is not None:
        args.user = user.value
    if not args.private_key and key is not None:
        args.private_key = [key.value]
    if args.connect_timeout is None:
        # Ansible's `timeout` is the connection timeout (ansible-playbook -T), not --timeout's.
        args.connect_timeout = float(timeout.value) if timeout else DEFAULT_CONNECT_TIMEOUT
    if checking is not None and not checking.value:
        # Unknown keys are accepted and recorded; a changed key is still refused (decisions.md).
        args.accept_new_host_keys = True


def _say(settings: AnsibleSettings) -> None:
    if settings.config_file is not None:
        print(f"Using {settings.config_file} as config file", file=sys.stderr)
    for note in settings.notes:
        print(f"  note: {note}", file=sys.stderr)
