"""Lab nodes are real SSH servers: OpenSSH, Ansible and asyncssh clients all work against them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from fleetfix.lab.control import LabHandle, pid_alive
from tests.lab.support import connect, processes_mentioning, run, running_lab

VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with running_lab("xid79", tmp_path_factory.mktemp("state")) as handle:
        yield handle


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with running_lab("mixed-faults", tmp_path_factory.mktemp("state")) as handle:
        yield handle


def openssh(lab: LabHandle, node: str, command: str) -> subprocess.CompletedProcess[str]:
    argv = [
        "ssh",
        "-i",
        str(lab.client_key),
        "-p",
        str(lab.port),
        "-o",
        f"UserKnownHostsFile={lab.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        f"root@{lab.hosts[node]}",
        command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_openssh_client_reads_nvidia_smi_xml(lab: LabHandle) -> None:
    done = openssh(lab, "gpu001", "nvidia-smi -q -x")
    assert done.returncode == 0, done.stderr
    root = ET.fromstring(done.stdout.split("\n", 2)[2])
    gpus = root.findall("gpu")
    assert len(gpus) == 8
    assert [g.findtext("minor_number") for g in gpus] == [str(i) for i in range(8)]
    assert {g.findtext("persistence_mode") for g in gpus} == {"Enabled"}
    assert gpus[7].findtext("pci/pci_bus_id") == "00000000:DF:00.0"


def test_openssh_sees_the_lost_gpu(lab: LabHandle) -> None:
    done = openssh(lab, "gpu003", "nvidia-smi -q -x")
    assert done.returncode == 15
    assert "Unable to determine the device handle for GPU0000:52:00.0" in done.stderr
    assert len(ET.fromstring(done.stdout.split("\n", 2)[2]).findall("gpu")) == 7


def test_each_node_has_its_own_identity(lab: LabHandle) -> None:
    seen = {}
    truth = lab.truth()["nodes"]
    for node in ("gpu001", "gpu009"):
        done = openssh(lab, node, "hostname; hostname -s; cat /proc/sys/kernel/random/boot_id")
        name, short, boot_id = done.stdout.split()
        assert name == short == node
        assert boot_id == truth[node]["boot_id"]
        seen[node] = boot_id
    assert seen["gpu001"] != seen["gpu009"]


def test_ansible_raw_runs_on_lab_hosts(lab: LabHandle, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    argv = [
        str(VENV_BIN / "ansible"),
        "rack_01:rack_02",
        "-i",
        str(lab.inventory_path),
        "-m",
        "raw",
        "-a",
        "hostname; nvidia-smi --query-gpu=index --format=csv,noheader | wc -l",
        "-f",
        "8",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    counts = {}
    for node in lab.hosts:
        if lab.hosts[node].startswith(("127.10.1.", "127.10.2.")):
            block = done.stdout.split(f"{node} | CHANGED | rc=0 >>", 1)[1].splitlines()
            assert block[1].strip() == node
            counts[node] = int(block[2])
    assert len(counts) == 4  # two racks of two
    assert counts["gpu001"] == 8 and counts["gpu003"] == 7  # gpu003's GPU fell off the bus


async def test_asyncssh_runs_real_shell_with_stdin(lab: LabHandle) -> None:
    async with await connect(lab, "gpu002") as conn:
        done = await conn.run("read line; echo got:$line; echo oops >&2; exit 3", input="hello\n")
        assert (done.stdout, done.stderr, done.exit_status) == ("got:hello\n", "oops\n", 3)
        piped = await conn.run("nvidia-smi -L | wc -l; lsmod | grep -c ^nvidia")
        assert piped.stdout == "8\n5\n"


async def test_wrong_key_is_refused(lab: LabHandle) -> None:
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(
            lab.hosts["gpu001"],
            port=lab.port,
            username="root",
            client_keys=[stranger],
            known_hosts=str(lab.known_hosts),
        )


async def test_hung_nvidia_smi_is_killed_by_client_timeout(mixed: LabHandle) -> None:
    tools = str(mixed.state_dir / "tools")
    async with await connect(mixed, "gpu016") as conn:
        for give_up in ("close", "signal"):
            process = await conn.create_process("nvidia-smi -q -x")
            with pytest.raises(asyncssh.TimeoutError):
                await process.wait(timeout=1)
            assert _processes_running(tools), "nvidia-smi should hang, not fail"
            if give_up == "close":
                process.close()  # what a client-side timeout does
            else:
                process.send_signal("KILL")
            await _gone(tools)
        after = await conn.run("timeout 1 nvidia-smi; echo rc=$?", timeout=10)
        assert after.stdout == "rc=124\n"
        healthy = await conn.run("lsmod | head -1", timeout=5)
        assert str(healthy.stdout).startswith("Module")
    assert pid_alive(mixed.pid)
    assert (await run(mixed, "gpu001", "nvidia-smi -L | wc -l")).stdout == "8\n"


async def _gone(marker: str) -> None:
    deadline = time.monotonic() + 10
    while _processes_running(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not _processes_running(marker), "the hung tool outlived its channel"


def _processes_running(marker: str) -> list[int]:
    return processes_mentioning(marker)


async def test_unreachable_node_has_no_listener(mixed: LabHandle) -> None:
    with pytest.raises(OSError):
        await connect(mixed, "gpu026")
    assert mixed.status()["nodes"]["gpu026"]["status"] == "unreachable"


async def test_slow_ssh_delays_every_command(mixed: LabHandle) -> None:
    async with await connect(mixed, "gpu028") as conn:
        started = time.monotonic()
        await conn.run("true")
        assert time.monotonic() - started >= 0.4
    async with await connect(mixed, "gpu001") as conn:
        started = time.monotonic()
        await conn.run("true")
        assert time.monotonic() - started < 0.4


async def test_flaky_ssh_drops_the_connection_after_n_commands(mixed: LabHandle) -> None:
    async with await connect(mixed, "gpu027") as conn:
        for _ in range(3):
            assert (await conn.run("echo ok")).stdout == "ok\n"
        dropped = await conn.run("echo ok", timeout=5)
        assert dropped.exit_status is None and dropped.stdout == ""  # channel lost, no status
        with pytest.raises(asyncssh.ChannelOpenError):
            await conn.run("echo ok", timeout=5)
    assert (await run(mixed, "gpu027", "echo again")).stdout == "again\n"


async def test_non_ascii_output_survives_the_shim(lab: LabHandle) -> None:
    done = await run(
        lab, "gpu001", "systemctl status nvidia-dcgm | head -1; journalctl --list-boots"
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "● nvidia-dcgm.service - NVIDIA DCGM service"
    assert "—" in lines[1] and lines[1].split()[0] == "0"
