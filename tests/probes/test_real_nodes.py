"""`fleetfix parse` reads every real capture: each built-in probe's parser over every output
its command printed on a real node (tests/fixtures/samples/real-nodes/<node>/probe-<probe>.txt,
captured by scripts/real-node-check), read as every caller reads output (Probe.read). A
capture parses, or says the node does not have the tool (errors.ToolNotInstalled); never a
plain parse error, which is how issue 18 found 3 of 8 probes unable to read their own output
on a real H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import ToolNotInstalled
from fleetfix.probes import BUILTIN_PROBES, probe_registry
from fleetfix.probes.base import to_data
from tests.probes.cases import SAMPLES

REAL_NODES = SAMPLES / "real-nodes"
CAPTURES = sorted(REAL_NODES.glob("*/probe-*.txt"))
REGISTRY = probe_registry()


def _probe_name(capture: Path) -> str:
    return capture.stem.removeprefix("probe-")


def test_there_are_real_captures_of_the_probes() -> None:
    nodes = {capture.parent.name for capture in CAPTURES}
    assert "h200-sxm-vm-580.159.04" in nodes
    names = {_probe_name(capture) for capture in CAPTURES}
    assert {"nvidia_smi", "topology", "kernel_modules", "nvlink", "xid"} <= names
    assert names <= set(BUILTIN_PROBES), "a capture names no built-in probe"


@pytest.mark.parametrize(
    "capture", CAPTURES, ids=[f"{c.parent.name}/{_probe_name(c)}" for c in CAPTURES]
)
def test_every_real_capture_parses_or_names_a_missing_tool(capture: Path) -> None:
    probe = REGISTRY.get(_probe_name(capture))
    text = capture.read_text(encoding="utf-8", errors="surrogateescape")
    try:
        facts = probe.read(text)
    except ToolNotInstalled as exc:
        assert exc.tool, "a missing tool is named"
        return
    assert to_data(facts) is not None
