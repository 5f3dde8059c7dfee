"""Intra-node topology: a node whose GPU links differ from its peers' is named."""

from __future__ import annotations

from typing import Any

from fleetfix.events import HostStepFinished, RunStarted
from fleetfix.report.collect import ReportCollector
from fleetfix.results import Status, StepResult
from fleetfix.topology import FindingCategory, Topology


def matrix(link: str = "NV18", odd: dict[tuple[str, str], str] | None = None) -> dict[str, Any]:
    gpus = [f"GPU{i}" for i in range(4)]
    rows: dict[str, dict[str, str]] = {a: {b: "X" if a == b else link for b in gpus} for a in gpus}
    for (a, b), value in (odd or {}).items():
        rows[a][b] = rows[b][a] = value
    return {"matrix": rows, "complete": True}


def test_the_odd_node_out_is_named() -> None:
    facts = {
        "n1": matrix(),
        "n2": matrix(),
        "n3": matrix(odd={("GPU1", "GPU2"): "NV16"}),
        "n4": matrix(),
    }
    collector = ReportCollector()
    collector(RunStarted(playbook="p.yml", hosts=tuple(facts), check=False))
    for host, data in facts.items():
        result = StepResult(host, "probe topology", Status.OK, data={"facts": data})
        collector(HostStepFinished(result=result))
    model = "NVIDIA H100 80GB HBM3"
    topology = Topology.from_hosts({h: {"gpu_model": model} for h in facts})
    found = [
        f for f in collector.findings(topology) if f.category is FindingCategory.INTRA_NODE_MISMATCH
    ]
    assert [f.domain for f in found] == ["n3"]
    assert "GPU1-GPU2 NV16 (expected NV18)" in found[0].message


def test_no_expectation_without_a_majority() -> None:
    collector = ReportCollector()
    for host, link in (("n1", "NV18"), ("n2", "NV12")):
        result = StepResult(host, "probe topology", Status.OK, data={"facts": matrix(link)})
        collector(HostStepFinished(result=result))
    topology = Topology.from_hosts({"n1": {}, "n2": {}})
    assert not [
        f for f in collector.findings(topology) if f.category is FindingCategory.INTRA_NODE_MISMATCH
    ]
