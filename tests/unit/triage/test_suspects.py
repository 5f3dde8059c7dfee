"""Ranking a job's suspects from what its nodes' probes and its logs say (triage/suspects.py).

Node readings are the probes' facts as data, read from real captures where one shows the fault:
a real H200 node's probes (healthy), a GPU's root port with a fatal PCIe error
(tests/fixtures/kernel-aer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetfix.plain import to_data
from fleetfix.probes import probe_registry
from fleetfix.triage.suspects import (
    IB_BEFORE,
    ORPHANS,
    RECOVER,
    Kind,
    LogSuspect,
    NodeReading,
    Weight,
    fabric_suspects,
    rank,
    remediation,
    with_switches,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REAL = FIXTURES / "samples" / "real-nodes" / "h200-sxm-vm-580.159.04"


def _read(probe: str, path: Path) -> Any:
    return to_data(probe_registry().get(probe).read(path.read_text(encoding="utf-8"), {}))


def _healthy() -> NodeReading:
    return NodeReading(
        probes={
            "nvidia_smi": _read("nvidia_smi", REAL / "nvidia-smi-q-x.txt"),
            "xid": _read("xid", REAL / "dmesg.txt"),
            "gpu_processes": _read("gpu_processes", REAL / "probe-gpu_processes.txt"),
        },
        failures={},
    )


def test_a_job_on_healthy_nodes_has_no_suspect() -> None:
    assert rank({"gpu001": _healthy(), "gpu002": _healthy()}) == []


def test_a_fatal_pcie_error_below_a_gpu_accuses_that_gpu() -> None:
    aer = (
        FIXTURES / "kernel-aer" / "issue-returnn-1500-gpu-root-port-uncorrected-fatal-relative.txt"
    )
    sick = NodeReading({**_healthy().probes, "xid": _read("xid", aer)}, {})
    (suspect,) = rank({"gpu001": _healthy(), "gpu007": sick})
    assert (suspect.kind, suspect.target, suspect.hosts) == (
        Kind.GPU,
        "gpu007 GPU 0000:03:00.0",
        ("gpu007",),
    )
    (evidence,) = suspect.evidence
    assert evidence.source == "probe xid" and "PCIe fatal AER x1 on 0000:00:03.0" in evidence.text
    assert suspect.playbook == RECOVER


def test_an_unreachable_node_and_the_logs_accusing_it_make_one_suspect() -> None:
    readings = {"gpu001": _healthy(), "gpu002": NodeReading({}, {}, unreachable="timed out")}
    logs = [
        LogSuspect(
            "gpu002", "rank 13 never entered SeqNum 9001", 90, "log a:9", "cuda 5", Kind.GPU
        ),
        LogSuspect("gpu001", "root cause: exit -6", 100, "log a:40"),
    ]
    first, second = rank(readings, logs)
    assert (first.kind, first.target, first.score) == (Kind.NODE, "gpu002", Weight.UNREACHABLE + 90)
    assert [e.source for e in first.evidence] == ["unreachable", "log a:9"]
    assert (second.target, second.score, second.playbook) == ("gpu001", 100, RECOVER)
    assert fabric_suspects([first, second]) == {"gpu002"}  # a log alone blames no switch


def test_a_left_over_process_is_a_process_suspect_for_the_orphans_runbook() -> None:
    facts = {
        "processes": [
            {
                "pid": 4242,
                "name": "python3",
                "user": "bob",
                "gpu_bus_id": "00000000:1B:00.0",
                "used_memory_mib": 40960,
                "job_id": 48100,
            },
            {
                "pid": 5151,
                "name": "python3",
                "user": "alice",
                "gpu_bus_id": "00000000:43:00.0",
                "used_memory_mib": 61234,
                "job_id": 48213,
            },
        ],
        "orphan_pids": [4242],
    }
    readings = {"gpu006": NodeReading({"gpu_processes": facts}, {})}
    (suspect,) = rank(readings)
    assert (suspect.kind, suspect.target, suspect.playbook) == (
        Kind.PROCESS,
        "gpu006 pid 4242",
        ORPHANS,
    )
    assert suspect.evidence[0].text == (
        "python3 of bob, job 48100 (ended), holds 40960 MiB on GPU 00000000:1B:00.0: "
        "no running job owns it"
    )
    assert remediation([suspect], "lab.ini") == [
        "fleetfix run playbooks/orphans.yml -i lab.ini --limit gpu006"
    ]


def test_a_switch_suspect_holds_its_nodes_runbooks() -> None:
    readings = {
        h: NodeReading({}, {}, unreachable="refused") for h in ("gpu009", "gpu010", "gpu011")
    }
    readings["gpu001"] = NodeReading({}, {}, unreachable="refused")
    suspects = rank(readings)
    found = with_switches(suspects, [("leaf leaf-02", ["gpu009", "gpu010", "gpu011"], "3 of 3")])
    assert (found[0].kind, found[0].target, found[0].playbook) == (
        Kind.SWITCH,
        "leaf leaf-02",
        None,
    )
    assert remediation(found, "lab.ini") == [
        "fleetfix run playbooks/recover.yml -i lab.ini --limit gpu001"
    ]


def _counters(name: str) -> Any:
    return _read("ib_counters", FIXTURES / "ib-counters" / name)


def test_error_counters_that_rise_between_the_two_reads_accuse_the_link() -> None:
    """A real HCA's counters (perfquery -x, tests/fixtures/ib-counters), read again with more
    symbol errors: past the catalog's per-read threshold (10) it is a link suspect; traffic
    growing is not."""
    first = _counters("perfquery-x-hca-two-ports.txt")
    port = first["ports"][0]
    first = {**first, "ports": [port]}
    later = {**port["counters"], "symbol_error": port["counters"]["symbol_error"] + 12}
    later["port_xmit_data"] = port["counters"]["port_xmit_data"] + 10**9
    second = {**first, "ports": [{**port, "counters": later}]}
    readings = {"gpu004": NodeReading({IB_BEFORE: first, "ib_counters": second}, {})}
    (suspect,) = rank(readings)
    assert (suspect.kind, suspect.target, suspect.playbook) == (
        Kind.LINK,
        "gpu004 lid 1719/1",
        None,
    )
    assert suspect.evidence[0].text.startswith("symbol_error +12 (")
    calm = {**first, "ports": [{**port, "counters": {**port["counters"], "symbol_error": 9}}]}
    assert rank({"gpu004": NodeReading({IB_BEFORE: first, "ib_counters": calm}, {})}) == []
