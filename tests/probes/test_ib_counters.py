"""The ib_counters probe on real captures (tests/fixtures/ib-counters/MANIFEST.md), on cut and
garbage output, and its command run by real shells over fake sysfs trees and a fake perfquery."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes import probe_registry
from fleetfix.probes.base import to_data, verdict
from fleetfix.probes.ib_counters import PROBE, IbCountersFacts, PortCounters, Source
from tests.probes.absent import SHELLS, bare_path, run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ib-counters"
SYSFS = "/sys/class/infiniband"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _ttar_as_grep(ttar: str) -> str:
    """The counters of a ttar'd sysfs tree as the probe's command prints them (`grep -H .`
    run in /sys/class/infiniband): `CA/ports/N/counters/NAME:VALUE`, one line per file."""
    lines = ttar.splitlines()
    out = []
    for index, line in enumerate(lines):
        match = re.match(r"^Path: .*class/infiniband/(.+/ports/\d+/counters/[^/]+)$", line)
        if match:
            assert lines[index + 1] == "Lines: 1", lines[index + 1]
            out.append(f"{match.group(1)}:{lines[index + 2]}\n")
    return "".join(out)


def _cat_loop_as_grep(text: str, ca: str, port: int) -> str:
    """gpud-943's `=== ./NAME ===` / value pairs, as the probe's command prints them."""
    pairs = re.findall(r"^=== \./(\S+) ===\n(.*)$", text, re.M)
    return "".join(f"{ca}/ports/{port}/counters/{name}:{value}\n" for name, value in pairs)


def _one(facts: IbCountersFacts, ca: str | None, port: int) -> PortCounters:
    found = facts.port(ca, port)
    assert found is not None, [(p.ca, p.port) for p in facts.ports]
    return found


# -- perfquery captures -------------------------------------------------------------------------


def test_switch_port_with_discards_relay_errors_and_a_link_down() -> None:
    facts = PROBE.read(_text("perfquery-x-switch-port-errors.txt"))
    assert facts.source is Source.PERFQUERY and facts.complete
    port = _one(facts, None, 1)
    assert port.lid == 2052
    assert port.counters["link_downed"] == 1
    assert port.counters["port_rcv_switch_relay_errors"] == 7
    assert port.counters["port_xmit_discards"] == 20046
    assert port.counters["symbol_error"] == 0
    assert port.counters["port_xmit_wait"] == 41864608
    assert port.counters["port_xmit_data"] == 178791657177235
    assert port.get("PortXmitDiscards") == 20046  # perfquery's spelling reads the same value
    assert port.other == {"QP1Dropped": 0}
    assert port.saturated == ()


def test_two_ports_of_one_hca_are_two_ports() -> None:
    facts = PROBE.read(_text("perfquery-x-hca-two-ports.txt"))
    assert [(p.port, p.lid) for p in facts.ports] == [(1, 1719), (2, 1719)]
    assert _one(facts, None, 1).counters["port_rcv_data"] == 12279028775751
    assert _one(facts, None, 2).counters["port_xmit_wait"] == 36510964
    assert _one(facts, None, 2).counters["multicast_rcv_packets"] == 0
    assert facts.complete


def test_a_pasted_prompt_line_is_not_a_header() -> None:
    facts = PROBE.read(_text("perfquery-x-rhel75-infiniband-diags-16.txt"))
    assert [(p.ca, p.port, p.lid) for p in facts.ports] == [(None, 1, 10)]
    assert set(facts.ports[0].counters.values()) == {0}
    assert len(facts.ports[0].counters) == 21


# -- sysfs captures -----------------------------------------------------------------------------


def test_procfs_tree_three_hcas() -> None:
    facts = PROBE.read(_ttar_as_grep(_text("sysfs-procfs-hfi1-mlx4-mlx5.ttar")))
    assert facts.source is Source.SYSFS and facts.complete
    assert [(p.ca, p.port) for p in facts.ports] == [
        ("hfi1_0", 1),
        ("mlx4_0", 1),
        ("mlx4_0", 2),
        ("mlx5_0", 1),
    ]
    assert _one(facts, "hfi1_0", 1).counters["port_rcv_data"] == 345091702026
    assert _one(facts, "mlx4_0", 2).counters["port_xmit_wait"] == 3846
    mlx5 = _one(facts, "mlx5_0", 1)
    assert mlx5.counters["port_xmit_data"] == 2880761508848
    assert mlx5.counters["unicast_xmit_packets"] == 10907922116
    assert mlx5.counters["vl15_dropped"] == 0  # sysfs spells it VL15_dropped
    assert mlx5.lid is None


def test_node_exporter_tree_no_pma_and_a_saturated_wait_counter() -> None:
    facts = PROBE.read(_ttar_as_grep(_text("sysfs-node-exporter-i40iw-mlx4.ttar")))
    iwarp = _one(facts, "i40iw0", 1)
    assert iwarp.counters == {}
    assert len(iwarp.unavailable) == 17 and "symbol_error" in iwarp.unavailable
    mlx4 = _one(facts, "mlx4_0", 1)
    assert mlx4.counters["port_xmit_discards"] == 5
    assert mlx4.counters["port_rcv_packets"] == 6825908347
    assert mlx4.other == {"port_rcv_discards": 0}
    assert mlx4.saturated == ("port_xmit_wait",)  # 4294967295: the 32-bit counter stopped
    assert set(_one(facts, "mlx4_0", 2).counters) == {
        "link_downed",
        "link_error_recovery",
        "port_xmit_data",
        "port_rcv_data",
        "unicast_xmit_packets",
        "unicast_rcv_packets",
        "multicast_xmit_packets",
        "multicast_rcv_packets",
    }


def test_gpud_dump_with_saturated_link_downed_and_discards() -> None:
    text = _cat_loop_as_grep(_text("sysfs-cat-loop-gpud-943-mlx5_1.txt"), "mlx5_1", 1)
    facts = PROBE.read(text)
    port = _one(facts, "mlx5_1", 1)
    assert port.counters["link_downed"] == 255
    assert port.counters["port_xmit_discards"] == 65535
    assert port.counters["excessive_buffer_overrun_errors"] == 15
    assert port.counters["port_rcv_switch_relay_errors"] == 2
    assert port.counters["port_xmit_data"] == 205143497464492
    assert port.saturated == (
        "link_downed",
        "port_xmit_discards",
        "excessive_buffer_overrun_errors",
        "port_xmit_wait",
    )


def test_absolute_sysfs_paths_read_too() -> None:
    text = (
        "/sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error:12\n"
        "/sys/class/infiniband/mlx5_3/ports/1/counters/link_downed:3\n"
    )
    port = _one(PROBE.read(text), "mlx5_3", 1)
    assert (port.counters["symbol_error"], port.counters["link_downed"]) == (12, 3)


def test_every_capture_is_in_the_manifest() -> None:
    manifest = _text("MANIFEST.md")
    files = sorted(p.name for p in FIXTURES.iterdir() if p.name != "MANIFEST.md")
    assert len(files) >= 5
    for name in files:
        assert f"| {name} |" in manifest, name


# -- bad input ----------------------------------------------------------------------------------


def test_empty_output_is_an_error() -> None:
    with pytest.raises(ProbeParseError, match="empty output"):
        PROBE.read("")


def test_garbage_is_an_error_naming_its_line() -> None:
    with pytest.raises(ProbeParseError, match="not sysfs counters nor perfquery") as info:
        PROBE.read("hello\nworld\n")
    assert info.value.line == 1


def test_a_bad_value_is_an_error() -> None:
    text = "mlx5_0/ports/1/counters/symbol_error:12\nmlx5_0/ports/1/counters/link_downed:lots\n"
    with pytest.raises(ProbeParseError, match="not a counter value") as info:
        PROBE.read(text)
    assert info.value.line == 2


def test_a_stray_line_in_perfquery_output_is_an_error() -> None:
    text = _text("perfquery-x-switch-port-errors.txt").replace(
        "PortRcvErrors:...................0\n", "PortRcvErrors 0\n"
    )
    with pytest.raises(ProbeParseError, match="not a perfquery counter line"):
        PROBE.read(text)


def test_an_unknown_perfquery_header_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="not a per-port perfquery header"):
        PROBE.read("# Port counters: Lid 5 all ports\nSymbolErrorCounter:.....0\n")


def test_cut_sysfs_output_keeps_what_was_read_and_is_incomplete() -> None:
    text = "mlx5_0/ports/1/counters/symbol_error:12\nmlx5_0/ports/1/counters/link_dow"
    facts = PROBE.read(text)
    port = _one(facts, "mlx5_0", 1)
    assert port.counters == {"symbol_error": 12}
    assert (port.complete, facts.complete) == (False, False)


def test_cut_perfquery_output_is_incomplete() -> None:
    full = _text("perfquery-x-switch-port-errors.txt")
    text = full[: full.index("PortXmitDiscards")] + "PortXmitDisc"
    facts = PROBE.read(text)
    assert facts.complete is False
    assert "port_xmit_discards" not in facts.ports[0].counters
    assert facts.ports[0].counters["port_rcv_switch_relay_errors"] == 7


def test_a_header_with_nothing_after_it_is_incomplete() -> None:
    facts = PROBE.read("# Port extended counters: Lid 5 port 1 (CapMask: 0x5300)\n")
    assert (facts.ports[0].complete, facts.complete) == (False, False)


def test_perfquery_failing_before_any_counter_is_an_error() -> None:
    text = "ibwarn: [3641] mad_rpc_open_port: can't open UMAD port ((null):0)\n"
    text += "perfquery: iberror: failed: Failed to open 'NULL' port '0'\n"
    with pytest.raises(ProbeParseError, match="perfquery failed before printing counters"):
        PROBE.read(text)


def test_registered_as_a_builtin_probe() -> None:
    assert probe_registry().get("ib_counters") is PROBE


def test_marker_reads_as_not_installed() -> None:
    with pytest.raises(ToolNotInstalled) as info:
        PROBE.read("### fleetfix not-installed perfquery\n")
    assert info.value.tool == "perfquery"
    assert verdict(PROBE, "### fleetfix not-installed perfquery\n").absent == "perfquery"


# -- the command, run by real shells ------------------------------------------------------------


def _tree(root: Path, values: dict[str, str]) -> None:
    for relative, value in values.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n", encoding="ascii")


@pytest.mark.parametrize("shell", SHELLS)
def test_command_reads_a_sysfs_tree(tmp_path: Path, shell: str) -> None:
    sysfs = tmp_path / "infiniband"
    _tree(
        sysfs,
        {
            "mlx5_0/ports/1/counters/symbol_error": "4",
            "mlx5_0/ports/1/counters/VL15_dropped": "0",
            "mlx5_1/ports/1/counters/link_downed": "2",
        },
    )
    command = PROBE.command({}).replace(SYSFS, shlex.quote(str(sysfs)))
    done = run(command, shell, bare_path(tmp_path))
    assert done.returncode == 0, done
    assert "mlx5_0/ports/1/counters/symbol_error:4\n" in done.stdout
    facts = PROBE.read(done.stdout)
    assert _one(facts, "mlx5_0", 1).counters == {"symbol_error": 4, "vl15_dropped": 0}
    assert _one(facts, "mlx5_1", 1).counters == {"link_downed": 2}


FAKE_IBSTAT = """#!/bin/sh
case "$1" in
  -l) printf 'mlx5_0\\nmlx5_1\\n' ;;
  *) printf "CA '%s'\\n\\tCA type: MT4129\\n\\tNumber of ports: 1\\n" "$1" ;;
