"""A synthetic 1,000-host report, built from the model directly: 16 leaves under 2 spines, 63
racks of 16 hosts, 10 failing hosts of seven verdicts in ten racks, 2 fixed or drained, the
rest healthy. The HTML tests and scripts/report_screenshots.py render it."""

from __future__ import annotations

from fleetfix.report.model import (
    CommandRecord,
    HostReport,
    LeafNode,
    Report,
    SpineNode,
    StepRecord,
)
from fleetfix.verdicts import Verdict, VerdictKind

T0 = 1_714_532_400.0  # 2024-05-01 03:00:00 UTC
HOSTS = 1000
PER_RACK = 16
RACKS_PER_LEAF = 4
SPINES = ("spine-01", "spine-02")
LONG_EVIDENCE = (
    "nvidia-smi -q: GPU 00000000:9B:00.0 has fallen off the bus; dmesg: NVRM: Xid (PCI:0000:9b:00):"
    " 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus. NVRM: GPU 0000:9b:00.0: "
    "GPU is on Board 1653124028943. The same Xid came back after a warm reboot and after a cold "
    "power cycle through the BMC (ipmitool chassis power cycle), so the fault is in the board or "
    "its riser: the node stays drained"
)
"""An evidence line longer than any screen: the page wraps it, whole."""
FAILING: dict[str, tuple[VerdictKind, str, tuple[str, ...], str]] = {
    # host -> (verdict, reason, evidence, next step); each in a rack of its own.
    "gpu0007": (
        VerdictKind.NEEDS_RMA,
        "Xid 79 persists after a cold power cycle: RMA candidate",
        (LONG_EVIDENCE, "reboot done, power_cycle done, slurm_drain done"),
        "open an RMA ticket with the evidence; after NVIDIA's field diagnostic, resume or replace",
    ),
    "gpu0123": (
        VerdictKind.UNREACHABLE,
        "connection refused by 10.0.8.11:22",
        (),
        "check the node's BMC console and network, then run the playbook again",
    ),
    "gpu0250": (
        VerdictKind.NEEDS_HUMAN,
        "NVLink CRC errors on 3 links: no allowed step fixes it",
        ("nvlink -e: link 4 replay errors 1,204",),
        "a human decides: reseat or replace the NVLink bridge",
    ),
    "gpu0333": (
        VerdictKind.HELD,
        "reboot held: the fleet's cap of 2 nodes out is full",
        (),
        "run the playbook again once the cap frees",
    ),
    "gpu0444": (
        VerdictKind.UNHEALTHY,
        "ECC: 12 uncorrectable errors on GPU 3, still in service",
        ("nvidia-smi -q -d ECC: volatile DBE 12",),
        "drain it and run the field diagnostic",
    ),
    "gpu0555": (
        VerdictKind.FAILED,
        "step reload the driver failed: rc=1",
        ("modprobe: FATAL: Module nvidia is in use",),
        "see the step's output below",
    ),
    "gpu0666": (
        VerdictKind.DEFERRED,
        "deferred: job(s) 48213 still running after 5m: the next run finishes the work",
        (),
        "run the playbook again for it once its jobs end (the retry file lists it)",
    ),
    "gpu0777": (
        VerdictKind.LEFT_ALONE,
        "left alone: owned by bob: reseat GPU 4, ticket OPS-1187",
        (),
        "ask the owner named above; fleetfix leaves the node until they resume it",
    ),
    "gpu0888": (
        VerdictKind.NEEDS_RMA,
        "Xid 48 double-bit ECC error: RMA",
        ("dmesg: NVRM: Xid (PCI:0000:1b:00): 48, DBE",),
        "open an RMA ticket with the evidence",
    ),
    "gpu0999": (
        VerdictKind.FAILED,
        "step nccl_tests failed: busbw 112 GB/s below the floor 300 GB/s",
        (),
        "see the step's output below",
    ),
}
OTHERS: dict[str, tuple[VerdictKind, str]] = {
    "gpu0100": (VerdictKind.FIXED, "repaired by reboot"),
    "gpu0500": (VerdictKind.DRAINED, "drained before this run: bios update (alice)"),
}
HEALTHY_REASON = "no fault found by nvidia_smi, slurm_node, xid"


def name(index: int) -> str:
    return f"gpu{index:04d}"


def rack_of(index: int) -> str:
    return f"r{(index - 1) // PER_RACK + 1:02d}"


def leaf_of(index: int) -> str:
    return f"leaf-{(index - 1) // (PER_RACK * RACKS_PER_LEAF) + 1:02d}"


def _host(index: int) -> HostReport:
    host = name(index)
    domains = {"rack": rack_of(index), "leaf": leaf_of(index), "spine": _spine(leaf_of(index))}
    if host in FAILING:
        kind, reason, evidence, next_step = FAILING[host]
        verdict = Verdict(host, kind, reason, evidence, next_step)
        recap = {"ok": 3, "failed": 1}
        return HostReport(host, verdict, recap, domains, steps=(_failed_step(host, reason),))
    kind, reason = OTHERS.get(host, (VerdictKind.HEALTHY, HEALTHY_REASON))
    return HostReport(host, Verdict(host, kind, reason), {"ok": 4}, domains)


def _spine(leaf: str) -> str:
    return SPINES[0] if int(leaf[5:]) <= 8 else SPINES[1]


def _failed_step(host: str, message: str) -> StepRecord:
    command = CommandRecord("nvidia-smi -q", 1, 0.4, stdout="", stderr="GPU is lost", at=T0 + 2)
    return StepRecord(
        host, "check", "sweep", "failed", False, message, 1, 0.4, T0 + 2, T0 + 2.4, (command,)
    )


def _tree() -> tuple[SpineNode, ...]:
    leaves: dict[str, list[str]] = {}
    for index in range(1, HOSTS + 1):
        leaves.setdefault(leaf_of(index), []).append(name(index))
    return tuple(
        SpineNode(
            spine,
            tuple(
                LeafNode(leaf, tuple(hosts), SPINES)
                for leaf, hosts in leaves.items()
                if _spine(leaf) == spine
            ),
        )
        for spine in SPINES
    )


def big_fleet_report() -> Report:
    """The 1,000-host report (a fresh one each call)."""
    return Report(
        run_id="20240501-030000-big1k",
        playbook="playbooks/xid79.yml",
        started=T0,
        finished=T0 + 1800.0,
        check=False,
        outcome="unreachable",
        exit_code=4,
        plays=("Xid 79 remediation",),
        hosts=tuple(_host(index) for index in range(1, HOSTS + 1)),
        tree=_tree(),
    )


def failing_hosts() -> list[str]:
    return sorted(FAILING)


__all__ = ["FAILING", "LONG_EVIDENCE", "OTHERS", "big_fleet_report", "failing_hosts"]
