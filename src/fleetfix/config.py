"""The site's configuration file: settings every run on a controller shares (the team's
journal, metrics file, webhooks, secret extra-vars), so a timer, two on-call engineers and a
maintenance window all use the same ones without repeating options.

The file is TOML: `$FLEETFIX_CONFIG` if set, else /etc/fleetfix/fleetfix.toml if it exists.
Command-line options win over it; environment variables named in each option's help win
over it too. Example (docs/team.md):

    journal = "postgresql://fleetfix@db.example.org/fleetfix"   # password from ~/.pgpass
    metrics_file = "/var/lib/node_exporter/textfile/fleetfix.prom"
    webhooks = ["slack:https://hooks.slack.com/services/T000/B000/XXXX"]
    secret_vars = ["bmc_password"]
"""

from __future__ import annotations

import os
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from fleetfix.errors import InputError, SourcePosition

SYSTEM_CONFIG = Path("/etc/fleetfix/fleetfix.toml")
KNOWN = frozenset({"journal", "metrics_file", "webhooks", "secret_vars"})


def config_path() -> Path | None:
    chosen = os.environ.get("FLEETFIX_CONFIG")
    if chosen:
        return Path(chosen)
    return SYSTEM_CONFIG if SYSTEM_CONFIG.is_file() else None


@cache
def _load(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read the config file: {exc.strerror}", _at(path)) from exc
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"at line (\d+), column (\d+)", str(exc))
        line, column = (int(where[1]), int(where[2])) if where else (1, 1)
        reason = re.sub(r" \(at line .*\)$", "", str(exc))
        raise InputError(f"not valid TOML: {reason}", _at(path, line, column)) from exc
    unknown = sorted(set(values) - KNOWN)
    if unknown:
        line = next(
            (n for n, text in enumerate(text.splitlines(), 1) if text.startswith(unknown[0])), 1
        )
        raise InputError(
            f"unknown setting {unknown[0]!r} (known: {', '.join(sorted(KNOWN))})",
            _at(path, line),
        )
    return values


def _at(path: Path, line: int = 1, column: int = 1) -> SourcePosition:
    return SourcePosition(str(path), line, column)


def setting(name: str) -> Any:
    """The config file's value for `name`, or None."""
    return _load(config_path()).get(name)


def setting_text(name: str) -> str | None:
    """A setting that must be a string (a path, a DSN)."""
    value = setting(name)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{name} must be a string, not {type(value).__name__}", _where())
    return value


def setting_list(name: str) -> list[str]:
    """A setting that is a list of strings (one string is a list of one)."""
    value = setting(name)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise InputError(f"{name} must be a string or a list of strings", _where())


def _where() -> SourcePosition | None:
    path = config_path()
    return _at(path) if path is not None else None
