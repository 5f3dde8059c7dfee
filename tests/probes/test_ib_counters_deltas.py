"""deltas(before, after): how much each port's counters rose between two reads."""

from __future__ import annotations

from pathlib import Path

from fleetfix.probes.ib_counters import PROBE, deltas

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ib-counters"


def _read(values: dict[str, int], ca: str = "mlx5_0", port: int = 1) -> str:
    return "".join(f"{ca}/ports/{port}/counters/{name}:{value}\n" for name, value in values.items())


def test_a_rise_on_one_port_only() -> None:
    before = PROBE.read(
        _read({"symbol_error": 4, "link_downed": 1}) + _read({"symbol_error": 0}, "mlx5_1")
    )
    after = PROBE.read(
        _read({"symbol_error": 54, "link_downed": 1}) + _read({"symbol_error": 0}, "mlx5_1")
    )
    changed = deltas(before, after)
    first, second = changed.ports
    assert (first.ca, first.rise("symbol_error"), first.rise("LinkDownedCounter")) == (
        "mlx5_0",
        50,
        0,
    )
    assert [c.counter for c in first.risen()] == ["symbol_error"]
    assert (second.ca, second.risen(), second.reset) == ("mlx5_1", (), False)
    assert (changed.appeared, changed.vanished) == ((), ())


def test_a_counter_that_went_down_is_a_reset_not_a_negative_rise() -> None:
    before = PROBE.read(_read({"symbol_error": 500, "port_rcv_errors": 9}))
    after = PROBE.read(_read({"symbol_error": 3, "port_rcv_errors": 9}))
    port = deltas(before, after).ports[0]
    assert port.reset is True
    (symbol, rcv) = port.changes
    assert (symbol.reset, symbol.rise, symbol.before, symbol.after) == (True, 3, 500, 3)
    assert (rcv.reset, rcv.rise) == (False, 0)
    assert all(change.rise >= 0 for change in port.changes)


def test_a_saturated_counter_is_flagged() -> None:
    before = PROBE.read(_read({"link_downed": 250}))
    after = PROBE.read(_read({"link_downed": 255}))
    (change,) = deltas(before, after).ports[0].changes
    assert (change.rise, change.saturated) == (5, True)


def test_ports_read_only_once_are_listed() -> None:
    before = PROBE.read(_read({"symbol_error": 1}) + _read({"symbol_error": 1}, "mlx5_2"))
    after = PROBE.read(_read({"symbol_error": 1}) + _read({"symbol_error": 1}, "mlx5_3"))
    changed = deltas(before, after)
    assert [p.ca for p in changed.ports] == ["mlx5_0"]
    assert (changed.appeared, changed.vanished) == ((("mlx5_3", 1),), (("mlx5_2", 1),))


def test_perfquery_captures_match_by_lid_and_port() -> None:
    text = (FIXTURES / "perfquery-x-switch-port-errors.txt").read_text(encoding="utf-8")
    later = text.replace(
        "PortXmitDiscards:................20046", "PortXmitDiscards:................20146"
    )
    port = deltas(PROBE.read(text), PROBE.read(later)).ports[0]
    assert (port.ca, port.lid, port.rise("port_xmit_discards")) == (None, 2052, 100)
    assert port.rise("port_xmit_data") == 0 and port.rise("nonexistent") is None
