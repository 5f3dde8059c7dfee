"""Peer choice for multi-node nccl-tests, and the bandwidth floors per GPU model."""

from __future__ import annotations

from typing import Any

import pytest

from fleetfix.actions.pairs import pick_peer
from fleetfix.knowledge.nccl import floor_for

HOSTS = ["a1", "a2", "a3", "b1", "b2", "c1"]
VARS: dict[str, dict[str, Any]] = {
    "a1": {"leaf": "L1", "spine": "S1"},
    "a2": {"leaf": "L1", "spine": "S1"},
    "a3": {"leaf": "L1", "spine": "S1"},
    "b1": {"leaf": "L2", "spine": "S1"},
    "b2": {"leaf": "L2", "spine": "S1", "t": {"failed": True}},
    "c1": {"leaf": "L3", "spine": "S2", "t": {"failed": False}},
}


def test_same_leaf_is_a_ring() -> None:
    peers = {h: pick_peer(h, HOSTS, VARS, "same_leaf") for h in ("a1", "a2", "a3")}
    assert peers == {"a1": "a2", "a2": "a3", "a3": "a1"}
    assert pick_peer("c1", HOSTS, VARS, "same_leaf") is None  # alone on its leaf


def test_other_leaf_and_spine_avoid_failed_peers() -> None:
    assert VARS[pick_peer("a1", HOSTS, VARS, "other_leaf") or ""]["leaf"] != "L1"
    assert pick_peer("a1", HOSTS, VARS, "other_spine") == "c1"
    assert pick_peer("a1", HOSTS, VARS, "other_leaf", prefer_passed="t") == "c1"
    with pytest.raises(ValueError, match="pair must be one of"):
        pick_peer("a1", HOSTS, VARS, "diagonal")


def test_floors_by_model_and_kind() -> None:
    assert floor_for("NVIDIA H100 80GB HBM3", 8) == 350
    assert floor_for("NVIDIA H100 80GB HBM3", 8, multi_node=True) == 300
    assert floor_for("NVIDIA H100 80GB HBM3", 4) is None
    assert floor_for("Tesla T4", 1) is None
    assert floor_for(None, 8) is None
