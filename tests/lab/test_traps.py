"""The `traps` scenario: each node's trap behaves as documented, over real SSH."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import re
from collections.abc import Iterator
from typing import Any

import asyncssh
import pytest

from fleetfix.lab.cli import add_lab_parser, run_lab
from fleetfix.lab.control import LabHandle
from fleetfix.lab.inventory import render_inventory
from fleetfix.lab.scenario_file import load_scenario
from fleetfix.probes import slurm_node
from tests.lab.support import eventually, faults, processes_mentioning, run, running_lab

NO_CONTROLLER = "Unable to contact slurm controller (connect failure)"
SMI_FORMS = (
    "nvidia-smi",
    "nvidia-smi -L",
    "nvidia-smi -q",
    "nvidia-smi -q -x",
    "nvidia-smi -q -d PERFORMANCE -i 1",
    "nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader",
    "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
    "nvidia-smi topo -m",
    "nvidia-smi nvlink -s",
    "nvidia-smi --version",
)
GPU3_BUS = "00000000:61:00.0"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with running_lab("traps", tmp_path_factory.mktemp("state"), reboot_time=0.5) as handle:
        yield handle


def test_the_inventory_does_not_tell_the_gpu_count(lab: LabHandle) -> None:
    for text in (render_inventory(load_scenario("traps")), lab.inventory_path.read_text()):
        hosts = re.findall(r"^(gpu\d\d) ansible_host=", text, re.M)
        assert hosts == [f"gpu{n:02d}" for n in range(1, 13)]
        assert "gpus=" not in text and 'gpu_model="NVIDIA H100 80GB HBM3"' in text
    assert "gpus=8" in render_inventory(load_scenario("xid79"))


async def test_initial_state_sets_every_trap(lab: LabHandle) -> None:
    nodes = (await lab.atruth())["nodes"]
    with_xid = sorted(name for name in nodes if faults({"nodes": nodes}, name, "xid"))
    assert with_xid == ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05", "gpu06", "gpu07", "gpu09"]
    assert [n for n in ("gpu08", "gpu10", "gpu11", "gpu12") if nodes[n]["faults"]] == []
    busy = nodes["gpu03"]
    assert sorted(p["gpu"] for p in busy["gpu_processes"]) == [0, 1, 2, 3, 5, 6, 7]
    assert busy["slurm"]["job_id"] == 51234
    assert (await run(lab, "gpu03", "squeue -h -w gpu03 -o '%i %u'")).stdout == "51234 dave\n"
    human = nodes["gpu04"]["slurm"]
    assert (human["drain"], human["reason_user"], human["reason"]) == (
        True,
        "bob",
        "investigating NVLink, ticket OPS-2210",
    )
    assert nodes["gpu05"]["slurm"]["unreadable"] is True
    assert faults({"nodes": nodes}, "gpu06", "hung_nvidia_smi") == [
        {"kind": "hung_nvidia_smi", "recovery": "reboot"}
    ]


async def test_unreadable_slurm_fails_both_halves_of_the_probe(lab: LabHandle) -> None:
    # The probe's own command (scontrol, then sinfo): both halves fail, so does the whole.
    dark = await run(lab, "gpu05", slurm_node.command({"node": "gpu05"}))
    assert dark.rc == 1
    assert f"slurm_load_partitions: {NO_CONTROLLER}\n" in dark.stdout + dark.stderr
    assert "NodeName=" not in dark.stdout
    sinfo = await run(lab, "gpu05", f"sinfo -N -n gpu05 -o '{slurm_node.SINFO_FORMAT}'")
    assert (sinfo.rc, sinfo.stdout) == (1, "")
    assert sinfo.stderr == f"slurm_load_partitions: {NO_CONTROLLER}\n"
    scontrol = await run(lab, "gpu05", "scontrol show node gpu05")
    assert (scontrol.rc, scontrol.stderr) == (1, f"slurm_load_node error: {NO_CONTROLLER}\n")
    update = await run(lab, "gpu05", "scontrol update NodeName=gpu05 State=DRAIN Reason=x")
    assert (update.rc, update.stderr) == (1, f"slurm_update error: {NO_CONTROLLER}\n")
    assert (await lab.atruth())["nodes"]["gpu05"]["slurm"]["drain"] is False

    readable = await run(lab, "gpu04", slurm_node.command({"node": "gpu04"}))
    facts = slurm_node.parse(readable.stdout)
    assert (facts.drained, facts.reason_user, facts.reason) == (
        True,
        "bob",
        "investigating NVLink, ticket OPS-2210",
    )
    assert facts.gres == "gpu:h100:8" and facts.gpus_total == 8


async def test_hung_gpu_hangs_every_nvidia_smi_form_but_fuser_answers(lab: LabHandle) -> None:
    outcomes = await asyncio.gather(
        *(run(lab, "gpu06", form, timeout=2) for form in SMI_FORMS), return_exceptions=True
    )
    answered = [
        f for f, o in zip(SMI_FORMS, outcomes, strict=True) if not isinstance(o, TimeoutError)
    ]
    assert answered == [], "every nvidia-smi form hangs on a hung GPU"
    tools = str(lab.state_dir / "tools")
    await eventually(_none_running(tools), what="the hung nvidia-smi calls to be killed")

    inside = await run(
        lab, "gpu06", "timeout 1 nvidia-smi --query-compute-apps=pid --format=csv; echo rc=$?"
    )
    assert inside.stdout == "rc=124\n"
    holders = await run(lab, "gpu06", "fuser -v /dev/nvidia*", timeout=10)
    assert holders.rc == 0
    commands = {line.split()[-1] for line in holders.stderr.splitlines()[1:]}
    assert commands == {"nvidia-persiste", "nv-hostengine", "nv-fabricmanage"}  # comm: 15 chars
    idle = await run(
        lab,
        "gpu06",
        "systemctl stop nvidia-persistenced nvidia-dcgm nvidia-fabricmanager; fuser /dev/nvidia*",
    )
    assert (idle.rc, idle.stdout) == (1, ""), "no jobs and no daemons: nobody holds the GPUs"


def _none_running(marker: str) -> Any:
    async def check() -> bool:
        return not processes_mentioning(marker)

    return check


async def reboot(lab: LabHandle, node: str) -> dict[str, Any]:
    before = (await lab.atruth())["nodes"][node]["boots"]
    with contextlib.suppress(OSError, asyncssh.Error):
        await run(lab, node, "reboot", timeout=10)

    async def back() -> bool:
        now = (await lab.atruth())["nodes"][node]
        return bool(now["status"] == "up" and now["boots"] == before + 1)

    await eventually(back, what=f"{node} back from its reboot")
    after: dict[str, Any] = (await lab.atruth())["nodes"][node]
    return after


async def test_a_gpu_that_does_not_come_back_after_the_reboot(lab: LabHandle) -> None:
    before = await run(
        lab, "gpu07", "nvidia-smi -L | wc -l; lspci -d 10de:2330 | grep -c '61:00.0 .*(rev ff)'"
    )
    assert before.stdout == "7\n1\n", "before the reboot GPU 3 is there, fallen off the bus"
    for boot in (2, 3):
        truth = await reboot(lab, "gpu07")
        assert truth["boots"] == boot
        assert [f["kind"] for f in truth["faults"]] == ["gpu_missing_after_reboot"]
        assert truth["faults"][0] == {
            "kind": "gpu_missing_after_reboot",
            "recovery": "never",
            "gpu": 3,
            "from_boot": 2,
        }
        await _seven_gpus_everywhere(lab)


async def _seven_gpus_everywhere(lab: LabHandle) -> None:
    listed = await run(lab, "gpu07", "nvidia-smi -L")
    assert (listed.rc, listed.stdout.count("GPU "), listed.stderr) == (0, 7, "")
    buses = await run(lab, "gpu07", "nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader")
    assert len(buses.stdout.split()) == 7 and GPU3_BUS not in buses.stdout
    xml = (await run(lab, "gpu07", "nvidia-smi -q -x")).stdout
    assert "<attached_gpus>7</attached_gpus>" in xml and GPU3_BUS not in xml
    table = (await run(lab, "gpu07", "nvidia-smi")).stdout
    assert GPU3_BUS not in table and "00000000:DF:00.0" in table
    topo = (await run(lab, "gpu07", "nvidia-smi topo -m")).stdout.splitlines()[0].split("\t")
    assert [c for c in topo if re.fullmatch(r"GPU\d+", c)] == [f"GPU{i}" for i in range(7)]
    pci = (await run(lab, "gpu07", "lspci -d 10de:2330")).stdout
    assert pci.count("3D controller") == 7 and "61:00.0" not in pci
    slurm = (await run(lab, "gpu07", "scontrol show node gpu07")).stdout
    assert "\n   Gres=gpu:h100:8\n" in slurm and "gres/gpu=8" in slurm, "Slurm still expects 8"


async def test_a_node_becomes_busy_after_its_third_command(lab: LabHandle) -> None:
    look = (
        "squeue -h -w gpu08 -o '%i %u'; "
        "nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l"
    )
    seen = [(await run(lab, "gpu08", look)).stdout for _ in range(4)]
    assert seen == ["0\n", "0\n", "0\n", "51301 erin\n8\n"]
    truth = (await lab.atruth())["nodes"]["gpu08"]
    assert truth["events"] == [
        {
            "after_commands": 3,
            "change": "BecomeBusy",
            "fired_at_command": 4,
            "outcome": "job 51301 (erin) started with 8 GPU processes",
        }
    ]
    assert truth["slurm"]["state"] == "ALLOCATED" and truth["audit"] == []


async def test_a_human_takes_the_node_over_after_its_sixth_command(lab: LabHandle) -> None:
    drain = "scontrol update NodeName=gpu09 State=DRAIN Reason='fleetfix: xid79 remediation'"
    assert (await run(lab, "gpu09", drain)).rc == 0
    look = "sinfo -N -h -n gpu09 -o '%E|%u'"
    seen = [(await run(lab, "gpu09", look)).stdout for _ in range(6)]
    fleetfix = "fleetfix: xid79 remediation|root\n"
    assert seen == [fleetfix] * 5 + ["carol: keep drained, RMA pending, OPS-2231|carol\n"]
    slurm = (await lab.atruth())["nodes"]["gpu09"]["slurm"]
    assert (slurm["drain"], slurm["reason_user"]) == (True, "carol")
    audit = (await lab.aaudit())["gpu09"]
    assert [e["tool"] for e in audit] == ["scontrol"], "a human's change is not a tool call"


def test_truth_command_names_the_traps(lab: LabHandle) -> None:
    parser = argparse.ArgumentParser(prog="fleetfix")
    add_lab_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    code = run_lab(parser.parse_args(["lab", "truth", "--state-dir", str(lab.state_dir)]), out)
    rows = {line.split()[0]: line for line in out.getvalue().splitlines()[1:] if line.strip()}
    assert code == 0
    assert "[unreadable from the node]" in rows["gpu05"]
    assert "gpu_missing_after_reboot gpu3" in rows["gpu07"]
    assert "(bob: investigating NVLink, ticket OPS-2210)" in rows["gpu04"]
