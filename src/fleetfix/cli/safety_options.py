"""`fleetfix run` options for the engine's safety invariants: hands-off list, ownership
override, fleet-wide repair budget; and who is running fleetfix."""

from __future__ import annotations

import argparse
import getpass
import os
import re
from pathlib import Path

from fleetfix.errors import InputError, SourcePosition, UsageError

DEFAULT_HANDS_OFF = Path("/etc/fleetfix/hands-off")
DEFAULT_REPAIR_BUDGET = "25%"
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


def add_safety_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("safety")
    group.add_argument(
        "--hands-off",
        metavar="FILE",
        help=f"nodes fleetfix must never act on, one per line with an optional reason"
        f" (default: {DEFAULT_HANDS_OFF} when it exists)",
    )
    group.add_argument(
        "--override-ownership",
        action="append",
        default=[],
        metavar="HOST",
        type=_host_list,
        help="act on these hosts although someone else drained them or they are hands-off"
        " (comma-separated; journaled with who used it)",
    )
    group.add_argument(
        "--repair-budget",
        default=DEFAULT_REPAIR_BUDGET,
        metavar="N|P%",
        help="at most N hosts (or P%% of the inventory) out of service by fleetfix at once,"
        " across runs and controllers sharing the journal (default %(default)s;"
        " 'none' for no budget)",
    )


def _host_list(text: str) -> list[str]:
    return [h.strip() for h in text.split(",") if h.strip()]


def override_hosts(values: list[list[str]]) -> frozenset[str]:
    return frozenset(host for group in values for host in group)


def repair_budget(text: str, fleet_size: int) -> int | None:
    """The budget in hosts: N, or P% of the fleet floored (at least 1); None for 'none'."""
    if text.strip().lower() in ("none", "off", "unlimited"):
        return None
    match = _BUDGET.match(text)
    if match is None:
        raise UsageError(f"--repair-budget: {text!r} is not N or P% (e.g. 4 or 10%)")
    value, percent = float(match.group(1)), match.group(2) == "%"
    if percent:
        return max(1, int(fleet_size * value / 100.0))
    if value < 1 or value != int(value):
        raise UsageError(f"--repair-budget: {text!r} must be a whole number of hosts, at least 1")
    return int(value)


def hands_off(path: str | None) -> dict[str, str]:
    """host -> reason from the hands-off file (the default one only when it exists)."""
    chosen = Path(path) if path else DEFAULT_HANDS_OFF
    if path is None and not chosen.is_file():
        return {}
    try:
        text = chosen.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the hands-off list {chosen}: {exc}") from exc
    listed: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        host, _, reason = content.partition(" ")
        if not re.fullmatch(r"[\w.\-]+", host):
            where = SourcePosition(str(chosen), number)
            raise InputError(f"not a host name: {host!r}", where, source_line=line)
        listed[host] = reason.strip() or f"listed in {chosen}"
    return listed


def operator() -> str:
    """Who runs fleetfix: the sudo caller when run through sudo, else the login user."""
    user = os.environ.get("SUDO_USER")
    if user:
        return f"{user} (via sudo)"
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
