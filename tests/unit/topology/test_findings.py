"""Findings: correlated failures (binomial tail, Bonferroni), stragglers, intra-node links."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest

from fleetfix.topology.findings import (
    FindingCategory,
    binomial_tail,
    correlated_failures,
    held_hosts,
    intra_node_mismatches,
    stragglers,
)
from fleetfix.topology.graph import Topology


def exact_tail(k: int, n: int, p: Fraction) -> Fraction:
    return sum((math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)), Fraction(0))


def test_binomial_tail_matches_exact_arithmetic() -> None:
    for n in (1, 5, 12, 40):
        for k in range(0, n + 2):
            for p in (Fraction(1, 1000), Fraction(1, 7), Fraction(1, 2), Fraction(9, 10)):
                expected = float(exact_tail(k, n, p)) if k <= n else 0.0
                assert binomial_tail(k, n, float(p)) == pytest.approx(
                    expected, rel=1e-9, abs=1e-300
                )


def test_binomial_tail_edges_and_tiny_values() -> None:
    assert binomial_tail(0, 10, 0.3) == 1.0
    assert binomial_tail(3, 10, 0.0) == 0.0
    assert binomial_tail(3, 10, 1.0) == 1.0
    tiny = binomial_tail(27, 28, 5.5 / 965)
    assert 0 < tiny < 1e-55  # in log space it does not underflow to zero


def big_fleet() -> dict[str, dict[str, Any]]:
    """992 nodes: leaves leaf-01..35 with 28 nodes, leaf-36 with 12; two racks per leaf."""
    hosts: dict[str, dict[str, Any]] = {}
    index = 0
    for leaf in range(1, 37):
        for slot in range(28 if leaf < 36 else 12):
            index += 1
            hosts[f"gpu{index:04d}"] = {
                "leaf": f"leaf-{leaf:02d}",
                "spine": "spine-01" if leaf <= 18 else "spine-02",
                "rack": f"r{leaf:02d}{'ab'[slot // 14]}",
            }
    return hosts


def test_the_leaf_07_incident() -> None:
    hosts = big_fleet()
    topo = Topology.from_hosts(hosts)
    leaf7 = topo.members("leaf", "leaf-07")
    failed = set(leaf7[:27]) | {"gpu0001", "gpu0300", "gpu0500", "gpu0700", "gpu0990"}
    findings = correlated_failures(topo, failed, set(hosts))
    assert len(findings) == 1
    finding = findings[0]
    assert finding.message == (
        "27 of 32 failures sit under leaf leaf-07 (27 of 28 nodes there failed; fleet elsewhere "
        "5 of 964): suspect the leaf switch, not the nodes"
    )
    assert (finding.kind, finding.domain) == ("leaf", "leaf-07")
    assert finding.category is FindingCategory.CORRELATED_FAILURE
    assert finding.failed == tuple(leaf7[:27])
    assert finding.members == tuple(leaf7)
    assert finding.p_value is not None and finding.p_value < 1e-40
    assert finding.hold_disruptive
    # 36 leaves, 71 racks, 2 spines; rack r36a holds exactly leaf-36's 12 hosts: one test.
    assert finding.evidence["domains_tested"] == 36 + 71 + 2 - 1
    # Spine-01 holds the 27 too, but leaf-07 explains them: no second suspect.
    assert held_hosts(topo, findings) == set(leaf7)


def test_spread_failures_are_not_a_finding() -> None:
    hosts = big_fleet()
    topo = Topology.from_hosts(hosts)
    failed = {f"gpu{i:04d}" for i in range(1, 992, 31)}  # 32 failures, about one per leaf
    assert correlated_failures(topo, failed, set(hosts)) == []


def test_the_domain_is_left_out_of_its_own_baseline() -> None:
    """24 of 30 failing under the big leaf, none of 10 elsewhere: with the leaf in the baseline
    (p = 24/40) the leaf would look ordinary."""
    hosts = {f"a{i}": {"leaf": "leaf-a"} for i in range(30)}
    hosts.update({f"b{i}": {"leaf": "leaf-b"} for i in range(10)})
    topo = Topology.from_hosts(hosts)
    failed = {f"a{i}" for i in range(24)}
    findings = correlated_failures(topo, failed, set(hosts))
    assert [(f.kind, f.domain) for f in findings] == [("leaf", "leaf-a")]
    assert findings[0].p_value is not None and findings[0].p_value < 1e-20
    assert binomial_tail(24, 30, 24 / 40) * 2 > 0.01  # the naive baseline would miss it


def test_minimum_failures_and_majority_rules() -> None:
    hosts = {f"a{i}": {"leaf": "leaf-a"} for i in range(10)}
    hosts.update({f"b{i}": {"leaf": "leaf-b"} for i in range(200)})
    topo = Topology.from_hosts(hosts)
    considered = set(hosts)
    # Two of two failures under leaf-a: striking but below min_failures.
    assert correlated_failures(topo, {"a0", "a1"}, considered) == []
    assert len(correlated_failures(topo, {"a0", "a1"}, considered, min_failures=2)) == 1
    # Four failures under leaf-a but six elsewhere: leaf-a is not where most failures are.
    elsewhere = {f"b{i}" for i in range(0, 120, 20)}
    assert correlated_failures(topo, {"a0", "a1", "a2", "a3"} | elsewhere, considered) == []


def test_bonferroni_correction_counts_every_domain_tested() -> None:
    # 3 of 6 failing under one leaf, 2 of 94 elsewhere: p is about 3.4e-4 for that leaf alone;
    # significant alone, not once multiplied by the 48 domains tested.
    hosts = {f"x{i}": {"leaf": "leaf-x"} for i in range(6)}
    hosts.update({f"y{i}": {"leaf": f"leaf-{i % 47}"} for i in range(94)})
    topo = Topology.from_hosts(hosts)
    failed = {"x0", "x1", "x2", "y0", "y1"}
    raw = binomial_tail(3, 6, 2.5 / 95)
    assert raw < 0.01 < raw * 48
    assert correlated_failures(topo, failed, set(hosts)) == []
    assert len(correlated_failures(topo, failed, set(hosts), alpha=0.05)) == 1


def test_identical_domains_give_one_finding_naming_both() -> None:
    hosts = {f"a{i}": {"leaf": "leaf-a", "rack": "r-a"} for i in range(8)}
    hosts.update({f"b{i}": {"leaf": f"leaf-b{i % 4}", "rack": f"r-b{i % 4}"} for i in range(40)})
    topo = Topology.from_hosts(hosts)
    findings = correlated_failures(topo, {f"a{i}" for i in range(6)}, set(hosts))
    assert len(findings) == 1
    assert (findings[0].kind, findings[0].domain, findings[0].also) == (
        "leaf",
        "leaf-a",
        ("rack r-a",),
    )
    assert "same hosts as rack r-a" in findings[0].message
    assert held_hosts(topo, findings) == {f"a{i}" for i in range(8)}


def test_failures_outside_considered_are_ignored_and_whole_fleet_domains_skipped() -> None:
    hosts = {f"a{i}": {"leaf": "leaf-a", "pod": "pod-1"} for i in range(8)}
    hosts.update({f"b{i}": {"leaf": "leaf-b", "pod": "pod-1"} for i in range(40)})
    topo = Topology.from_hosts(hosts)
    considered = set(hosts) - {"a0", "a1", "a2", "a3", "a4"}
    failed = {f"a{i}" for i in range(8)}
    found = correlated_failures(topo, failed, considered)
    assert [(f.kind, f.domain) for f in found] == [("leaf", "leaf-a")]
    assert found[0].failed == ("a5", "a6", "a7")
    assert found[0].members == ("a5", "a6", "a7")
    # pod-1 is the whole fleet: nothing outside to compare with, never a finding.
    assert all(f.kind != "pod" for f in found)


def test_a_rack_spanning_a_failed_leaf_is_explained_away() -> None:
    hosts = {f"a{i}": {"leaf": "leaf-a", "rack": "r1"} for i in range(8)}
    hosts.update({f"b{i}": {"leaf": "leaf-b", "rack": "r1" if i < 4 else "r2"} for i in range(60)})
    topo = Topology.from_hosts(hosts)
    findings = correlated_failures(topo, {f"a{i}" for i in range(7)}, set(hosts))
    assert [(f.kind, f.domain) for f in findings] == [("leaf", "leaf-a")]


# -- stragglers ------------------------------------------------------------------------------


def test_stragglers_low_side_only_per_model() -> None:
    busbw = {f"h{i}": 190.0 + (i % 5) for i in range(20)}
    busbw["h3"] = 120.0  # slow H100
    busbw["h4"] = 260.0  # fast is not a fault
    busbw.update({f"a{i}": 95.0 + (i % 3) for i in range(6)})  # A100s are slower: not stragglers
    models = {h: "H100" for h in busbw if h.startswith("h")}
    models.update({h: "A100" for h in busbw if h.startswith("a")})
    found = stragglers(busbw, models)
    assert [f.domain for f in found] == ["h3"]
    assert found[0].category is FindingCategory.STRAGGLER
    assert found[0].evidence["model"] == "H100"
    assert found[0].evidence["z"] < -3.5
    assert "h3: nccl-tests busbw 120.0 GB/s is far below its 19 H100 peers" in found[0].message
    assert not found[0].hold_disruptive


def test_stragglers_when_most_values_are_equal() -> None:
    busbw = dict.fromkeys([f"n{i}" for i in range(9)], 200.0)
    busbw["n9"] = 150.0  # MAD is 0 here: the mean absolute deviation stands in
    assert [f.domain for f in stragglers(busbw, {})] == ["n9"]
    assert stragglers(dict.fromkeys(["a", "b", "c", "d", "e"], 50.0), {}) == []


def test_stragglers_skip_small_groups_and_bad_values() -> None:
    assert stragglers({"a": 200.0, "b": 200.0, "c": 10.0}, {}) == []
    busbw = {f"n{i}": 200.0 + i for i in range(8)}
    busbw.update({"bad": float("nan"), "worse": float("inf"), "zero": 0.0})
    found = stragglers(busbw, {})
    assert [f.domain for f in found] == ["zero"]
    assert stragglers(busbw, {}, threshold=1e9) == []


# -- intra-node topology ---------------------------------------------------------------------


def test_intra_node_mismatch_with_both_matrix_shapes() -> None:
    expected = {("GPU0", "GPU1"): "NV18", ("GPU0", "GPU2"): "NV18", ("GPU1", "GPU2"): "NV18"}
    seen = {
        "gpu001": {("GPU1", "GPU0"): "NV18", ("GPU0", "GPU2"): "NV18", ("GPU1", "GPU2"): "NV18"},
        "gpu002": {
            "GPU0": {"GPU0": "X", "GPU1": "SYS", "GPU2": "NV18"},
            "GPU1": {"GPU0": "SYS", "GPU1": "X"},
        },
        "gpu003": None,
    }
    found = intra_node_mismatches(seen, expected)
    assert [f.domain for f in found] == ["gpu002"]
    assert found[0].category is FindingCategory.INTRA_NODE_MISMATCH
    assert found[0].evidence["pairs"] == [
        {"a": "GPU0", "b": "GPU1", "expected": "NV18", "seen": "SYS"},
        {"a": "GPU1", "b": "GPU2", "expected": "NV18", "seen": "absent"},
    ]
    assert "2 GPU/NIC link(s) differ" in found[0].message
    assert "GPU0-GPU1 SYS (expected NV18)" in found[0].message


def test_intra_node_expected_per_host() -> None:
    expected = {
        "a": {"GPU0": {"GPU1": "NV12"}},
        "b": {("GPU0", "GPU1"): "NV18"},
    }
    seen = {"a": {("GPU0", "GPU1"): "NV12"}, "b": {("GPU0", "GPU1"): "NV12"}, "c": {}}
    found = intra_node_mismatches(seen, expected)
    assert [f.domain for f in found] == ["b"]
    many = {(f"GPU{i}", f"GPU{i + 1}"): "NV18" for i in range(7)}
    found = intra_node_mismatches({"x": {}}, many)
    assert found[0].message.endswith("and 3 more")
