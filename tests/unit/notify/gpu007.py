"""The lab's RMA node (scenario xid79, gpu007: an Xid 79 no reboot fixes) as the events a run
of playbooks/xid79.yml emits for it, built from the output of the lab's own tool emulators."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    BatchStarted,
    CommandRan,
    Event,
    HostStepFinished,
    PlayFinished,
    RunFinished,
    RunStarted,
)
from fleetfix.lab.state import FleetState
from fleetfix.probes import nvidia_smi, slurm_node, xid
from fleetfix.probes.base import Probe, verdict
from fleetfix.probes.nvidia_smi_csv import BASIC_FIELDS
from fleetfix.results import CommandResult, HostStats, RunResult, Status, StepResult
from tests.lab.support import call, offline_fleet

NODE = "gpu007"
PLAYBOOK = "playbooks/xid79.yml"
REMEDIATION = "fleetfix: xid79 remediation"
RMA_REASON = "fleetfix: xid79 persists after reboot; needs RMA"
LEFT = "failed: mark the node failed: Xid 79 not fixed on gpu007: left drained for RMA"


def lab_fleet(tmp: Path) -> FleetState:
    return offline_fleet("xid79", tmp)


def scontrol_after(fleet: FleetState, reason: str | None) -> str:
    """`scontrol show node gpu007`, after draining it with `reason` (None: as it is)."""
    if reason is not None:
        call(
            fleet, NODE, "scontrol", "update", f"NodeName={NODE}", "State=DRAIN", f"Reason={reason}"
        )
    return call(fleet, NODE, "scontrol", "show", "node", NODE).stdout


def _command(text: str, stdout: str, rc: int = 0) -> CommandResult:
    return CommandResult(text, rc, stdout, "")


def _probe_step(step: str, probe: Probe[Any], command: str, text: str) -> StepResult:
    parsed = verdict(probe, text)
    assert parsed.error is None, parsed.error
    return StepResult(
        NODE,
        step,
        Status.OK,
        commands=(_command(command, text),),
        data={"facts": parsed.data, "stdout": text, "changed": False, "failed": False},
    )


def _action(
    step: str,
    action: str,
    commands: tuple[CommandResult, ...],
    *,
    failed: str = "",
    at: float,
    gate: str | None = None,
    verify: str | None = None,
) -> list[Event]:
    """The events of one action step as the engine emits them: the gate's Slurm read, the
    intent, the commands, the outcome, the verification read, the verdict (whose commands are
    the action's own)."""
    ladder = [{"action": action, "failed": bool(failed), "msg": failed}]
    status = Status.FAILED if failed else (Status.CHANGED if action == "slurm_drain" else Status.OK)
    result = StepResult(
        NODE,
        step,
        status,
        changed=action != "collect_evidence",
        message=failed,
        commands=commands,
        data={"ladder": ladder, "failed": bool(failed), "msg": failed},
    )
    read = "scontrol show node"
    return [
        *([CommandRan(at=at, host=NODE, step=step, result=_command(read, gate))] if gate else []),
        ActionStarted(
            at=at, host=NODE, step=step, action=action, disruptive=action != "collect_evidence"
        ),
        *(CommandRan(at=at, host=NODE, step=step, result=command) for command in commands),
        ActionTaken(at=at + 0.1, host=NODE, step=step, action=action, failed=False),
        *(
            [CommandRan(at=at, host=NODE, step=step, result=_command(read, verify))]
            if verify
            else []
        ),
        HostStepFinished(at=at + 0.2, result=result),
    ]


def run_events(fleet: FleetState) -> list[Event]:
    """RunStarted to RunFinished for gpu007 alone, as xid79.yml runs it on the lab."""
    return [*probe_events(fleet), *remediation_events(fleet), *end_events()]


def probe_events(fleet: FleetState) -> list[Event]:
    dmesg = call(fleet, NODE, "dmesg", "-T").stdout
    csv = call(fleet, NODE, "nvidia-smi", f"--query-gpu={','.join(BASIC_FIELDS)}", "--format=csv")
    smi_text = "### fleetfix nvidia_smi expected_gpus=8\n" + csv.stdout + csv.stderr
    slurm = scontrol_after(fleet, None)
    return [
        RunStarted(at=1000.0, run_id="r-1", playbook=PLAYBOOK, hosts=(NODE,), check=False),
        BatchStarted(at=1000.1, index=1, count=1, hosts=(NODE,)),
        HostStepFinished(
            at=1001.0, result=_probe_step("read the kernel Xid log", xid.PROBE, "dmesg -T", dmesg)
        ),
        HostStepFinished(
            at=1002.0,
            result=_probe_step("read nvidia-smi", nvidia_smi.PROBE, "nvidia-smi", smi_text),
        ),
        HostStepFinished(
            at=1003.0,
            result=_probe_step("read the Slurm node", slurm_node.PROBE, "scontrol", slurm),
        ),
    ]


def remediation_events(fleet: FleetState) -> list[Event]:
    before = scontrol_after(fleet, None)
    drained = scontrol_after(fleet, REMEDIATION)
    drain = (_command(f"scontrol update NodeName={NODE} State=DRAIN Reason='{REMEDIATION}'", ""),)
    kept = (
        _command("dmesg -T | tail -n 500", call(fleet, NODE, "dmesg", "-T").stdout),
        _command("nvidia-smi -q", call(fleet, NODE, "nvidia-smi", "-q").stdout, rc=15),
    )
    left = scontrol_after(fleet, RMA_REASON)
    rescue = (_command(f"scontrol update NodeName={NODE} Reason='{RMA_REASON}'", ""),)
    missing = "reboot: verification failed: GPUs missing after reboot: 7 visible"
    return [
        *_action(
            "drain in Slurm and wait for jobs to leave",
            "slurm_drain",
            drain,
            at=1010.0,
            gate=before,
            verify=drained,
        ),
        *_action("keep evidence", "collect_evidence", kept, at=1020.0),
        *_action("reboot (restart bare metal)", "reboot", (), failed=missing, at=1030.0),
        *_action(
            "leave drained for RMA, saying why",
            "slurm_drain",
            rescue,
            at=1040.0,
            gate=drained,
            verify=left,
        ),
    ]


def end_events() -> list[Event]:
    failed = StepResult(
        NODE,
        "mark the node failed",
        Status.FAILED,
        message="Xid 79 not fixed on gpu007: left drained for RMA",
    )
    result = RunResult(stats={NODE: HostStats(ok=7, changed=2, failed=1)}, left={NODE: LEFT})
    return [
        HostStepFinished(at=1050.0, result=failed),
        PlayFinished(at=1051.0, name="Xid 79 remediation"),
        RunFinished(at=1052.0, result=result),
    ]


def lab_gpus(fleet: FleetState) -> dict[str, str]:
    """gpu007's GPUs as the lab built them: UUID -> board serial."""
    return {gpu.uuid: gpu.serial for gpu in fleet.nodes[NODE].gpus}


def lost_uuid(fleet: FleetState) -> str:
    """The GPU that fell off the bus (the scenario's `xid: {gpu: 0}`)."""
    return next(gpu.uuid for gpu in fleet.nodes[NODE].gpus if gpu.index == 0)
