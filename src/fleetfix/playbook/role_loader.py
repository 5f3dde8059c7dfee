"""Reading a role at run time: an include_role whose name (or tasks_from, vars_from, ...) is
a template, rendered by the host that reaches it.

The role is read as a literal include_role's is at load (roles.RoleReader): the same search
path, dependencies first, steps named `ROLE : STEP`; each (role, files) is read once per run.
Its handlers come back with its steps, for the play to notify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetfix.errors import PlaybookError, SourcePosition
from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.model import Step
from fleetfix.playbook.steps import StepReader, ValueReader
from fleetfix.playbook.yamlpos import Node, NodeKind

__all__ = ["LoadedRole", "RoleLoader", "RoleRequest", "read_role", "role_loader"]


@dataclass(frozen=True, slots=True)
class RoleRequest:
    """A role as one host's include_role names it, rendered."""

    name: str
    files: tuple[tuple[str, str], ...]
    """(argument, file) for the includes.ROLE_FILES the include gives (an omitted one is
    left out)."""
    playbook_dir: str
    position: SourcePosition
    """The include_role's `name:` (errors point there)."""


@dataclass(frozen=True, slots=True)
class LoadedRole:
    """A role read at run time: its steps (dependencies first) and its handlers."""

    steps: tuple[Step, ...]
    handlers: tuple[Step, ...]
    layers: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    """Its defaults and vars (its dependencies' under its own), for a public include."""


RoleLoader = Callable[[RoleRequest], LoadedRole]
"""Reads a role at run time; raises PlaybookError (the first problem, with its place)."""


def role_loader(catalog: StepCatalog, templar: Templar | None = None) -> RoleLoader:
    """Reads each requested role once: a role included by every host (or every loop item)
    is read once."""
    cache: dict[RoleRequest, LoadedRole] = {}

    def load(request: RoleRequest) -> LoadedRole:
        if request not in cache:
            cache[request] = read_role(request, catalog, templar or Templar())
        return cache[request]

    return load


def read_role(request: RoleRequest, catalog: StepCatalog, templar: Templar) -> LoadedRole:
    """The role's steps and handlers.

    Raises:
        PlaybookError: the first problem in the role (not found, a bad file), with its place.
    """
    errors: list[PlaybookError] = []
    reader = StepReader(catalog, ValueReader(templar, errors), Path(request.playbook_dir))
    named = Node(NodeKind.SCALAR, request.name, request.position, "")
    steps = reader.roles.include_role(request.name, named, dict(request.files))
    if errors:
        raise min(
            errors, key=lambda e: (e.position.line, e.position.column) if e.position else (0, 0)
        )
    return LoadedRole(steps, tuple(reader.roles.handlers), reader.roles.last_read)