esac
"""
FAKE_PERFQUERY = """#!/bin/sh
case "$*" in
  "-x -C mlx5_1 -P 1") exec cat {switch} ;;
  "-x -C mlx5_0 -P 1") exec cat {hca} ;;
  *) echo "ibwarn: [1] plain counters not read by this fake" ;;
esac
"""


@pytest.mark.parametrize("shell", SHELLS)
def test_command_falls_back_to_perfquery_per_port(tmp_path: Path, shell: str) -> None:
    path = bare_path(tmp_path, ("cat", "sed", "printf", "grep"))
    bin_dir = Path(path)
    hca = FIXTURES / "perfquery-x-rhel75-infiniband-diags-16.txt"
    switch = FIXTURES / "perfquery-x-switch-port-errors.txt"
    (bin_dir / "ibstat").write_text(FAKE_IBSTAT, encoding="ascii")
    (bin_dir / "perfquery").write_text(
        FAKE_PERFQUERY.format(switch=shlex.quote(str(switch)), hca=shlex.quote(str(hca))),
        encoding="ascii",
    )
    for tool in ("ibstat", "perfquery"):
        (bin_dir / tool).chmod(0o755)
    command = PROBE.command({}).replace(SYSFS, shlex.quote(str(tmp_path / "no-sysfs")))
    done = run(command, shell, path)
    assert done.returncode == 0, done
    facts = PROBE.read(done.stdout)
    assert [(p.ca, p.port, p.lid) for p in facts.ports] == [("mlx5_0", 1, 10), ("mlx5_1", 1, 2052)]
    assert _one(facts, "mlx5_1", 1).counters["port_xmit_discards"] == 20046
    assert len(facts.errors) == 2 and facts.complete  # ibwarn lines are kept, not fatal


@pytest.mark.parametrize("shell", SHELLS)
def test_command_without_sysfs_nor_perfquery_is_not_installed(tmp_path: Path, shell: str) -> None:
    command = PROBE.command({}).replace(SYSFS, shlex.quote(str(tmp_path / "no-sysfs")))
    done = run(command, shell, bare_path(tmp_path))
    assert (done.returncode, done.stdout) == (0, "### fleetfix not-installed perfquery\n")
    assert verdict(PROBE, done.stdout).absent == "perfquery"


def test_facts_are_plain_data() -> None:
    data = to_data(PROBE.read(_text("perfquery-x-switch-port-errors.txt")))
    assert data["ports"][0]["counters"]["port_xmit_discards"] == 20046
    assert data["source"] == "perfquery"
