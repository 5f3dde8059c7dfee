"""Choosing an nccl-tests peer by topology: same leaf, another leaf, another spine.

Pairs under one leaf exercise the leaf switch; a pair across leaves (or spines) with a peer that
already passed tells a bad node from a bad link: a node that fails with every partner is the
problem, a node that only fails with its leaf-mates is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PAIR_MODES = ("same_leaf", "other_leaf", "other_spine")


def pick_peer(
    host: str,
    hosts: Sequence[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    mode: str,
    prefer_passed: str | None = None,
) -> str | None:
    """The peer for `host` among `hosts` (the play's active hosts), or None if there is none.

    same_leaf: the next host on the same leaf, in name order, wrapping round (a ring, so every
    host is some host's peer). other_leaf/other_spine: a host on a different leaf/spine, spread
    by the host's position so one peer is not everyone's. With `prefer_passed` (a register
    name), peers whose registered result failed are passed over.
    """
    if mode not in PAIR_MODES:
        raise ValueError(f"pair must be one of {', '.join(PAIR_MODES)}")
    mine = hostvars.get(host, {})
    key = "spine" if mode == "other_spine" else "leaf"
    same = mode == "same_leaf"
    candidates = sorted(
        h for h in hosts if h != host and (hostvars.get(h, {}).get(key) == mine.get(key)) == same
    )
    if prefer_passed:
        candidates = [h for h in candidates if not _failed(hostvars.get(h, {}), prefer_passed)]
    if not candidates:
        return None
    if same:
        later = [h for h in candidates if h > host]
        return later[0] if later else candidates[0]
    return (
        candidates[sorted(hosts).index(host) % len(candidates)] if host in hosts else candidates[0]
    )


def _failed(vars_of: Mapping[str, Any], register: str) -> bool:
    result = vars_of.get(register)
    return not isinstance(result, Mapping) or bool(result.get("failed", True))
