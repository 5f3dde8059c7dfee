"""Built-in probes: read-only commands with pure parsers (see base.py for the contract)."""

from __future__ import annotations

import importlib
from typing import Any

from fleetfix.plugins import Registry
from fleetfix.probes.base import Probe

BUILTIN_PROBES: tuple[str, ...] = (
    "nvidia_smi",
    "gpu_processes",
    "device_holders",
    "nvlink",
    "topology",
    "pci_gpus",
    "xid",
    "kernel_modules",
    "shm",
    "services",
    "ib",
    "slurm_node",
    "nccl_tests",
    "dcgm_diag",
)
"""Module names under fleetfix.probes, each defining PROBE; grep here to find them all."""


def probe_registry(extra: tuple[Probe[Any], ...] = ()) -> Registry[Probe[Any]]:
    """The built-in probes plus `extra` ones (tests, plugins)."""
    modules = (importlib.import_module(f"fleetfix.probes.{name}") for name in BUILTIN_PROBES)
    builtins: list[Probe[Any]] = [module.PROBE for module in modules]
    return Registry("probe", [*builtins, *extra], key=lambda p: p.name)
