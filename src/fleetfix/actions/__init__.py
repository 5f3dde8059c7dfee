"""Built-in actions: mutating GPU-ops steps that plan commands (see base.py for the contract)."""

from __future__ import annotations

import importlib
from functools import partial

from fleetfix.actions.base import Action
from fleetfix.plugins import Registry

BUILTIN_ACTIONS: dict[str, str] = {
    "slurm_drain": "slurm",
    "slurm_resume": "slurm",
    "slurm_reserve": "slurm",
    "slurm_release": "slurm",
    "clean_shm": "shm",
    "persistence_mode": "gpu",
    "reset_ecc": "gpu",
    "gpu_reset": "gpu",
    "imex_restart": "gpu",
    "reload_driver": "driver",
    "reboot": "node",
    "service": "node",
    "kill_gpu_processes": "node",
    "kill_orphans": "orphans",
    "collect_evidence": "node",
    "power_cycle": "power",
    "nccl_tests": "nccl",
    "dcgm_diag": "dcgm",
}
"""Each built-in action and its module under fleetfix.actions (which lists it in ACTIONS), so a
run loads the modules of the actions its playbook names (issue 21)."""
BUILTIN_ACTION_MODULES: tuple[str, ...] = tuple(dict.fromkeys(BUILTIN_ACTIONS.values()))
"""Module names under fleetfix.actions, each defining ACTIONS (a tuple)."""


def action_registry(extra: tuple[Action, ...] = ()) -> Registry[Action]:
    """The built-in actions (each module loaded when one of its actions is first asked for)
    plus `extra` ones (tests, plugins)."""
    lazy = {name: partial(_builtin, module, name) for name, module in BUILTIN_ACTIONS.items()}
    return Registry("action", extra, key=lambda a: a.name, lazy=lazy)


def _builtin(module: str, name: str) -> Action:
    actions: tuple[Action, ...] = importlib.import_module(f"fleetfix.actions.{module}").ACTIONS
    return next(action for action in actions if action.name == name)
