"""The ib probe against every ibstat-family sample, plus the values runbooks gate on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import verdict
from fleetfix.probes.ib import PROBE, IbFacts, LinkLayer, PhysicalState, PortState, Source
from tests.probes.absent import REAL_NODE, SHELLS, bare_path, run, shell_says
from tests.probes.cases import SAMPLES


def _sample(name: str) -> IbFacts:
    return PROBE.parse((SAMPLES / "ibstat" / name).read_text(encoding="utf-8"))


def test_h100_cx7_down_ports_are_the_disabled_ethernet_ones() -> None:
    facts = _sample("gpud-ibstat-h100-cx7-ndr-some-down.txt")
    assert facts.source is Source.IBSTAT
    assert (len(facts.cas), facts.port_count, facts.active_count) == (12, 12, 9)
    assert [(p.ca, p.port) for p in facts.ports_down] == [
        ("mlx5_2", 1),
        ("mlx5_7", 1),
        ("mlx5_8", 1),
    ]
    assert {p.physical_state for p in facts.ports_down} == {PhysicalState.DISABLED}
    assert {p.link_layer for p in facts.ports_down} == {LinkLayer.ETHERNET}
    ndr = next(ca for ca in facts.cas if ca.name == "mlx5_0")
    assert (ndr.ca_type, ndr.firmware) == ("MT4129", "28.39.1002")
    assert (ndr.ports[0].rate_gbps, ndr.ports[0].base_lid, ndr.ports[0].sm_lid) == (400.0, 75, 334)
    assert facts.complete is True  # no trailing newline, but every field is there


def test_ibpanic_keeps_the_cas_read_and_names_the_failed_device() -> None:
    facts = _sample("gpud-ibstat-a100-cx6-hdr-ibpanic-exit255.txt")
    assert [ca.name for ca in facts.cas] == [f"mlx5_{n}" for n in range(8)]
    assert facts.active_count == 8
    assert facts.failed_cas == ("mlx5_8",)
    assert facts.errors[0].startswith("ibpanic:")
    assert facts.complete is False


def test_redacted_values_read_as_none() -> None:
    facts = _sample("issue-gpud-pr752-ibstat-partial-ibpanic-redacted.txt")
    ca = facts.cas[0]
    assert (ca.name, ca.ca_type, ca.firmware, ca.node_guid) == ("mlx5_7", None, None, None)
    assert ca.ports[0].port_guid is None
    assert ca.ports[0].base_lid == 13305


def test_cut_off_port_is_kept_and_flagged() -> None:
    facts = _sample("issue-mooncake-1999-ibstat-cx7-roce-200-mixed-down-trunc.txt")
    last = facts.cas[-1].ports[0]
    assert (facts.cas[-1].name, last.state, last.complete) == ("mlx5_10", PortState.DOWN, False)
    assert last.link_layer is None
    assert facts.complete is False
    assert [p.ca for p in facts.ports_down] == ["mlx5_10"]


def test_ibwarn_noise_and_trace_prefix_are_skipped() -> None:
    facts = _sample("issue-rdmacore-847-ibstat-mlx4-cx3-with-ibwarn-trunc.txt")
    ca = facts.cas[0]
    assert (ca.name, ca.port_count, len(ca.ports)) == ("mlx4_0", 2, 2)
    assert ca.ports[0].state is PortState.DOWN
    assert ca.ports[1].rate_gbps == 56.0
    assert ca.ports[1].base_lid is None  # `Base lid:` is where the paste stops
    assert facts.complete is False


def test_ibv_devinfo_is_parsed_without_rate() -> None:
    facts = _sample("issue-deepep-60-ibv-devinfo-mixed-cx6-cx7-trunc.txt")
    assert facts.source is Source.IBV_DEVINFO
    first, second = facts.cas
    assert (first.ca_type, first.node_guid) == ("MT4125", "0xa088c20300309a0d")
    assert first.ports[0].state is PortState.DOWN
    assert first.ports[0].rate_gbps is None
    assert (second.ca_type, second.ports) == ("MT4129", ())
    assert facts.complete is False  # mlx5_13 announced a port the paste does not show


def test_ibstatus_fallback_format() -> None:
    facts = _sample("synthetic-ibstatus-3hca-one-polling-down.txt")
    assert facts.source is Source.IBSTATUS
    down = facts.ports_down[0]
    assert (down.ca, down.state, down.physical_state) == (
        "mlx5_1",
        PortState.DOWN,
        PhysicalState.POLLING,
    )
    assert facts.cas[0].ports[0].sm_lid == 0x14E
    assert facts.cas[0].ports[0].rate_gbps == 400.0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("   \n\n", "empty output"),
        ("hello world\nthis is not ibstat\n", "no CA found"),
        ("ibpanic: [1] main: stat of IB device 'mlx5_0' failed\n", "before printing any CA"),
        ("CA 'mlx5_0'\n\tCA type: MT4129\n\tgarbage line\n", "unexpected line"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Exploded\n", "unknown port state"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tPhysical state: Wobbly\n", "unknown physical state"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tLink layer: Token Ring\n", "unknown link layer"),
        ("CA 'mlx5_0'\n\tState: Active\n", "outside a port block"),
        ("CA 'mlx5_0'\n\tPort 1:\n\t\tBase lid: twelve\n", "not a number"),
    ],
)
def test_garbage_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


def test_markdown_quoted_paste_is_unwrapped() -> None:
    raw = (SAMPLES / "ibstat" / "oyanghd-ibstat-mlx4-cx3-fdr56-active.txt").read_text()
    quoted = "".join(f"> {line}" for line in raw.splitlines(keepends=True))
    assert PROBE.parse(quoted) == PROBE.parse(raw)


def test_command_prefers_ibstat_and_keeps_stderr() -> None:
    assert PROBE.command({}) == (
        "if command -v ibstat >/dev/null 2>&1; then ibstat 2>&1; "
        "elif command -v ibstatus >/dev/null 2>&1; then ibstatus 2>&1; "
        "else echo '### fleetfix not-installed ibstat'; fi"
    )
    assert "ibstat 'mlx5_0; rm' 2>&1" in PROBE.command({"ca": "mlx5_0; rm"})


def test_the_real_node_without_infiniband_has_ibstat_not_installed() -> None:
    parsed = verdict(PROBE, (REAL_NODE / "probe-ib.txt").read_text(encoding="utf-8"))
    assert (parsed.absent, parsed.facts) == ("ibstat", None)
    assert parsed.error is not None and "ibstat is not installed on this node" in parsed.error


@pytest.mark.parametrize("shell", SHELLS)
def test_the_command_on_a_node_without_ibstat_says_not_installed(
    shell: str, tmp_path: Path
) -> None:
    done = run(PROBE.command({}), shell, bare_path(tmp_path))
    assert (done.returncode, done.stdout) == (0, "### fleetfix not-installed ibstat\n")
    with pytest.raises(ToolNotInstalled) as raised:
        PROBE.parse(done.stdout)
    assert raised.value.tool == "ibstat"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("tool", ["ibstat", "ibstatus"])
def test_a_shells_command_not_found_is_not_installed(shell: str, tool: str) -> None:
    with pytest.raises(ToolNotInstalled, match="ib: ibstat is not installed on this node"):
        PROBE.parse(shell_says(shell, tool))


def test_not_found_naming_another_tool_is_not_read_as_not_installed() -> None:
    with pytest.raises(ProbeParseError, match="no CA found") as raised:
        PROBE.parse("bash: line 1: ibstatx: command not found\n")
    assert not isinstance(raised.value, ToolNotInstalled)


def _last_record_cuts(text: str) -> list[int]:
    """Every place to cut `text` inside its last CA record, from its `CA '...'` line on."""
    start = text.index("\n", text.rindex("CA '"))
    return list(range(start, len(text)))


@pytest.mark.parametrize(
    "name",
    ["gpud-ibstat-h100-cx7-ndr-some-down.txt", "oyanghd-ibstat-mlx4-cx3-fdr56-active.txt"],
)
def test_real_output_cut_anywhere_in_its_last_record_is_truncated(name: str) -> None:
    text = (SAMPLES / "ibstat" / name).read_text(encoding="utf-8").rstrip("\n")
    whole = PROBE.parse(text)
    assert (whole.complete, whole.truncated) == (True, False)
    for cut in _last_record_cuts(text):
        facts = PROBE.parse(text[:cut])
        assert (facts.complete, facts.truncated) == (False, True), repr(text[:cut][-40:])
        assert [ca.name for ca in facts.cas] == [ca.name for ca in whole.cas]


def test_a_cut_inside_a_ca_header_keeps_the_cas_before_it() -> None:
    text = (SAMPLES / "ibstat" / "gpud-ibstat-h100-cx7-ndr-some-down.txt").read_text()
    facts = PROBE.parse(text[: text.rindex("CA '") + len("CA 'mlx")])
    assert [ca.name for ca in facts.cas][-1] == "mlx5_8"
    assert (facts.truncated, facts.complete) == (True, False)


def test_a_ca_cut_before_its_port_count_is_incomplete() -> None:
    text = (SAMPLES / "ibstat" / "gpud-ibstat-h100-cx7-ndr-some-down.txt").read_text()
    cut = text[: text.index("\tNumber of ports", text.rindex("CA '"))]  # ends "CA type: MT4129\n"
    facts = PROBE.parse(cut)
    last = facts.cas[-1]
    assert (last.name, last.ca_type, last.ports, last.complete) == ("mlx5_9", "MT4129", (), False)
    assert all(ca.complete for ca in facts.cas[:-1])
    assert (facts.truncated, facts.complete) == (True, False)


def test_a_value_cut_at_the_end_is_the_cut_not_garbage() -> None:
    text = (SAMPLES / "ibstat" / "oyanghd-ibstat-mlx4-cx3-fdr56-active.txt").read_text()
    body = text.rstrip("\n")
    for cut in (body[: -len("niBand")], body[: -len(" InfiniBand")]):  # `Infi`, `Link layer:`
        port = PROBE.parse(cut).cas[0].ports[0]
        assert (port.link_layer, port.complete) == (None, False)
    with pytest.raises(ProbeParseError, match="unknown link layer"):
        PROBE.parse(body[: -len("niBand")] + "\n")  # a whole line that reads `Infi` is garbage
