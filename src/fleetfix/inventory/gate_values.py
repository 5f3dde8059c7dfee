"""Inventory vars that feed safety gates, checked as the inventory loads.

`gpus` is the GPU count a node must show before it goes back to service (knowledge/gpu_count.py)
and the topology domains (`rack`, `leaf`, ...) are what max_unavailable_per caps and suspect
domains count (topology/graph.py). A typo there (`gpus=eight`, an empty `rack=`) would quietly
turn a gate off, so it is an inventory error with its place instead. A templated value
(`{{ ... }}`) is known only per host at run time and is not checked here.
"""

from __future__ import annotations

import re
from typing import Any

GPU_COUNT_VAR = "gpus"
DOMAIN_VARS: tuple[str, ...] = ("rack", "leaf", "spine", "pod", "nvlink_domain", "rail", "pdu")
"""topology.graph.DOMAIN_KINDS (a test keeps them equal; the inventory does not import the
topology)."""
GATE_VARS = frozenset({GPU_COUNT_VAR, *DOMAIN_VARS})
"""Every var a gate reads: any other var is not checked here."""

_WHOLE_NUMBER = re.compile(r"[0-9]+")


def gate_value_problem(key: Any, value: Any) -> str | None:
    """Why `value` cannot be the var `key` a safety gate reads, or None when it can (or `key`
    feeds no gate)."""
    if key not in GATE_VARS:
        return None
    # The usual values first, at a check each (four gate vars a host: 40,000 checks in a
    # 10,000-host inventory): gpus=8 or rack=7, and a name such as rack=r07.
    if type(value) is int and value >= 1:
        return None
    if type(value) is str and key != GPU_COUNT_VAR and value.strip():
        return None
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return None
    if key == GPU_COUNT_VAR:
        return _gpu_count_problem(value)
    return _domain_problem(key, value)


def _gpu_count_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return _gpus_wanted(value)
    text = str(value).strip()
    if not _WHOLE_NUMBER.fullmatch(text) or int(text) < 1:
        return _gpus_wanted(value)
    return None


def _gpus_wanted(value: Any) -> str:
    return (
        f"gpus must be a positive whole number (the GPUs the node has), got {value!r}:"
        " the GPU-count gate reads it"
    )


def _domain_problem(key: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return f"{key} must not be empty: it names the host's {key} for the topology caps"
    if isinstance(value, dict | list | bool):
        return f"{key} must be a name, got {value!r}"
    return None
