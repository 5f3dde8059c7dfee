"""--resume goes on with the interrupted run's scope, or not at all.

The options that choose the hosts and what the steps do (--limit, -e, --tags, --skip-tags,
--check) must be the ones the run started with. A resume that forgot `--limit gpu042` would
otherwise go on over the whole inventory: drain.yml, resumed so, drains the fleet. They are
compared with the command line the journal keeps (secrets masked, and the resume's masked the
same way); one this version cannot read is not compared. And the inventory may have lost hosts
since (a dead node taken out) but not gained any: the resume covers no host the run did not.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from fleetfix.errors import UsageError

SCOPE = (
    ("--limit", "limit"),
    ("-e", "extra_vars"),
    ("--tags", "tags"),
    ("--skip-tags", "skip_tags"),
    ("--check", "check"),
)
"""(flag, argparse destination) of each option a resume must share with its run."""

Scope = dict[str, Any]


def scope_of(args: argparse.Namespace | Mapping[str, Any]) -> Scope:
    """The scope options of parsed arguments, by flag."""
    values = vars(args) if isinstance(args, argparse.Namespace) else args
    return {flag: values.get(key) for flag, key in SCOPE}


def stored_scope(parser: argparse.ArgumentParser, argv: Sequence[str]) -> Scope | None:
    """The scope of a command line the journal stored (argv[0] is the program); None when
    this version's parser cannot read it."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return scope_of(parser.parse_args(list(argv[1:])))
    except SystemExit:
        return None


def refuse_another_scope(run_id: str, then: Scope | None, now: Scope) -> None:
    """Raise UsageError naming every scope option the resume changes."""
    if then is None:
        return
    changed = [
        f"{flag} was {_shown(then[flag])}, now {_shown(now[flag])}"
        for flag in then
        if then[flag] != now[flag]
    ]
    if changed:
        raise UsageError(
            f"cannot resume run {run_id} with other options: {'; '.join(changed)}. Resume it"
            " with the options it ran with (they choose the hosts and what the steps do), or"
            " start a new run"
        )


SHOWN_HOSTS = 5


def refuse_more_hosts(run_id: str, then: Sequence[str] | None, now: Sequence[str]) -> None:
    """Raise UsageError when the resume would cover hosts the run did not (None: the run's
    hosts are not known)."""
    if then is None:
        return
    added = sorted(set(now) - set(then))
    if added:
        more = f" and {len(added) - SHOWN_HOSTS} more" if len(added) > SHOWN_HOSTS else ""
        raise UsageError(
            f"cannot resume run {run_id}: it would cover hosts the run did not:"
            f" {', '.join(added[:SHOWN_HOSTS])}{more}. Resume it with the run's inventory, or"
            " start a new run"
        )


def _shown(value: Any) -> str:
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return " ".join(repr(str(item)) for item in value)
    return repr(str(value))


def resume_command(command_line: Sequence[str], run_id: str | None) -> str:
    """The command that resumes a run, from its stored command line (secrets stay masked:
    `***` is to be typed again)."""
    words = ["fleetfix", *command_line[1:]]
    kept = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--resume":
            skip = True
        elif not word.startswith("--resume="):
            kept.append(word)
    return shlex.join([*kept, "--resume", run_id or "?"])
