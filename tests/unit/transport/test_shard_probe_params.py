"""What a host shard's request says about the probe to parse with: its name and the step's
parameters, so the worker reads the output as the controller would (issue 18)."""

from __future__ import annotations

import pickle
from pathlib import Path

from fleetfix.probes import probe_registry
from fleetfix.results import CommandResult
from fleetfix.transport.shard_worker import parse_where_run
from fleetfix.transport.shards import probe_call

H200 = Path(__file__).parents[2] / "fixtures" / "samples" / "real-nodes" / "h200-sxm-vm-580.159.04"
SMI = probe_registry().get("nvidia_smi")


def test_a_request_carries_the_bound_parameters() -> None:
    call = probe_call(SMI.bind({"expected_gpus": 2}))
    assert call == ("nvidia_smi", {"expected_gpus": 2})
    assert pickle.loads(pickle.dumps(call)) == call
    assert probe_call(SMI) == ("nvidia_smi", {})


def test_parameters_that_cannot_cross_leave_the_parse_to_the_controller() -> None:
    assert probe_call(SMI.bind({"expected_gpus": lambda: 2})) is None


def test_the_worker_reads_with_the_steps_parameters() -> None:
    xml = (H200 / "probe-nvidia_smi.txt").read_text(encoding="utf-8")
    result = CommandResult("nvidia-smi -q -x", 0, xml, "")
    name, params = probe_call(SMI.bind({"expected_gpus": 2})) or ("", {})
    parsed = parse_where_run(probe_registry().get(name), result, params).parsed
    assert parsed is not None and parsed.error is None
    assert (parsed.data["expected_gpus"], parsed.data["count_ok"]) == (2, False)
    plain = parse_where_run(SMI, result).parsed
    assert plain is not None and plain.data["count_ok"] is None


def test_the_worker_strips_terminal_escapes() -> None:
    topo = (H200 / "probe-topology.txt").read_text(encoding="utf-8")
    parsed = parse_where_run(
        probe_registry().get("topology"), CommandResult("nvidia-smi topo -m", 0, topo, "")
    ).parsed
    assert parsed is not None and parsed.error is None
    assert parsed.data["devices"] == ["GPU0"]
