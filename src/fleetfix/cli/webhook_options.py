"""`--webhook` and `--notify-on`: which webhooks hear about a run, and about what.

Both are checked while the command line is parsed (exit 5 naming the option, before anything
runs); a webhook URL is a secret, so no message here repeats it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import TYPE_CHECKING

from fleetfix.config import config_path, setting_list
from fleetfix.errors import InputError, SourcePosition
from fleetfix.notify.kinds import ALL_KINDS, Kind

if TYPE_CHECKING:
    from fleetfix.notify.observer import Notifier
    from fleetfix.notify.webhook import Webhook


def add_webhook_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--webhook",
        action="append",
        default=[],
        type=_webhook,
        metavar="[slack:|json:]URL",
        help="POST a notification there on RMA, hold, repair-budget refusal and run end"
        " (repeatable; json by default, slack: for a Slack incoming webhook; URL may be"
        " env:NAME to read it from $NAME and keep it off the command line)",
    )
    group.add_argument(
        "--notify-on",
        type=_kinds,
        default=ALL_KINDS,
        metavar="KINDS",
        help=f"which notifications to send: a comma list of {', '.join(Kind)} (default: all)",
    )


def configured_webhooks() -> list[Webhook]:
    """The config file's `webhooks` (used when no --webhook is given)."""
    texts = setting_list("webhooks")
    if not texts:
        return []  # most runs: the webhook code stays unloaded
    from fleetfix.notify.webhook import WebhookError, parse_webhook  # noqa: PLC0415

    found = []
    for text in texts:
        try:
            found.append(parse_webhook(text, os.environ))
        except WebhookError as exc:
            raise InputError(f"webhooks: {exc}", _config_position()) from None
    return found


def _config_position() -> SourcePosition | None:
    path = config_path()
    return SourcePosition(str(path), 1) if path is not None else None


def _webhook(text: str) -> Webhook:
    from fleetfix.notify.webhook import WebhookError, parse_webhook  # noqa: PLC0415

    try:
        return parse_webhook(text, os.environ)
    except WebhookError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _kinds(text: str) -> frozenset[Kind]:
    words = {w.strip().lower() for w in text.split(",") if w.strip()}
    if words == {"all"}:
        return ALL_KINDS
    unknown = sorted(words - set(Kind))
    if unknown or not words:
        raise argparse.ArgumentTypeError(
            f"unknown kind(s) {', '.join(unknown) or '(none given)'}; use a comma list of"
            f" {', '.join(Kind)}, or all"
        )
    return frozenset(Kind(w) for w in words)


def webhook_observers(args: argparse.Namespace) -> list[Notifier]:
    """A Notifier for the run when --webhook was given."""
    if not args.webhook:
        return []
    # Only a run with a webhook loads the notifier (its evidence reads the probes' facts)
    from fleetfix.notify.observer import Notifier  # noqa: PLC0415

    return [
        Notifier(
            args.webhook,
            args.notify_on,
            controller=socket.gethostname(),
            warn=_warn,
            detailed_exitcode=bool(args.detailed_exitcode),
        )
    ]


def _warn(message: str) -> None:
    print(f"WARNING: {' '.join(message.split())}", file=sys.stderr)
