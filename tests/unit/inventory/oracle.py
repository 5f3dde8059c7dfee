"""Run ansible-core (the reference implementation) on fixture inventories, many at once.

Each fixture case is a directory of tests/fixtures/inventories/ holding `sources.txt` (one `-i`
source per line, relative to the case; a line with a comma that names no file is a host list),
and optionally `patterns.txt` and `limits.txt` (one host pattern / --limit value per line).
Error cases live in errors/ and are indexed by errors/cases.json.

Ansible runs isolated: no ANSIBLE_* variable from the caller, HOME, ANSIBLE_LOCAL_TEMP and the
working directory in a temporary directory, an empty config file, and the settings that turn
"could not parse this source" from a warning into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetfix.inventory import Inventory

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "fixtures" / "inventories"
ERRORS = FIXTURES / "errors"
VENV_BIN = Path(sys.executable).parent
HELPER = HERE / "ansible_helper.py"
TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Case:
    """One fixture inventory and the patterns to check on it."""

    name: str
    directory: Path
    sources: tuple[str, ...]
    patterns: tuple[str, ...]
    limits: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ErrorCase:
    """An inventory Ansible rejects, with where fleetfix must say the problem is."""

    name: str
    sources: tuple[str, ...]
    file: str | None
    line: int | None
    message: str


@dataclass(frozen=True, slots=True)
class Run:
    """The outcome of one ansible command."""

    returncode: int
    stdout: str
    stderr: str


def _lines(path: Path) -> tuple[str, ...]:
    if not path.exists():
        return ()
    return tuple(line for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def resolve_source(directory: Path, line: str) -> str:
    """A sources.txt line as a path under `directory`, or as-is for a host list."""
    candidate = directory / line
    if "," in line and not candidate.exists():
        return line
    return str(candidate)


def load_cases() -> list[Case]:
    """Every fixture case, sorted by name."""
    cases = []
    for directory in sorted(FIXTURES.iterdir()):
        if not (directory / "sources.txt").exists():
            continue
        sources = tuple(
            resolve_source(directory, line) for line in _lines(directory / "sources.txt")
        )
        cases.append(
            Case(
                name=directory.name,
                directory=directory,
                sources=sources,
                patterns=_lines(directory / "patterns.txt"),
                limits=_lines(directory / "limits.txt"),
            )
        )
    return cases


def load_error_cases() -> list[ErrorCase]:
    """Every error case of errors/cases.json, sorted by name."""
    index: dict[str, dict[str, Any]] = json.loads((ERRORS / "cases.json").read_text())
    return [
        ErrorCase(
            name=name,
            sources=tuple(resolve_source(ERRORS, source) for source in entry["sources"]),
            file=str(ERRORS / entry["file"]) if entry.get("file") else None,
            line=entry.get("line"),
            message=entry["message"],
        )
        for name, entry in sorted(index.items())
    ]


def ansible_env(home: Path) -> dict[str, str]:
    """An environment in which Ansible reads no user config and writes only under `home`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    config = home / "ansible.cfg"
    config.touch()
    env.update(
        HOME=str(home),
        ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
        ANSIBLE_CONFIG=str(config),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_DEPRECATION_WARNINGS="0",
        ANSIBLE_INVENTORY_UNPARSED_FAILED="1",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="1",
    )
    return env


def inventory_args(sources: Sequence[str]) -> list[str]:
    """`-i SOURCE` for every source."""
    args: list[str] = []
    for source in sources:
        args += ["-i", source]
    return args


def run_all(commands: Sequence[Sequence[str]], home: Path) -> list[Run]:
    """Run the commands in parallel (Ansible starts slowly, mostly on one core each)."""
    env = ansible_env(home)

    def run(command: Sequence[str]) -> Run:
        done = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            errors="surrogateescape",
            env=env,
            cwd=home,
            timeout=TIMEOUT,
            check=False,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return list(pool.map(run, commands))


def ansible_inventory(*args: str) -> list[str]:
    """An ansible-inventory command line."""
    return [str(VENV_BIN / "ansible-inventory"), *args]


def pattern_request(case: Case, home: Path) -> list[str]:
    """The command that answers every pattern and limit of `case` with ansible-core."""
    queries = [{"pattern": pattern} for pattern in case.patterns]
    queries += [{"limit": limit} for limit in case.limits]
    request = {"mode": "patterns", "sources": list(case.sources), "queries": queries}
    return helper_command(request, home / f"{case.name}-patterns.json")


def verdicts_request(cases: Sequence[ErrorCase], home: Path) -> list[str]:
    """The command that asks ansible-core whether it accepts each error case."""
    request = {"mode": "verdicts", "cases": {case.name: list(case.sources) for case in cases}}
    return helper_command(request, home / "verdicts.json")


def helper_command(request: dict[str, Any], path: Path) -> list[str]:
    """Write `request` to `path` and return the command that answers it."""
    path.write_text(json.dumps(request))
    return [sys.executable, str(HELPER), str(path)]


def walk_is_ambiguous(inventory: Inventory) -> bool:
    """True when Ansible's order of some group's hosts depends on set iteration order.

    Ansible walks a group's descendants level by level, iterating each level as a set. Where
    two groups of one level both bring unseen children, the order of those children (and of
    their hosts) is arbitrary in Ansible, so only the set of hosts can be compared. A subscript
    on such a group (`pods[1:2]`) even selects different hosts from run to run: fixture
    patterns must not subscript groups whose walk is ambiguous.
    """
    return any(group_walk_is_ambiguous(inventory, name) for name in inventory.groups)


def group_walk_is_ambiguous(inventory: Inventory, name: str) -> bool:
    """True when Ansible's order of the hosts of group `name` depends on set iteration order."""
    seen: set[str] = set()
    level = {name, *inventory.group(name).children}
    while level:
        seen |= level
        brought = {
            tuple(child for child in inventory.group(member).children if child not in seen)
            for member in level
        }
        brought.discard(())
        if len(brought) > 1:
            return True
        level = {child for children in brought for child in children}
    return False
