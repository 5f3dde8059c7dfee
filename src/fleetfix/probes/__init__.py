"""Built-in probes: read-only commands with pure parsers (see base.py for the contract)."""

from __future__ import annotations

import importlib
from functools import partial
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
    "ib_counters",
    "slurm_node",
    "nccl_tests",
    "dcgm_diag",
)
"""Module names under fleetfix.probes, each defining PROBE of the same name; grep here to find
them all."""


def probe_registry(extra: tuple[Probe[Any], ...] = ()) -> Registry[Probe[Any]]:
    """The built-in probes (each module loaded when its probe is first asked for) plus
    `extra` ones (tests, plugins)."""
    lazy = {name: partial(_builtin, name) for name in BUILTIN_PROBES}
    return Registry("probe", extra, key=lambda p: p.name, lazy=lazy)


def _builtin(name: str) -> Probe[Any]:
    probe: Probe[Any] = importlib.import_module(f"fleetfix.probes.{name}").PROBE
    return probe
