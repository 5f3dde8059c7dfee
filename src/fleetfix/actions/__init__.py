"""Built-in actions: mutating GPU-ops steps that plan commands (see base.py for the contract)."""

from __future__ import annotations

import importlib

from fleetfix.actions.base import Action
from fleetfix.plugins import Registry

BUILTIN_ACTION_MODULES: tuple[str, ...] = (
    "slurm",
    "shm",
    "gpu",
    "driver",
    "node",
    "power",
    "nccl",
    "dcgm",
)
"""Module names under fleetfix.actions, each defining ACTIONS (a tuple)."""


def action_registry(extra: tuple[Action, ...] = ()) -> Registry[Action]:
    """The built-in actions plus `extra` ones (tests, plugins)."""
    builtins: list[Action] = []
    for name in BUILTIN_ACTION_MODULES:
        builtins.extend(importlib.import_module(f"fleetfix.actions.{name}").ACTIONS)
    return Registry("action", [*builtins, *extra], key=lambda a: a.name)
