"""AvailabilityLedger: caps per domain, take/release, and canary-first batch plans."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from fleetfix.errors import PlaybookError
from fleetfix.topology.caps import AvailabilityLedger
from fleetfix.topology.graph import Topology


def fleet(racks: int = 4, per_rack: int = 4, racks_per_leaf: int = 2) -> Topology:
    hosts: dict[str, dict[str, Any]] = {}
    for rack in range(racks):
        for slot in range(per_rack):
            hosts[f"n{rack * per_rack + slot + 1:02d}"] = {
                "rack": f"r{rack + 1}",
                "leaf": f"leaf-{rack // racks_per_leaf + 1}",
            }
    return Topology.from_hosts(hosts)


def test_take_and_release_respect_every_cap() -> None:
    ledger = AvailabilityLedger(fleet(), {"rack": 1, "leaf": 2})
    assert ledger.can_take("n01")
    ledger.take("n01")
    assert not ledger.can_take("n01")  # already out
    assert not ledger.can_take("n02")  # rack r1 is at its cap
    assert ledger.full_domains("n02") == [("rack", "r1")]
    assert ledger.can_take("n05")  # rack r2, same leaf: leaf-1 has room for one more
    ledger.take("n05")
    assert ledger.full_domains("n09") == []
    assert not ledger.can_take("n06")  # both rack r2 and leaf-1 full
    assert set(ledger.full_domains("n06")) == {("rack", "r2"), ("leaf", "leaf-1")}
    assert ledger.out_of_service() == {"n01", "n05"}
    with pytest.raises(ValueError, match="exceed max_unavailable_per for rack r1"):
        ledger.take("n02")
    with pytest.raises(ValueError, match="already out"):
        ledger.take("n01")
    ledger.release("n01")
    assert ledger.can_take("n02")
    assert ledger.out_of_service() == {"n05"}
    with pytest.raises(ValueError, match="not out of service"):
        ledger.release("n01")


def test_hosts_without_a_capped_domain_are_not_limited() -> None:
    topo = Topology.from_hosts({"a": {"rack": "r1"}, "b": {}, "c": {}})
    ledger = AvailabilityLedger(topo, {"rack": 1, "pdu": 1})
    for host in ("a", "b", "c"):
        ledger.take(host)
    assert ledger.out_of_service() == {"a", "b", "c"}
    assert ledger.can_take("not-in-topology")


@pytest.mark.parametrize(
    ("caps", "message"),
    [
        ({"rakc": 1}, "unknown domain kind 'rakc'"),
        ({"rack": 0}, "must be a whole number >= 1"),
        ({"rack": True}, "must be a whole number >= 1"),
        ({"rack": "2"}, "must be a whole number >= 1"),
    ],
)
def test_bad_caps_are_playbook_errors(caps: dict[str, Any], message: str) -> None:
    with pytest.raises(PlaybookError, match=message) as caught:
        AvailabilityLedger(fleet(), caps)
    if "rakc" in caps:
        assert caught.value.hint == "did you mean 'rack'?"


def test_plan_canary_first_then_waves() -> None:
    ledger = AvailabilityLedger(fleet(), {"rack": 1, "leaf": 2})
    hosts = fleet().hosts()
    plan = ledger.plan_order(hosts, canaries=1)
    assert plan[0] == ["n01"]
    # 16 hosts, 4 racks of 4, at most one per rack and two per leaf: 2 per leaf * 2 leaves = 4
    # hosts per wave at most, so 15 hosts need at least 4 waves after the canary.
    assert [len(b) for b in plan] == [1, 4, 4, 4, 3]
    assert sorted(h for b in plan for h in b) == sorted(hosts)
    assert plan[1] == ["n02", "n05", "n09", "n13"]


def test_plan_with_several_canaries_and_a_batch_bound() -> None:
    ledger = AvailabilityLedger(fleet(), {"rack": 1})
    plan = ledger.plan_order(fleet().hosts(), canaries=3, max_batch=2)
    assert plan[0] == ["n01", "n05"]  # bounded by max_batch; n02 shares rack r1 with n01
    assert all(len(batch) <= 2 for batch in plan)
    plan = ledger.plan_order(["n01", "n02", "n03"], canaries=3)
    assert plan == [["n01"], ["n02"], ["n03"]]  # one rack: a canary batch cannot hold two


def test_plan_edge_cases() -> None:
    ledger = AvailabilityLedger(fleet(), {"rack": 2})
    assert ledger.plan_order([]) == []
    assert ledger.plan_order(["n01", "n01", "n02"], canaries=0) == [["n01", "n02"]]
    with pytest.raises(ValueError):
        ledger.plan_order(["n01"], canaries=-1)
    with pytest.raises(ValueError):
        ledger.plan_order(["n01"], max_batch=0)
    # Planning does not touch the ledger's state.
    ledger.take("n01")
    assert ledger.plan_order(["n01", "n02"], canaries=0) == [["n01", "n02"]]
    assert ledger.out_of_service() == {"n01"}


def random_fleet(rng: random.Random) -> Topology:
    hosts: dict[str, dict[str, Any]] = {}
    for index in range(rng.randint(1, 60)):
        attrs: dict[str, Any] = {}
        if rng.random() < 0.9:
            attrs["rack"] = f"r{rng.randint(1, 8)}"
        if rng.random() < 0.8:
            attrs["leaf"] = f"l{rng.randint(1, 4)}"
        if rng.random() < 0.5:
            attrs["pdu"] = f"p{rng.randint(1, 3)}"
        hosts[f"h{index}"] = attrs
    return Topology.from_hosts(hosts)


def test_plan_properties_on_random_fleets() -> None:
    """Every host exactly once, every batch within every cap, canaries first, deterministic."""
    for seed in range(300):
        rng = random.Random(seed)
        topo = random_fleet(rng)
        caps = {k: rng.randint(1, 3) for k in ("rack", "leaf", "pdu") if rng.random() < 0.7}
        canaries = rng.randint(0, 3)
        max_batch = rng.choice([None, rng.randint(1, 6)])
        hosts = topo.hosts()
        rng.shuffle(hosts)
        ledger = AvailabilityLedger(topo, caps)
        plan = ledger.plan_order(hosts, canaries=canaries, max_batch=max_batch)
        flat = [h for batch in plan for h in batch]
        assert sorted(flat) == sorted(hosts), seed
        assert all(batch for batch in plan), seed
        if canaries and hosts:
            assert 1 <= len(plan[0]) <= canaries, seed
            assert plan[0][0] == hosts[0], seed
        for batch in plan:
            assert max_batch is None or len(batch) <= max_batch, seed
            load = Counter(d for h in batch for d in ledger.capped_domains(h))
            assert all(count <= caps[kind] for (kind, _), count in load.items()), seed
            # The ledger agrees: the whole batch can be taken at once, then released.
            for host in batch:
                ledger.take(host)
            for host in batch:
                ledger.release(host)
        assert ledger.plan_order(hosts, canaries=canaries, max_batch=max_batch) == plan, seed


def test_ledger_properties_on_random_sequences() -> None:
    """Whatever the order of takes and releases, no domain ever exceeds its cap."""
    for seed in range(200):
        rng = random.Random(seed)
        topo = random_fleet(rng)
        caps = {"rack": rng.randint(1, 2), "leaf": rng.randint(1, 4)}
        ledger = AvailabilityLedger(topo, caps)
        hosts = topo.hosts()
        for _ in range(100):
            host = rng.choice(hosts)
            if host in ledger.out_of_service():
                ledger.release(host)
            elif ledger.can_take(host):
                ledger.take(host)
            load = Counter(d for h in ledger.out_of_service() for d in ledger.capped_domains(h))
            assert all(count <= caps[kind] for (kind, _), count in load.items()), seed
