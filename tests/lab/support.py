"""Helpers for the lab tests: start/stop a lab safely, run commands on its nodes, poll."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from fleetfix.lab.build import build_fleet
from fleetfix.lab.control import LabHandle, pid_alive, start_lab
from fleetfix.lab.scenario_file import load_scenario
from fleetfix.lab.state import FleetState, NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply
from fleetfix.lab.tools.table import tool_table
from tests.support import wait_until


@contextmanager
def running_lab(scenario: str, state_dir: Path, **kwargs: Any) -> Iterator[LabHandle]:
    """A lab for the duration of the block; stopped by PID (also on failure) and checked gone,
    together with every placeholder GPU process it started."""
    handle = start_lab(scenario, state_dir, port=0, **kwargs)
    holders: list[int] = []
    try:
        holders = [p["pid"] for n in handle.truth()["nodes"].values() for p in n["gpu_processes"]]
        yield handle
    finally:
        handle.stop()
        assert not pid_alive(handle.pid), "lab server survived stop()"
        assert not [pid for pid in handle.pids if pid_alive(pid)], "lab SSH fronts survived stop()"
        wait_until(lambda: not any(pid_alive(pid) for pid in holders), 10)
        assert not [pid for pid in holders if pid_alive(pid)], (
            "GPU placeholder processes left behind"
        )
        assert not processes_mentioning(str(state_dir)), "lab processes left behind"


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains `text` (e.g. a lab's state dir)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or not pid_alive(int(entry.name)):
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(int(entry.name))
    return found


@dataclass(frozen=True, slots=True)
class Result:
    stdout: str
    stderr: str
    rc: int | None


async def connect(lab: LabHandle, node: str) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect(
        lab.hosts[node],
        port=lab.port,
        username="root",
        client_keys=[str(lab.client_key)],
        known_hosts=str(lab.known_hosts),
    )


async def run(lab: LabHandle, node: str, command: str, timeout: float = 30.0) -> Result:
    """Run one command on a lab node over a fresh asyncssh connection."""
    async with await connect(lab, node) as conn:
        done = await asyncio.wait_for(conn.run(command, check=False), timeout)
    return Result(str(done.stdout or ""), str(done.stderr or ""), done.exit_status)


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 15.0, what: str = ""
) -> None:
    """Poll `check` until it is true or the deadline passes (then fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {what or check}")


def faults(truth: dict[str, Any], node: str, kind: str) -> list[dict[str, Any]]:
    return [f for f in truth["nodes"][node]["faults"] if f["kind"] == kind]


class NoHooks:
    """Tool hooks for in-process format tests: there are no placeholder processes to signal."""

    def kill_process(self, node: NodeState, pid: int, signal_number: int) -> bool:
        return False

    def reboot(self, node: NodeState) -> None:
        return None


def offline_fleet(scenario: str, tmp: Path) -> FleetState:
    """A fleet built in this process (no server), for calling tool emulators directly."""
    return build_fleet(load_scenario(scenario), tmp, time.time())


def call(fleet: FleetState, node: str, tool: str, *argv: str) -> ToolReply:
    context = ToolContext(fleet.nodes[node], fleet, NoHooks(), time.time(), "root")
    return tool_table()[tool](context, list(argv))


def dev_shm_listing() -> dict[str, tuple[int, float]]:
    """The REAL /dev/shm: name -> (size, mtime)."""
    found = {}
    for entry in os.scandir("/dev/shm"):
        stat = entry.stat(follow_symlinks=False)
        found[entry.name] = (stat.st_size, stat.st_mtime)
    return found
