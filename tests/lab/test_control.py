"""Starting, finding, controlling and stopping labs: API, CLI, embedded mode, sandbox fallback."""

from __future__ import annotations

import argparse
import asyncio
import errno
import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from fleetfix.errors import LabError
from fleetfix.lab.cli import add_lab_parser, run_lab
from fleetfix.lab.control import LabServer, find_lab, pid_alive, start_lab
from fleetfix.lab.embedded import connection_vars, embedded_lab, ensure_lab
from fleetfix.lab.info import read_info
from tests.lab.support import connect, eventually, run, running_lab

TINY = """\
name: tiny
fleet: {spines: 1, leaves: 1, racks: 1, nodes_per_rack: 3, node_name: "t{:02d}"}
ssh: {port: 0}
nodes:
  t02: {stale_shm: 2, gpu_processes: [{name: python3, gpu: 1}]}
  t03: {reboot_time: 2s}
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yml"
    path.write_text(TINY, encoding="utf-8")
    return path


def _cli(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="fleetfix")
    add_lab_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["lab", *argv])
    out = io.StringIO()
    code = run_lab(args, out)
    return code, out.getvalue()


@pytest.fixture
def cli_lab(tmp_path: Path) -> Iterator[Path]:
    """A state dir for CLI-started (detached) labs, killed by PID at the end whatever happens."""
    state = tmp_path / "cli-state"
    try:
        yield state
    finally:
        info = read_info(state) if state.exists() else None
        if info is not None and pid_alive(info.pid):
            handle = find_lab(state)
            if handle is not None:
                handle.stop()
        assert info is None or not pid_alive(info.pid)


def test_cli_up_status_truth_down(cli_lab: Path, tmp_path: Path) -> None:
    inventory = tmp_path / "lab.ini"
    code, out = _cli(
        "up",
        "--scenario",
        "xid79",
        "--state-dir",
        str(cli_lab),
        "--port",
        "0",
        "--inventory-out",
        str(inventory),
    )
    assert code == 0, out
    assert out.splitlines()[-1] == str(inventory) and "16 up" in out
    assert "ansible_ssh_private_key_file=" in inventory.read_text(encoding="utf-8")
    pid = read_info(cli_lab).pid  # type: ignore[union-attr]
    code, out = _cli("status", "--state-dir", str(cli_lab), "--json")
    status = json.loads(out)
    assert (
        code == 0
        and status["counts"] == {"up": 16}
        and status["nodes"]["gpu003"]["address"] == "127.10.2.1"  # racks of two
    )
    code, out = _cli("truth", "--state-dir", str(cli_lab))
    rows = {
        line.split()[0]: line
        for line in out.splitlines()[1:]
        if line.strip() and not line.startswith(" ")
    }
    assert "xid79 gpu2 (reboot)" in rows["gpu003"] and "xid79 gpu0 (never)" in rows["gpu007"]
    assert "idle+drain" in rows["gpu014"] and "allocated job 48213" in rows["gpu005"]
    assert out.strip().endswith("5 of 16 nodes still have faults")
    code, out = _cli("down", "--state-dir", str(cli_lab))
    assert code == 0 and f"pid {pid}" in out
    assert not pid_alive(pid) and find_lab(cli_lab) is None
    code, _ = _cli("status", "--state-dir", str(cli_lab))
    assert code == 1


@pytest.mark.parametrize(
    ("scenario", "file"),
    [
        ("xid79", "lab.ini"),
        ("mixed-faults", "lab-mixed-faults.ini"),
        ("bad-leaf", "lab-bad-leaf.ini"),
        ("healthy-1000", "lab-healthy-1000.ini"),
        ("cold-cycle", "lab-cold-cycle.ini"),
    ],
)
def test_committed_inventories_match_the_writer(scenario: str, file: str) -> None:
    code, out = _cli("inventory", scenario)
    committed = Path(__file__).resolve().parents[2] / "inventories" / file
    assert code == 0 and out == committed.read_text(encoding="utf-8")


def test_inventory_reads_like_ansible_does(tmp_path: Path) -> None:
    code, out = _cli("inventory", "bad-leaf")
    assert code == 0
    path = tmp_path / "bad-leaf.ini"
    path.write_text(out, encoding="utf-8")
    venv = Path(__file__).resolve().parents[2] / ".venv" / "bin"
    env = {"HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "PATH": str(venv)}
    done = subprocess.run(
        [str(venv / "ansible-inventory"), "-i", str(path), "--list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    data = json.loads(done.stdout)
    hostvars = data["_meta"]["hostvars"]
    assert len(hostvars) == 64
    assert {
        k: hostvars["gpu033"][k]
        for k in ("ansible_host", "rack", "leaf", "spine", "gpus", "gpu_model")
    } == {
        "ansible_host": "127.10.5.1",
        "rack": "rack-05",
        "leaf": "leaf-03",
        "spine": "spine-02",
        "gpus": 8,
        "gpu_model": "NVIDIA H100 80GB HBM3",
    }
    assert hostvars["gpu001"]["fleetfix_lab_scenario"] == "bad-leaf"
    assert data["leaf_03"]["children"] == ["rack_05", "rack_06"]


def test_a_second_lab_in_the_same_state_dir_is_refused(tiny: Path, tmp_path: Path) -> None:
    with running_lab(str(tiny), tmp_path / "one") as first:
        with pytest.raises(LabError, match="already running"):
            start_lab(tiny, tmp_path / "one", port=0)
        with pytest.raises(LabError, match=f"cannot listen on port {first.port}"):
            start_lab(tiny, tmp_path / "two", port=first.port)
        assert first.alive()


async def test_lab_server_context_manager_stops_on_error(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with LabServer.start(tiny, tmp_path / "state", port=0) as lab:
            pid = lab.pid
            holders = [
                p["pid"] for n in (await lab.atruth())["nodes"].values() for p in n["gpu_processes"]
            ]
            assert len(holders) == 1 and pid_alive(holders[0])
            raise RuntimeError("boom")
    assert not pid_alive(pid)
    assert not pid_alive(holders[0])


async def test_embedded_lab_starts_once_and_hands_out_connection_vars(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    async with embedded_lab(str(tiny)) as hosts:
        assert sorted(hosts) == ["t01", "t02", "t03"]
        reused = await ensure_lab(str(tiny))
        assert (
            reused.process is None
            and reused.state_dir == tmp_path / "xdg" / "fleetfix" / "lab" / "tiny"
        )
        assert connection_vars(reused) == hosts
        assert (
            hosts["t02"]["ansible_host"] == "127.10.1.2" and hosts["t02"]["ansible_user"] == "root"
        )
        assert (await run(reused, "t02", "hostname")).stdout == "t02\n"
        pid = reused.pid
    assert not pid_alive(pid), "the run-scoped lab is stopped after the run"


async def test_fallback_sandbox_never_touches_real_dev_shm(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETFIX_LAB_SANDBOX", "fallback")
    with running_lab(str(tiny), tmp_path / "state") as lab:
        assert lab.sandbox == "fallback"
        marker = "echo x > /dev/shm/fleetfix-lab-marker"
        listing = await run(lab, "t02", f"ls /dev/shm | wc -l; {marker}; hostname")
        assert listing.stdout.split() == ["2", "t02"]
        assert (lab.state_dir / "nodes" / "t02" / "tmpfs" / "fleetfix-lab-marker").exists()
        refused = await run(lab, "t02", "cd /dev && ls shm")
        assert refused.rc == 126 and "fallback mode" in refused.stderr
        boot = await run(lab, "t02", "cat /proc/sys/kernel/random/boot_id")
        assert boot.stdout.strip() == (await lab.atruth())["nodes"]["t02"]["boot_id"]


async def test_a_rebooting_node_refuses_connections(tiny: Path, tmp_path: Path) -> None:
    with running_lab(str(tiny), tmp_path / "state") as lab:
        async with await connect(lab, "t03") as conn:
            await conn.run("reboot")
            with pytest.raises((asyncssh.Error, OSError)):
                for _ in range(50):  # the connection drops within the reboot grace period
                    await conn.run("true", timeout=5)
                    await asyncio.sleep(0.1)

        async def rebooting() -> bool:
            return bool((await lab.astatus())["nodes"]["t03"]["status"] == "rebooting")

        await eventually(rebooting, what="t03 to be rebooting")
        with pytest.raises(OSError):
            await connect(lab, "t03")
        shown = await run(
            lab, "t01", "scontrol show node t03 | grep State=; sinfo -N -h -n t03 -o %t"
        )
        assert "State=IDLE+NOT_RESPONDING" in shown.stdout and shown.stdout.endswith("idle*\n")

        async def back() -> bool:
            return bool((await lab.astatus())["nodes"]["t03"]["status"] == "up")

        await eventually(back, what="t03 to come back")
        assert (await run(lab, "t03", "hostname")).stdout == "t03\n"


@pytest.mark.parametrize("code", [errno.EAGAIN, errno.EFAULT])
def test_a_transient_fork_failure_is_retried(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """A busy machine can refuse a fork for an instant (EAGAIN; EFAULT once in CI, four
    threads starting labs at once): the lab still starts."""
    real = subprocess.Popen
    refusals: list[int] = []

    def refusing_twice(*args: object, **kwargs: object) -> object:
        if len(refusals) < 2:
            refusals.append(1)
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", refusing_twice)
    with running_lab(str(tiny), tmp_path / "lab") as lab:
        assert len(refusals) == 2
        assert len(lab.truth()["nodes"]) == 3


def test_a_lasting_spawn_failure_is_a_lab_error(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refusing(*args: object, **kwargs: object) -> object:
        raise PermissionError(errno.EACCES, "Permission denied", "python")

    monkeypatch.setattr(subprocess, "Popen", refusing)
    with pytest.raises(LabError, match=r"cannot start the lab server: .*Permission denied"):
        start_lab(tiny, tmp_path / "lab", port=0)
