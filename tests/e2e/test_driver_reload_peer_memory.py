"""The shipped driver-reload.yml on nodes with and without InfiniBand (issue 18), judged by the
lab's audit and truth: a GPUDirect RDMA peer-memory module is expected only where there are RDMA
devices, so a node without InfiniBand is neither given nvidia_peermem in place nor failed for
lacking it, and its driver reload loads back the NVIDIA stack without it.

Three nodes: nb01 without InfiniBand (no ibstat) and without nvidia_peermem, its driver working;
nb02 the same with InfiniBand; nb03 without InfiniBand and with no NVIDIA module loaded. Before,
the playbook expected nvidia_peermem on every node: nb01 got it loaded in place and nb03 got it
with the reload.

Needs the lab's `without:` scenario key (lab/environments.py). The lab's nodes see this
machine's /sys/class/infiniband, so the test is skipped on a machine that has RDMA devices.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import Run, fleetfix_run, nodes, write_inventory
from tests.lab.support import running_lab

pytest.importorskip("fleetfix.lab.environments", reason="the lab has no `without:` key yet")
pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        any(Path("/sys/class/infiniband").glob("*")),
        reason="this machine's own RDMA devices show through the lab nodes' /sys",
    ),
]

SCENARIO = """\
name: peer-memory
fleet:
  spines: 1
  leaves: 1
  racks: 1
  nodes_per_rack: 3
  gpus_per_node: 8
  board: hgx-h100
  driver_version: "580.95.05"
  cuda_version: "13.0"
  node_name: "nb{:02d}"
ssh:
  port: 2222
reboot_time: 1s
nodes:
  nb01:
    without: [ib]
    modules_unloaded: [nvidia_peermem]
  nb02:
    modules_unloaded: [nvidia_peermem]
  nb03:
    without: [ib]
    modules_unloaded: true
"""
STACK = ["nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"]


@dataclass(frozen=True, slots=True)
class Played:
    run: Run
    after: dict[str, dict[str, Any]]
    audit: dict[str, list[dict[str, Any]]]

    def loads(self, node: str) -> list[list[str]]:
        return [entry["argv"] for entry in self.audit[node] if entry["tool"] == "modprobe"]


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    base = tmp_path_factory.mktemp("peer-memory")
    scenario = base / "peer-memory.yml"
    scenario.write_text(SCENARIO)
    with running_lab(str(scenario), base / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        run = fleetfix_run("driver-reload.yml", inventory, base, "--repair-budget", "none")
        yield Played(run, nodes(lab.truth()), lab.audit())


def test_the_run_succeeds(played: Played) -> None:
    assert played.run.returncode == 0, played.run.output
    assert played.run.hosts_with("changed") == {"nb02", "nb03"}, played.run.output


def test_a_working_node_without_infiniband_is_left_as_it_is(played: Played) -> None:
    assert played.loads("nb01") == []
    assert played.after["nb01"]["modules"] == STACK


def test_a_node_with_infiniband_gets_nvidia_peermem_in_place(played: Played) -> None:
    assert played.loads("nb02") == [["-a", "nvidia_peermem"]]
    assert "nvidia_peermem" in played.after["nb02"]["modules"]


def test_the_reload_on_a_node_without_infiniband_loads_no_peer_memory_module(
    played: Played,
) -> None:
    assert played.loads("nb03") == [["nvidia"], ["nvidia_modeset"], ["nvidia_drm"], ["nvidia_uvm"]]
    assert sorted(played.after["nb03"]["modules"]) == sorted(STACK)
    assert played.after["nb03"]["slurm"]["drain"] is False  # verified, back in service
