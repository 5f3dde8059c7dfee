"""Options a team's runs share: where metrics go, which webhooks hear about a run, which
extra-vars are secret; each has a config-file setting (fleetfix.config) the option overrides.
Each observer subscribes to the run's events and is finished (its last write made, its last
message delivered) when the run ends, also when it is interrupted or stops because it lost
its journal (then told so first: no RunFinished event comes)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fleetfix.cli.webhook_options import (
    add_webhook_options,
    configured_webhooks,
    webhook_observers,
)
from fleetfix.config import setting_list, setting_text
from fleetfix.events import Event
from fleetfix.journal.db import is_postgres, shown
from fleetfix.playbook.extravars import parse_extra_vars
from fleetfix.secrets import Redactor, redact_argv, secret_values

if TYPE_CHECKING:
    from fleetfix.journal import Journal


class RunObserver(Protocol):
    """A subscriber to a run's events that has work to finish when the run ends."""

    def __call__(self, event: Event) -> None: ...

    def journal_lost(self, reason: str) -> None:
        """The run stopped because it lost its journal (exit 6), so no RunFinished comes:
        record that end (`finish()` follows); never raises."""
        ...

    def finish(self) -> Awaitable[None]:
        """Make the last write, deliver what is pending (bounded in time); never raises."""
        ...


def add_team_options(parser: argparse.ArgumentParser) -> None:
    team = parser.add_argument_group("team")
    team.add_argument(
        "--metrics-file",
        metavar="PATH",
        help="write the run's metrics there for node_exporter's textfile collector (a .prom"
        " file in its --collector.textfile.directory); rewritten every few seconds and at the end",
    )
    team.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME",
        help="an extra var whose value is never stored, shown or reported (repeatable, or"
        " a,b); names containing password, passwd, secret, token, api_key, apikey, credential"
        " or private_key are secret without it",
    )
    add_webhook_options(team)


def secret_names(args: argparse.Namespace) -> frozenset[str]:
    """The extra-vars names given with --secret (each may be a comma list), and the config
    file's `secret_vars`."""
    given = [*args.secret, *setting_list("secret_vars")]
    return frozenset(n.strip() for item in given for n in item.split(",") if n.strip())


def run_redactor(args: argparse.Namespace) -> Redactor:
    """A Redactor holding the values of the run's secret extra vars (see fleetfix.secrets)
    and its webhook URLs."""
    webhooks = {webhook.url for webhook in args.webhook}  # a Slack webhook URL is a credential
    return Redactor(secret_values(args.parsed_extra_vars, secret_names(args)) | webhooks)


def stored_argv(args: argparse.Namespace, argv: Sequence[str], redactor: Redactor) -> list[str]:
    """The command line as the journal keeps it: secret extra-vars values masked, and a DSN
    (`--journal postgresql://user:PASSWORD@host/db`, also `--journal=...`) without its
    password, as messages show it."""
    masked = redact_argv(argv, redactor, secret_names(args), _parse_one)
    return [_without_password(word) for word in masked]


def stored_extra_vars(args: argparse.Namespace, redactor: Redactor) -> list[str]:
    """Each -e value as stored_argv stores it (secrets masked)."""
    return [stored_argv(args, ["-e", value], redactor)[1] for value in args.extra_vars]


def _without_password(word: str) -> str:
    """A DSN word, or the value of a `--option=DSN` word, as `shown()` prints it."""
    if is_postgres(word):
        return shown(word)
    flag, equals, value = word.partition("=")
    if word.startswith("--") and equals and is_postgres(value):
        return f"{flag}={shown(value)}"
    return word


def _parse_one(item: str) -> dict[str, Any]:
    return parse_extra_vars([item], Path.cwd())


def resolve_team_options(args: argparse.Namespace) -> None:
    """Fill the options not given from the config file, checking it before anything runs."""
    if not args.metrics_file:
        args.metrics_file = setting_text("metrics_file")
    if not args.webhook:
        args.webhook = configured_webhooks()
    secret_names(args)


def run_observers(args: argparse.Namespace, journal: Journal) -> list[RunObserver]:
    """The observers the options ask for, in the order they hear each event."""
    observers: list[RunObserver] = []
    if args.metrics_file:
        observers.append(_metrics_file(args, Path(args.metrics_file), journal))
    observers.extend(webhook_observers(args))
    return observers


def tell_journal_lost(observers: Sequence[RunObserver], reason: str) -> None:
    """Tell every observer the run stopped because it lost its journal (`reason`: the error,
    already redacted), before their `finish()`."""
    for observer in observers:
        observer.journal_lost(reason)


def _metrics_file(args: argparse.Namespace, path: Path, journal: Journal) -> RunObserver:
    from fleetfix.metrics import MetricsTextfile, RunMetrics  # noqa: PLC0415 (on request only)

    metrics = RunMetrics(args.playbook, check_changes_exit=args.check and args.detailed_exitcode)
    return MetricsTextfile(path, metrics, out_of_service=journal.out_of_service_since)
