"""Gates and parameter readers every action shares: is the node busy, what is it called, are
its parameters well formed. What holds its GPU devices is actions/holders.py."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Collection, Mapping
from typing import Any

from fleetfix.actions.base import ActionContext

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(value: Any, default: float) -> float:
    """A duration parameter (number of seconds, or '90s', '15m', '2h', '7d')."""
    if value is None:
        return default
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.match(str(value))
    if match is None:
        raise ValueError(f"not a duration: {value!r} (use seconds or e.g. 15m, 2h)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def flag(params: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = params.get(name, default)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def node_name(ctx: ActionContext) -> str:
    """The Slurm node name: the `node` param, else the inventory's short hostname."""
    explicit = ctx.params.get("node")
    if explicit:
        return str(explicit)
    return str(ctx.vars.get("inventory_hostname_short") or ctx.host.split(".", 1)[0])


def busy_reason(ctx: ActionContext, services: Collection[int] = ()) -> str | None:
    """Why a disruptive action must not touch this node now, or None.

    GPU processes and Slurm allocations both mean someone's job would die; the playbook can
    say otherwise with `allow_busy: true` (and should have a reason to). `services`: PIDs a
    caller knows to be services it stops and starts again (`device_holders`), not jobs."""
    if flag(ctx.params, "allow_busy"):
        return None
    processes = ctx.facts.get("gpu_processes")
    users = [pid for pid in processes.pids if pid not in services] if processes else []
    if users:
        pids = ", ".join(str(p) for p in users[:8])
        return f"GPU processes are running (pids {pids})"
    if processes is not None and not processes.complete and not processes.fuser_ok:
        # On a node whose GPU fell off the bus nvidia-smi cannot list compute apps, but every
        # CUDA process holds /dev/nvidia*: a clean fuser scan alone is enough to say "idle".
        return "cannot tell whether GPU processes are running (process listing incomplete)"
    slurm = ctx.facts.get("slurm_node")
    if slurm is not None and (slurm.allocated or slurm.has_jobs):
        return f"Slurm has jobs on the node (state {slurm.state})"
    return None


def quote_all(words: Any) -> str:
    return " ".join(shlex.quote(str(w)) for w in words)


ParamCheck = Callable[[Any], str | None]
"""A check of one parameter's value: None when fine, else what is wrong."""


def duration(value: Any) -> str | None:
    try:
        seconds(value, 0.0)
    except ValueError as exc:
        return str(exc)
    return None


def number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            float(str(value))
        except ValueError:
            return f"not a number: {value!r}"
    return None


def integer(value: Any) -> str | None:
    if isinstance(value, bool) or not str(value).lstrip("-").isdigit():
        return f"not a whole number: {value!r}"
    return None


def choice(*allowed: str) -> ParamCheck:
    def check(value: Any) -> str | None:
        return None if str(value) in allowed else f"must be one of {', '.join(allowed)}"

    return check


def params_checker(checks: Mapping[str, ParamCheck]) -> Callable[[Mapping[str, Any]], str | None]:
    """One validator for an action's params, from per-parameter checks."""

    def validate(params: Mapping[str, Any]) -> str | None:
        for name, check in checks.items():
            if name in params:
                problem = check(params[name])
                if problem is not None:
                    return f"{name}: {problem}"
        return None

    return validate
