"""The probe contract's one way from output to facts: terminal escapes stripped once, for every
probe, and the step's parameters handed to a parser that reads them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes import probe_registry
from fleetfix.probes.base import Probe, verdict
from fleetfix.probes.text import strip_terminal_escapes
from tests.probes.cases import SAMPLES

H200 = SAMPLES / "real-nodes" / "h200-sxm-vm-580.159.04"


def _echo(text: str) -> str:
    return text


def _with_params(text: str, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    return text, dict(params)


ECHO: Probe[str] = Probe(name="echo", summary="", command=lambda _: "true", parse=_echo)
PARAMS: Probe[Any] = Probe(
    name="params",
    summary="",
    command=lambda _: "true",
    parse=lambda text: (text, {}),
    parse_with=_with_params,
)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        # nvidia-smi topo -m into a pipe (the real H200 capture's header row)
        ("\t\x1b[4mGPU0\tCPU Affinity\x1b[0m\n", "\tGPU0\tCPU Affinity\n"),
        ("\x1b[1;31mred\x1b[m plain", "red plain"),  # SGR with parameters, and a bare reset
        ("\x1b(B\x1b[mreset", "reset"),  # `tput sgr0`: a charset selection, then SGR
        ("a\x1b]0;node03: ~\x07b", "ab"),  # OSC window title ended by BEL
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink ended by ST
        ("\x1b[2K\x1b[1Gline", "line"),  # erase line, cursor to column 1
        ("no escape at all\n", "no escape at all\n"),
    ],
)
def test_terminal_escapes_are_stripped(raw: str, clean: str) -> None:
    assert strip_terminal_escapes(raw) == clean
    assert ECHO.read(raw) == clean


def test_text_without_escape_is_returned_as_it_is() -> None:
    text = "GPU0\t X \t0-15\n"
    assert strip_terminal_escapes(text) is text


def test_every_probe_reads_through_the_escapes() -> None:
    """The real H200 topology capture (ANSI header) reads as the same text without them."""
    raw = (H200 / "probe-topology.txt").read_text(encoding="utf-8")
    topology = probe_registry().get("topology")
    assert "\x1b[4m" in raw
    assert topology.read(raw) == topology.read(raw.replace("\x1b[4m", "").replace("\x1b[0m", ""))
    with pytest.raises(ProbeParseError, match="is not a device column"):
        topology.parse(raw)  # the bare parser sees the escapes: read() is the way in


def test_params_reach_a_parser_that_reads_them() -> None:
    assert PARAMS.read("out", {"expected_gpus": 8}) == ("out", {"expected_gpus": 8})
    bound = PARAMS.bind({"expected_gpus": 4})
    assert bound.read("out") == ("out", {"expected_gpus": 4})
    assert bound.read("out", {}) == ("out", {})  # given params win over the bound ones
    assert PARAMS.read("out") == ("out", {})
    assert ECHO.bind({"x": 1}).read("\x1b[4mout\x1b[0m") == "out"


def test_bind_leaves_the_registered_probe_alone() -> None:
    params = {"expected_gpus": 2}
    bound = PARAMS.bind(params)
    params["expected_gpus"] = 3  # the caller's dict changing later changes nothing
    assert dict(bound.bound) == {"expected_gpus": 2}
    assert dict(PARAMS.bound) == {}


def test_verdict_reads_with_params_and_says_what_failed() -> None:
    ok = verdict(PARAMS, "\x1b[1mout\x1b[0m", {"a": 1})
    assert (ok.facts, ok.data, ok.error) == (("out", {"a": 1}), ["out", {"a": 1}], None)

    def refuse(text: str) -> str:
        raise ProbeParseError("refuse", "not my output", text)

    def absent(text: str) -> str:
        raise ToolNotInstalled("absent", "dcgmi", text)

    failed = verdict(Probe("refuse", "", lambda _: "", refuse), "x")
    assert failed.facts is None and failed.error is not None
    assert re.search("not my output", failed.error) and failed.absent is None
    missing = verdict(Probe("absent", "", lambda _: "", absent), "x")
    assert (missing.facts, missing.absent) == (None, "dcgmi")
