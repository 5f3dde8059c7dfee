"""Host shards on the lab: the same facts and the same remediation outcome as one process, and
a controller killed with -9 takes its worker processes with it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.cli.probe_cmd import DEFAULT_PROBES
from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import fleetfix_run, nodes, run_env, write_inventory
from tests.lab.support import running_lab
from tests.support import process_alive, wait_until

VOLATILE_FACTS = {"timestamp", "now", "used_bytes", "available_bytes"}
"""Clock readings, and the machine's real /dev/shm usage under the lab's mount."""


@pytest.fixture
def healthy(tmp_path: Path) -> Iterator[tuple[LabHandle, Path]]:
    with running_lab("healthy-1000", tmp_path / "lab", nodes=40) as handle:
        yield handle, write_inventory(handle, tmp_path / "lab.ini")


def _probe_json(inventory: Path, workdir: Path, shards: int) -> dict[str, Any]:
    argv = [sys.executable, "-m", "fleetfix", "probe", "-i", str(inventory), "--json"]
    done = subprocess.run(
        [*argv, "--shards", str(shards)],
        capture_output=True,
        text=True,
        timeout=240,
        env=run_env(),
        cwd=workdir,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def _stable(value: Any) -> Any:
    """Facts without the fields that differ between two reads of the same healthy node."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE_FACTS}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def test_sharded_probes_read_the_same_facts(
    healthy: tuple[LabHandle, Path], tmp_path: Path
) -> None:
    _, inventory = healthy

    alone = _probe_json(inventory, tmp_path, shards=0)
    sharded = _probe_json(inventory, tmp_path, shards=2)

    assert _differences(_stable(sharded), _stable(alone)) == []
    assert len(sharded["hosts"]) == 40
    steps = [step for host in sharded["hosts"].values() for step in host.values()]
    assert len(steps) == 40 * len(DEFAULT_PROBES)
    assert all(step["status"] == "ok" and step["facts"] for step in steps), "a probe failed"


def _differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as paths (a readable failure for a 40-host comparison)."""
    if isinstance(left, dict) and isinstance(right, dict):
        keys = sorted(left.keys() | right.keys())
        return [d for k in keys for d in _differences(left.get(k), right.get(k), f"{path}/{k}")]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            d
            for i, pair in enumerate(zip(left, right, strict=True))
            for d in _differences(*pair, f"{path}[{i}]")
        ]
    return [] if left == right else [f"{path}: {left!r:.80} != {right!r:.80}"]


RUN_TAG = re.compile(r"\(run [^)]*\)")
"""A fleetfix drain reason's `(run ID)`: the two runs compared have their own ids."""


def _outcome(truth: dict[str, Any]) -> dict[str, Any]:
    return {
        name: (
            sorted(f["kind"] for f in node["faults"]),
            node["boots"],
            node["slurm"]["drain"],
            RUN_TAG.sub("(run ...)", node["slurm"]["reason"] or ""),  # each run has its id
            len(node["gpu_processes"]),
        )
        for name, node in nodes(truth).items()
    }


def test_xid79_remediation_with_shards_ends_like_one_process(tmp_path: Path) -> None:
    outcomes = []
    for shards in (0, 2):
        work = tmp_path / f"shards{shards}"
        work.mkdir()
        with running_lab("xid79", work / "lab", reboot_time=0.5) as handle:
            inventory = write_inventory(handle, work / "lab.ini")
            # gpu005's job outlives the drain (the demo's busy node): deferred after 3 s
            wait = ("-e", "drain_wait=3s")
            done = fleetfix_run("xid79.yml", inventory, work, "--shards", str(shards), *wait)
            assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-2000:]
            outcomes.append((_outcome(handle.truth()), done.recap))

    (alone, alone_recap), (sharded, sharded_recap) = outcomes
    assert sharded == alone
    assert sharded_recap == alone_recap
    assert sharded["gpu003"][1] == 2 and sharded["gpu005"][1] == 1  # rebooted / busy, untouched


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found.update(int(child) for child in text.split())
    return found


def _workers_of(pid: int) -> set[int]:
    workers = set()
    for child in _children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"fleetfix.transport.shard_worker" in cmdline:
            workers.add(child)
    return workers


def test_a_killed_controller_takes_its_workers_with_it(
    healthy: tuple[LabHandle, Path], tmp_path: Path
) -> None:
    _, inventory = healthy
    playbook = tmp_path / "slow.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - probe: {name: shm}\n    - command: sleep 60\n"
    )
    argv = [sys.executable, "-m", "fleetfix", "run", str(playbook), "-i", str(inventory)]
    controller = subprocess.Popen(
        [*argv, "--yes", "--journal", str(tmp_path / "j.sqlite"), "--shards", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=run_env(),
        cwd=tmp_path,
    )
    workers: set[int] = set()

    def both_started() -> bool:
        workers.update(_workers_of(controller.pid))
        return len(workers) == 2

    try:
        assert wait_until(both_started, 60), workers
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(30)

        assert wait_until(lambda: not any(process_alive(w) for w in workers), 30), workers
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait(30)
        for worker in workers:
            if process_alive(worker):
                os.kill(worker, signal.SIGKILL)
