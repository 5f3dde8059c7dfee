"""The InfiniBand port counter table: every counter the probe names is explained, thresholds
behave, and a broken table is refused with a clear message."""

from __future__ import annotations

import pytest

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge.ib_counters import (
    Threshold,
    explain,
    ib_counter_catalog,
    load_ib_counter_catalog,
    thresholds,
)
from fleetfix.knowledge.xid import Severity
from fleetfix.probes.ib_counters import COUNTERS


def test_every_counter_the_probe_names_is_explained_under_both_names() -> None:
    catalog = ib_counter_catalog()
    assert set(catalog.entries) == {spec.name for spec in COUNTERS}
    for spec in COUNTERS:
        by_sysfs, by_perfquery = explain(spec.name), explain(spec.perfquery)
        assert by_sysfs is not None and by_sysfs is by_perfquery, spec
    assert explain("VL15_dropped") is explain("vl15_dropped")
    assert explain("QP1Dropped") is None


def test_what_the_operator_reads_for_the_physical_link_counters() -> None:
    symbol = explain("SymbolErrorCounter")
    assert symbol is not None
    assert "physical lanes" in symbol.meaning and "cable" in symbol.action
    downed = explain("link_downed")
    assert downed is not None and downed.severity is Severity.CRITICAL
    assert "flapping" in downed.meaning.lower() or "flapping" in downed.action.lower()
    relay = explain("PortRcvSwitchRelayErrors")
    assert relay is not None and "benign" in relay.action and relay.severity is Severity.INFO
    discards = explain("port_xmit_discards")
    assert discards is not None and "congest" in discards.meaning


def test_default_thresholds() -> None:
    limits = thresholds()
    assert limits["link_downed"].exceeded(1)
    assert not limits["symbol_error"].exceeded(9)
    assert limits["symbol_error"].exceeded(10)
    assert not limits["port_xmit_data"].exceeded(10**15, 1.0)
    assert not limits["port_rcv_switch_relay_errors"].exceeded(999, 3600.0)
    assert limits["port_rcv_switch_relay_errors"].exceeded(1001, 3600.0)


def test_a_short_window_is_not_extrapolated_to_an_hour() -> None:
    limit = Threshold(per_read=None, per_hour=100)
    assert not limit.exceeded(50, 60.0)  # 50 in a minute is not "3000 an hour"
    assert limit.exceeded(101, 60.0)
    assert limit.exceeded(201, 7200.0) and not limit.exceeded(199, 7200.0)
    assert not limit.exceeded(10**6)  # no time given, no rate


BASE = """
version: "1"
source: test
counters:
  - name: symbol_error
    perfquery: SymbolErrorCounter
    title: Symbol errors
    meaning: m
    action: a
    severity: warning
    per_read: 10
    per_hour: 120
    source: ibta
"""


def test_the_minimal_table_loads() -> None:
    catalog = load_ib_counter_catalog(BASE)
    assert catalog.get("SymbolErrorCounter") is catalog.get("symbol_error")
    assert catalog.entries["symbol_error"].threshold == Threshold(10, 120.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("severity: warning", "severity: loud"), "unknown severity 'loud'"),
        (("per_read: 10", "per_read: -1"), "'per_read' must be a count >= 0 or null"),
        (("    per_hour: 120\n", ""), "'per_hour' is missing"),
        (("title: Symbol errors", "title: ''"), "'title' must be non-empty text"),
        (("counters:", "counter:"), "'counters' must be a non-empty list"),
    ],
)
def test_a_broken_table_is_refused(change: tuple[str, str], message: str) -> None:
    with pytest.raises(KnowledgeError, match=message):
        load_ib_counter_catalog(BASE.replace(*change))


def test_a_counter_listed_twice_is_refused() -> None:
    twice = BASE + BASE.split("counters:\n", 1)[1]
    with pytest.raises(KnowledgeError, match="listed twice"):
        load_ib_counter_catalog(twice)
