"""The lab's audit: every disruptive tool call it emulated, per node, with user, time and boot."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import asyncssh
import pytest

from fleetfix.lab.audit import is_disruptive
from fleetfix.lab.control import LabHandle
from tests.lab.support import eventually, run, running_lab

AUDITED = """\
name: audited
fleet: {spines: 1, leaves: 1, racks: 1, nodes_per_rack: 3, node_name: "a{:02d}"}
ssh: {port: 0}
nodes:
  a01:
    gpu_processes: [{name: python3, gpu: 0}, {name: python3, gpu: 1}, {name: python3, gpu: 2}]
    slurm: {state: alloc, job_id: 900, user: alice}
  a03: {hung_nvidia_smi: true}
"""
READ_ONLY = (
    "nvidia-smi -q -d PERFORMANCE",
    "nvidia-smi --query-gpu=persistence_mode --format=csv",
    "nvidia-smi topo -m",
    "scontrol show node a01",
    "scontrol ping",
    "sinfo -R",
    "squeue",
    "systemctl is-active slurmd",
    "systemctl status nvidia-dcgm",
    "fuser -v /dev/nvidia*",
    "lsmod",
    "kill -0 $$",
    "dmesg | tail -1",
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    scenario = tmp_path_factory.mktemp("scenario") / "audited.yml"
    scenario.write_text(AUDITED, encoding="utf-8")
    with running_lab(str(scenario), tmp_path_factory.mktemp("state"), reboot_time=0.3) as handle:
        yield handle


@pytest.mark.parametrize(
    ("tool", "argv", "expected"),
    [
        ("reboot", [], True),
        ("shutdown", ["-r", "now"], True),
        ("systemctl", ["reboot"], True),
        ("systemctl", ["--now", "disable", "nvidia-persistenced"], True),
        ("systemctl", ["restart", "nvidia-fabricmanager"], True),
        ("systemctl", ["is-active", "slurmd"], False),
        ("nvidia-smi", ["nvlink", "-e"], False),  # --errorcounters, not --ecc-config
        ("nvidia-smi", ["nvlink", "-s"], False),
        ("nvidia-smi", ["nvlink", "-r", "0"], True),  # --resetcounters
        ("nvidia-smi", ["-e", "0"], True),
        ("scontrol", ["update", "NodeName=a01", "State=RESUME"], True),
        ("scontrol", ["-o", "show", "node", "a01"], False),
        ("nvidia-smi", ["-i", "0", "-r"], True),
        ("nvidia-smi", ["--gpu-reset", "-i", "0"], True),
        ("nvidia-smi", ["-pm", "1"], True),
        ("nvidia-smi", ["-p", "0"], True),
        ("nvidia-smi", ["-rmc"], True),
        ("nvidia-smi", ["--persistence-mode=1"], True),
        ("nvidia-smi", ["-q", "-x"], False),
        ("nvidia-smi", ["--query-compute-apps=pid", "--format=csv"], False),
        ("rmmod", ["nvidia_uvm"], True),
        ("modprobe", ["-r", "nvidia"], True),
        ("modprobe", ["nvidia"], True),
        ("modprobe", ["-n", "nvidia"], False),
        ("insmod", ["nvidia.ko"], True),
        ("fuser", ["-v", "/dev/nvidia0"], False),
        ("fuser", ["-k", "/dev/nvidia0"], True),
        ("scancel", ["900"], True),
        ("kill", ["-s", "KILL", "4242"], True),
        ("kill", ["-9", "4243"], False),
        ("lspci", [], False),
    ],
)
def test_what_counts_as_disruptive(tool: str, argv: list[str], expected: bool) -> None:
    assert is_disruptive(tool, argv, gpu_pids={4242}) is expected


async def test_read_only_commands_leave_no_trace(lab: LabHandle) -> None:
    for command in READ_ONLY:
        await run(lab, "a02", command)
    assert lab.audit()["a02"] == []
    assert (await lab.atruth())["nodes"]["a02"]["commands"] == len(READ_ONLY)


async def test_every_disruptive_call_is_recorded_with_user_and_boot(lab: LabHandle) -> None:
    pids = [p["pid"] for p in (await lab.atruth())["nodes"]["a01"]["gpu_processes"]]
    drain = "scontrol update NodeName=a01 State=DRAIN Reason='fleetfix: test'"
    await run_as(lab, "ops", drain)
    reset = await run(lab, "a01", "nvidia-smi -r -i 0")
    assert reset.rc == 255, "refused: a process holds GPU 0"
    await run(lab, "a01", f"kill -s KILL {pids[0]}")
    # A kill the lab cannot see as a command (python's os.kill): seen when the process dies.
    await run(lab, "a01", f"python3 -c 'import os; os.kill({pids[1]}, 15)'")
    await run(lab, "a01", "systemctl restart nvidia-dcgm")
    await _gone(lab, pids[:2])
    before = await lab.aaudit()
    with contextlib.suppress(OSError, asyncssh.Error):
        await run(lab, "a01", "reboot", timeout=10)
    await eventually(lambda: _booted(lab, "a01", 2), what="a01 back from its reboot")
    await run(lab, "a01", "nvidia-smi -pm 1")

    audit = (await lab.aaudit())["a01"]
    assert [(e["tool"], e["argv"], e["user"], e["boot"], e["rc"]) for e in audit] == [
        (
            "scontrol",
            ["update", "NodeName=a01", "State=DRAIN", "Reason=fleetfix: test"],
            "ops",
            1,
            0,
        ),
        ("nvidia-smi", ["-r", "-i", "0"], "root", 1, 255),
        ("kill", ["-s", "KILL", str(pids[0])], "root", 1, 0),
        ("kill", ["-TERM", str(pids[1])], "unknown", 1, None),
        ("systemctl", ["restart", "nvidia-dcgm"], "root", 1, 0),
        ("reboot", [], "root", 1, 0),
        ("nvidia-smi", ["-pm", "1"], "root", 2, 0),
    ]
    times = [e["at"] for e in audit]
    assert times == sorted(times) and len(before["a01"]) == 5
    truth = (await lab.atruth())["nodes"]["a01"]
    assert truth["audit"] == audit and truth["slurm"]["job_id"] is None


async def test_a_hung_disruptive_call_is_recorded_without_a_status(lab: LabHandle) -> None:
    with pytest.raises(TimeoutError):
        await run(lab, "a03", "nvidia-smi -r -i 0", timeout=1)
    entry = await _audit_entry(lab, "a03")
    assert (entry["tool"], entry["argv"], entry["rc"]) == ("nvidia-smi", ["-r", "-i", "0"], None)


async def _audit_entry(lab: LabHandle, node: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    async def recorded() -> bool:
        found[:] = (await lab.aaudit())[node]
        return bool(found)

    await eventually(recorded, what=f"an audit entry on {node}")
    return found[0]


async def run_as(lab: LabHandle, user: str, command: str) -> None:
    async with asyncssh.connect(
        lab.hosts["a01"],
        port=lab.port,
        username=user,
        client_keys=[str(lab.client_key)],
        known_hosts=str(lab.known_hosts),
    ) as conn:
        done = await conn.run(command, check=False, timeout=30)
    assert done.exit_status == 0, done.stderr


async def _gone(lab: LabHandle, pids: list[int]) -> None:
    async def dead() -> bool:
        alive = {p["pid"] for p in (await lab.atruth())["nodes"]["a01"]["gpu_processes"]}
        return not alive & set(pids)

    await eventually(dead, what=f"GPU processes {pids} to die")


async def _booted(lab: LabHandle, node: str, boots: int) -> bool:
    now = (await lab.atruth())["nodes"][node]
    return bool(now["status"] == "up" and now["boots"] == boots)
