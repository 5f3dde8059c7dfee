"""The boards scenario over real SSH: NVIDIA's Fabric Manager reset procedure as the lab sees it
(its audit), the fabric and Fabric Manager state in truth and `lab truth`, and a reboot."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Iterator
from typing import Any

import pytest

from fleetfix.lab.cli import add_lab_parser, run_lab
from fleetfix.lab.control import LabHandle
from tests.lab.support import eventually, faults, run, running_lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with running_lab("boards", tmp_path_factory.mktemp("state"), reboot_time=0.3) as handle:
        yield handle


def _seen(audit: list[dict[str, Any]]) -> list[tuple[str, list[str], int | None]]:
    return [(entry["tool"], entry["argv"], entry["rc"]) for entry in audit]


async def test_fabric_manager_reset_procedure_is_audited(lab: LabHandle) -> None:
    """The guide's H100 sequence: stop the GPU services and FM, reset, start FM again."""
    node = "bd02"
    assert faults(await lab.atruth(), node, "xid")[0]["code"] == 119
    steps = [
        ("systemctl stop nvidia-dcgm nvidia-fabricmanager", 0),
        ("nvidia-smi -r -i 3", 255),
        ("nvidia-smi -r", 0),
        ("nvidia-smi --query-gpu=fabric.state --format=csv,noheader | sort -u", 0),
        ("systemctl start nvidia-fabricmanager", 0),
        ("all_reduce_perf -b 8 -e 1M -g 8 >/dev/null", 0),
    ]
    outputs = []
    for command, rc in steps:
        result = await run(lab, node, command)
        assert result.rc == rc, (command, result)
        outputs.append(result.stdout)
    assert "NVLink peers must be reset in the same command" in outputs[1]
    assert outputs[3] == "Not Started\n"
    truth = (await lab.atruth())["nodes"][node]
    assert truth["fabric"] == {"manager": "active", "imex": None, "gpus": ["Completed"] * 8}
    assert truth["faults"] == [] and truth["recovery_actions"] == ["None"] * 8
    assert _seen(truth["audit"]) == [
        ("systemctl", ["stop", "nvidia-dcgm", "nvidia-fabricmanager"], 0),
        ("nvidia-smi", ["-r", "-i", "3"], 255),
        ("nvidia-smi", ["-r"], 0),
        ("systemctl", ["start", "nvidia-fabricmanager"], 0),
    ]


async def test_ampere_single_reset_with_fabric_manager_running(lab: LabHandle) -> None:
    node = "bd01"
    result = await run(lab, node, "systemctl stop nvidia-dcgm && nvidia-smi -r -i 1")
    assert (result.rc, result.stdout) == (0, "GPU 00000000:43:00.0 was successfully reset.\n")
    truth = (await lab.atruth())["nodes"][node]
    assert truth["board"] == "hgx-a100" and truth["fabric"]["manager"] == "active"
    assert _seen(truth["audit"])[-1] == ("nvidia-smi", ["-r", "-i", "1"], 0)


async def test_reboot_registers_the_fabric_again(lab: LabHandle) -> None:
    node = "bd10"
    before = (await lab.atruth())["nodes"][node]
    assert before["fabric"]["gpus"] == ["In Progress"] * 8
    with contextlib.suppress(OSError):  # the connection may drop first, as on real nodes
        await run(lab, node, "reboot", timeout=10)

    async def back() -> bool:
        now = (await lab.atruth())["nodes"][node]
        return bool(now["status"] == "up" and now["boots"] == before["boots"] + 1)

    await eventually(back, what=f"{node} to come back from reboot")
    after = (await lab.atruth())["nodes"][node]
    assert after["fabric"] == {"manager": "active", "imex": None, "gpus": ["Completed"] * 8}
    nccl = await run(lab, node, "all_reduce_perf -b 8 -e 1M -g 8")
    assert nccl.rc == 0, nccl.stdout


def test_lab_truth_shows_boards_and_fabric(lab: LabHandle) -> None:
    parser = argparse.ArgumentParser(prog="fleetfix")
    add_lab_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    assert run_lab(parser.parse_args(["lab", "truth", "--state-dir", str(lab.state_dir)]), out) == 0
    rows = {line.split()[0]: line for line in out.getvalue().splitlines()[1:] if line.strip()}
    assert out.getvalue().splitlines()[0].split() == ["NODE", "STATUS", "SLURM", "FABRIC", "FAULTS"]
    assert "hgx-h200 fm inactive 8 Completed" in rows["bd11"]
    assert "gb200-nvl imex active 4 Completed" in rows["bd13"]
    assert "pcie  " in rows["bd04"] and "xid94 gpu0 (reset)" in rows["bd04"]
    assert "sram gpu2 vol 1 agg 5 threshold exceeded" in rows["bd05"]
    assert "sxid24007 nvswitch0 gpu3 (reset)" in rows["bd09"]
