"""Active tests on the lab, from the user's side: nccl-health reserves each idle node for its
tests (no job can land on it meanwhile) and leaves no reservation behind; a playbook that runs
nccl-tests on a merely idle node is refused by the engine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import Run, fleetfix_run, run_argv, run_env, write_inventory
from tests.e2e.safety_support import action_rows, is_reservation
from tests.lab.support import eventually, running_lab

pytestmark = pytest.mark.timeout(300)

SCENARIO = """\
name: active
description: six nodes on two leaves; a05 runs a job, bob drained a06
fleet: {spines: 1, leaves: 2, racks: 2, nodes_per_rack: 3, node_name: "a{:02d}"}
ssh: {port: 0}
timing: {nccl: 0.5}
nodes:
  a05:
    slurm: {state: alloc, job_id: 4242, user: carol}
  a06:
    slurm: {state: drained, reason: "bad DIMM, OPS-77", user: bob}
"""
TESTED = ("a01", "a02", "a03", "a04")
BARE_NCCL = """
- name: nccl-tests without taking the node out of scheduling
  hosts: all
  tasks:
    - name: all_reduce_perf
      action: nccl_tests
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[LabHandle, Path]]:
    scenario = tmp_path / "active.yml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    with running_lab(str(scenario), tmp_path / "lab") as handle:
        yield handle, write_inventory(handle, tmp_path / "hosts.ini")


async def _run_while(
    handle: LabHandle, argv: list[str], workdir: Path, during: Any
) -> tuple[Run, Any]:
    """Start `fleetfix run`, await `during()` while it runs, then wait for it to finish."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=run_env(),
        cwd=workdir,
    )
    communicate = asyncio.ensure_future(process.communicate())
    try:
        seen = await during()
    finally:
        stdout, stderr = await asyncio.wait_for(communicate, 240)
    return Run(process.returncode or 0, stdout.decode(), stderr.decode()), seen


async def test_nccl_health_reserves_idle_nodes_and_no_job_lands_mid_test(
    lab: tuple[LabHandle, Path], tmp_path: Path
) -> None:
    handle, inventory = lab
    argv = run_argv("nccl-health.yml", inventory, tmp_path / "j.sqlite")

    async def inject_while_reserved() -> dict[str, Any]:
        async def reserved() -> bool:
            slurm = (await handle.atruth())["nodes"]["a01"]["slurm"]
            return bool(slurm["reservation"] == "fleetfix-a01")

        await eventually(reserved, timeout=120, what="nccl-health to reserve a01")
        return await handle.ainject("a01", {"become_busy": {"job_id": 5151, "user": "erin"}})

    run, refused = await _run_while(handle, argv, tmp_path, inject_while_reserved)

    assert refused == {
        "applied": False,
        "outcome": "no job started: the node is reserved (fleetfix-a01)",
    }, run.output
    assert run.returncode == 0, run.output
    truth = await handle.atruth()
    assert truth["reservations"] == [], "nccl-health left a reservation behind"
    assert all(truth["nodes"][n]["slurm"]["reservation"] is None for n in truth["nodes"])
    for name in TESTED:
        calls = [e["argv"][:2] for e in truth["nodes"][name]["audit"] if is_reservation(e)]
        assert calls == [["create", "reservation"], ["delete", f"ReservationName=fleetfix-{name}"]]
        assert truth["nodes"][name]["slurm"]["job_id"] is None
        assert truth["nodes"][name]["slurm"]["drain"] is False
    for name in ("a05", "a06"):  # carol's job and bob's drained node: never touched
        assert truth["nodes"][name]["audit"] == [], truth["nodes"][name]["audit"]
    assert truth["nodes"]["a05"]["slurm"]["job_id"] == 4242
    # Given back to Slurm: the job that could not land mid-test starts now.
    again = await handle.ainject("a01", {"become_busy": {"job_id": 5151, "user": "erin"}})
    assert again["applied"], again


def test_nccl_tests_on_a_merely_idle_node_is_refused(
    lab: tuple[LabHandle, Path], tmp_path: Path
) -> None:
    handle, inventory = lab
    book = tmp_path / "bare.yml"
    book.write_text(BARE_NCCL, encoding="utf-8")

    run = fleetfix_run(book, inventory, tmp_path, "--limit", "a01,a02,a06")

    assert run.returncode == 2, run.output
    for name in ("a01", "a02"):
        assert run.left[name] == (
            "needs a human: nccl_tests refused: an active test runs only on a node taken out"
            " of scheduling (drained, or in a fleetfix reservation: slurm_reserve);"
            " it is IDLE in Slurm: a job could start on it mid-test"
        ), run.output
    assert run.left["a06"] == "left alone: owned by bob: bad DIMM, OPS-77", run.output
    assert action_rows(tmp_path / "j.sqlite") == [], "an action started (journaled intent)"
    truth = handle.truth()
    assert truth["reservations"] == []
    assert all(node["audit"] == [] for node in truth["nodes"].values())
