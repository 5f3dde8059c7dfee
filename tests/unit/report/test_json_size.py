"""The JSON report at 1,000 hosts: compact by default (at most 5 KB a host), steps on request.

The fleet is built event by event like the demo's xid79 run: most hosts read nvidia-smi, Slurm
and the Xid log and are healthy; every tenth is drained, rebooted and resumed (fixed), every
fiftieth ends drained for an RMA. Outputs and commands are as long as the lab's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleetfix.errors import SourcePosition
from fleetfix.events import (
    ActionTaken,
    CommandRan,
    Event,
    HostStepFinished,
    HostStepStarted,
    PlayStarted,
    RunFinished,
    RunStarted,
)
from fleetfix.report.collect import ReportCollector
from fleetfix.report.json import render_json, schema_path
from fleetfix.report.model import Report
from fleetfix.results import CommandResult, HostStats, RunResult, Status, StepResult
from fleetfix.verdicts import Verdict, VerdictKind
from tests.unit.report.schema_check import validate

HOSTS = [f"gpu{n:04d}" for n in range(1, 1001)]
BUDGET = 5 * 1024
T0 = 1_714_532_400.0
NVIDIA_SMI_Q = "\n".join(
    f"    GPU 0000:{i:02X}:00.0  Volatile ECC {i}  Retired pages 0" for i in range(120)
)
SCONTROL = (
    "NodeName={host} Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 CPULoad=0.05\n"
    "   AvailableFeatures=h100,ib Gres=gpu:h100:8 NodeAddr={host} NodeHostName={host}\n"
    "   State=IDLE ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
    "   Partitions=gpu BootTime=2024-04-30T01:00:00 SlurmdStartTime=2024-04-30T01:01:00\n"
)
LEASE_SCRIPT = "set -f\nroot=/var/lib/fleetfix; lease=/var/lib/fleetfix/lease\n" + "x=1; " * 400
READS = [
    ("read nvidia-smi", "nvidia-smi --query-gpu=index,name,uuid,ecc.errors --format=csv",
     "\n".join(f"{i}, NVIDIA H100 80GB HBM3, GPU-{i:08x}-aaaa-bbbb, 0" for i in range(8))),
    ("read the Slurm node", "scontrol show node $(hostname -s)", SCONTROL),
    ("read the Xid log", "dmesg -T | grep -i xid | tail -n 50", ""),
]  # fmt: skip
REPAIR = [
    ("drain in Slurm and wait for jobs to leave", "slurm_drain",
     [LEASE_SCRIPT, "scontrol update NodeName={host} State=DRAIN Reason='fleetfix: xid79'"]),
    ("keep evidence", "collect_evidence", ["dmesg -T | tail -n 500", "nvidia-smi -q"]),
    ("reboot (restart bare metal)", "reboot", ["cat /proc/sys/kernel/random/boot_id", "reboot"]),
    ("validate", None, ["nvidia-smi -q", "dcgmi diag -r 1"]),
    ("resume in Slurm", "slurm_resume", ["scontrol update NodeName={host} State=RESUME"]),
]  # fmt: skip


class Fleet:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.results: list[StepResult] = []
        self.clock = T0

    def at(self) -> float:
        self.clock += 0.001
        return self.clock

    def step(
        self, host: str, name: str, commands: list[tuple[str, str]], action: str | None
    ) -> None:
        self.events.append(HostStepStarted(host=host, step=name, at=self.at()))
        ran = []
        for command, stdout in commands:
            output = CommandResult(command.format(host=host), 0, stdout, "", 0.2)
            ran.append(output)
            self.events.append(CommandRan(host=host, step=name, result=output, at=self.at()))
        if action is not None:
            self.events.append(
                ActionTaken(host=host, step=name, action=action, failed=False, at=self.at())
            )
        status = Status.CHANGED if action else Status.OK
        result = StepResult(host, name, status, changed=bool(action), commands=tuple(ran))
        self.results.append(result)
        self.events.append(HostStepFinished(result=result, at=self.at()))

    def host(self, index: int, host: str) -> Verdict:
        for name, command, stdout in READS:
            self.step(host, name, [(command, stdout)], None)
        if index % 10:
            return Verdict(host, VerdictKind.HEALTHY, "no fault found by nvidia_smi, slurm_node")
        done = []
        for name, action, commands in REPAIR:
            self.step(host, name, [(c, NVIDIA_SMI_Q) for c in commands], action)
            done += [action] if action else []
        if index % 50 == 0:
            why = "fleetfix: xid79; persists after a cold power cycle; RMA candidate: run the field"
            evidence = (f"mark the node failed: Xid 79 not fixed on {host}: left drained",)
            next_step = "open an RMA ticket with the evidence (fleetfix report RUN)"
            return Verdict(host, VerdictKind.NEEDS_RMA, why, evidence, next_step, tuple(done))
        return Verdict(host, VerdictKind.FIXED, "repaired by reboot", actions=tuple(done))

    def build(self) -> list[Event]:
        self.events.append(
            RunStarted(
                playbook="playbooks/xid79.yml", hosts=tuple(HOSTS), check=False, at=self.at()
            )
        )
        position = SourcePosition("playbooks/xid79.yml", 2, 3)
        self.events.append(
            PlayStarted(name="xid79", hosts=tuple(HOSTS), position=position, at=self.at())
        )
        verdicts = {host: self.host(index, host) for index, host in enumerate(HOSTS, 1)}
        stats: dict[str, HostStats] = {}
        for result in self.results:
            stats.setdefault(result.host, HostStats()).count(result)
        run = RunResult(stats=stats, results=self.results, verdicts=verdicts)
        self.events.append(RunFinished(result=run, at=self.at()))
        return self.events


@pytest.fixture(scope="module")
def fleet_report() -> Report:
    collector = ReportCollector(run_id="20240501-030000-big")
    for event in Fleet().build():
        collector(event)
    return collector.model()


def test_compact_json_is_at_most_5_kb_a_host(fleet_report: Report) -> None:
    text = render_json(fleet_report)
    per_host = len(text.encode("utf-8")) / len(HOSTS)
    assert per_host <= BUDGET, f"{per_host:.0f} bytes a host"
    data = json.loads(text)
    assert data["detail"] == "compact" and "timeline" not in data
    fixed = next(h for h in data["hosts"] if h["verdict"]["kind"] == "fixed")
    assert "steps" not in fixed
    assert len(fixed["evidence"]) == 3 + 9  # a digest for every command the host ran
    assert fixed["verdict"]["actions"] == [
        "slurm_drain",
        "collect_evidence",
        "reboot",
        "slurm_resume",
    ]
    assert data["summary"]["by_verdict"]["needs_rma"] == 20
    assert data["summary"]["by_verdict"]["fixed"] == 80


def test_steps_on_request(fleet_report: Report) -> None:
    compact = render_json(fleet_report)
    detailed = render_json(fleet_report, steps=True)
    assert len(detailed) > 3 * len(compact)
    data = json.loads(detailed)
    host = data["hosts"][9]
    assert [s["step"] for s in host["steps"]][:4] == [
        "read nvidia-smi", "read the Slurm node", "read the Xid log",
        "drain in Slurm and wait for jobs to leave",
    ]  # fmt: skip
    assert "GPU 0000:00:00.0" in host["steps"][-2]["commands"][0]["stdout"]
    assert len(data["timeline"]) == len(fleet_report.timeline)


def test_both_validate(fleet_report: Report) -> None:
    schema: dict[str, Any] = json.loads(schema_path().read_text(encoding="utf-8"))
    validate(json.loads(render_json(fleet_report)), schema)
    validate(json.loads(render_json(fleet_report, steps=True)), schema)
