"""reload_driver and gpu_reset on nodes with more than the NVIDIA stack: third-party users of
`nvidia` (GDRCopy's gdrdrv, GPUDirect Storage's nvidia_fs) and monitoring services that hold the
GPUs (dcgm-exporter, nvsm), judged by the lab's audit and truth.

A scenario of four nodes, written here: rx01 an HGX H100 with gdrdrv, nvidia_fs,
dcgm-exporter and nvsm; rx02 an HGX A100 with gdrdrv and dcgm-exporter; rx03 a PCIe H100 with
nvidia_fs and nvsm whose GPU 0 the driver wants reset (Xid 94); rx04 an HGX H100 with gdrdrv,
nvidia_fs and dcgm-exporter whose nvidia-smi hangs until the driver is reloaded. A user's
playbook reloads the driver on rx01 and rx02 and resets rx03's GPU; the shipped
driver-reload.yml, which names the NVIDIA modules it wants, fixes rx04. Everything the node had
before is back after, nothing was unloaded while a user of it was still loaded, and the fabric
registered again.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import Run, fleetfix_run, nodes, write_inventory
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(600)

SCENARIO = """\
name: reload-extras
fleet:
  spines: 1
  leaves: 1
  racks: 1
  nodes_per_rack: 4
  gpus_per_node: 8
  board: hgx-h100
  driver_version: "580.95.05"
  cuda_version: "13.0"
  node_name: "rx{:02d}"
ssh:
  port: 2222
reboot_time: 1s
nodes:
  rx01:
    third_party_modules: [gdrdrv, nvidia_fs]
    extra_units: [dcgm-exporter, nvsm]
  rx02:
    board: hgx-a100
    third_party_modules: gdrdrv
    extra_units: dcgm-exporter
  rx03:
    board: pcie
    third_party_modules: [nvidia_fs]
    extra_units: [nvsm]
    xid: {code: 94, gpu: 0, recovery: reset}
  rx04:
    hung_nvidia_smi: {recovery: reload}
    third_party_modules: [gdrdrv, nvidia_fs]
    extra_units: [dcgm-exporter]
"""
PLAYBOOK = """\
- name: {name}
  hosts: all
  tasks:
    - name: drain and wait for jobs to leave
      action: {{name: slurm_drain, reason: "fleetfix: {name}", wait: true, wait_timeout: 30s}}
    - name: {name}
      action: {action}
    - name: back to service
      action: slurm_resume
"""
RELOADED = ("rx01", "rx02")
THIRD_PARTY = {"rx01": ("gdrdrv", "nvidia_fs"), "rx02": ("gdrdrv",)}
NO_BUDGET = ("--repair-budget", "none")
"""Two of the three nodes out at once is past the default budget (25% of the inventory)."""


@dataclass(frozen=True, slots=True)
class Played:
    reload: Run
    reset: Run
    shipped: Run
    before: dict[str, dict[str, Any]]
    after: dict[str, dict[str, Any]]
    audit: dict[str, list[dict[str, Any]]]

    def calls(self, node: str) -> list[tuple[str, list[str]]]:
        return [(e["tool"], e["argv"]) for e in self.audit[node]]


def _book(base: Path, name: str, action: str) -> Path:
    path = base / f"{action}.yml"
    path.write_text(textwrap.dedent(PLAYBOOK.format(name=name, action=action)))
    return path


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    base = tmp_path_factory.mktemp("reload-extras")
    scenario = base / "reload-extras.yml"
    scenario.write_text(SCENARIO)
    with running_lab(str(scenario), base / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        before = nodes(lab.truth())
        for name in ("reload", "reset", "shipped"):
            (base / name).mkdir()
        reload = fleetfix_run(
            _book(base, "driver reload", "reload_driver"),
            inventory,
            base / "reload",
            "--limit",
            ",".join(RELOADED),
            *NO_BUDGET,
        )
        reset = fleetfix_run(
            _book(base, "GPU reset", "gpu_reset"), inventory, base / "reset", "--limit", "rx03"
        )
        shipped = fleetfix_run(
            "driver-reload.yml",
            inventory,
            base / "shipped",
            "--limit",
            "rx04",
            "-e",
            "drain_wait=3s",
        )
        yield Played(reload, reset, shipped, before, nodes(lab.truth()), lab.audit())


def test_the_runs_succeed(played: Played) -> None:
    assert played.reload.returncode == 0, played.reload.output
    assert played.reset.returncode == 0, played.reset.output
    assert played.shipped.returncode == 0, played.shipped.output


def test_the_shipped_reload_brings_back_what_its_module_list_leaves_out(played: Played) -> None:
    """driver-reload.yml passes `modules:` (the NVIDIA stack); gdrdrv and nvidia_fs, unloaded
    because they use nvidia, still come back, and a node missing them is not resumed."""
    before, after = played.before["rx04"], played.after["rx04"]
    assert {"gdrdrv", "nvidia_fs"} <= set(before["modules"]), "the lab lost its modules"
    loaded = [argv[0] for tool, argv in played.calls("rx04") if tool == "modprobe"]
    assert {"gdrdrv", "nvidia_fs"} <= set(loaded), played.calls("rx04")
    assert after["modules"] == before["modules"], played.calls("rx04")
    assert after["services"] == before["services"], played.calls("rx04")
    assert after["faults"] == [] and after["slurm"]["drain"] is False, after
    assert after["boots"] == before["boots"], "a driver reload is not a reboot"


@pytest.mark.parametrize("node", RELOADED)
def test_the_driver_reload_puts_back_every_module_and_service(played: Played, node: str) -> None:
    before, after = played.before[node], played.after[node]
    assert set(THIRD_PARTY[node]) <= set(before["modules"]), "the lab lost its modules"
    assert after["modules"] == before["modules"], played.calls(node)
    assert after["services"] == before["services"], played.calls(node)
    assert after["faults"] == [] and after["persistence"] == before["persistence"]
    assert set(after["fabric"]["gpus"]) <= {"Completed", "N/A"}, after["fabric"]
    assert after["slurm"]["drain"] is False and after["boots"] == before["boots"]


@pytest.mark.parametrize("node", RELOADED)
def test_third_party_users_of_nvidia_go_first_and_come_back_after_it(
    played: Played, node: str
) -> None:
    calls = played.calls(node)
    unloaded = [argv[0] for tool, argv in calls if tool == "rmmod"]
    loaded = [argv[0] for tool, argv in calls if tool == "modprobe"]
    assert unloaded[-1] == "nvidia", calls
    assert set(THIRD_PARTY[node]) <= set(unloaded) and set(THIRD_PARTY[node]) <= set(loaded)
    assert loaded[0] == "nvidia", calls
    rcs = [e["rc"] for e in played.audit[node] if e["tool"] in ("rmmod", "modprobe", "systemctl")]
    assert set(rcs) == {0}, calls


def test_monitoring_stops_before_what_it_uses_and_starts_after_it(played: Played) -> None:
    units = [(argv[0], argv[1]) for tool, argv in played.calls("rx01") if tool == "systemctl"]
    stops = [unit for verb, unit in units if verb == "stop"]
    starts = [unit for verb, unit in units if verb == "start"]
    assert stops == [
        "dcgm-exporter",
        "nvsm",
        "nvidia-dcgm",
        "nvidia-fabricmanager",
        "nvidia-persistenced",
    ], units
    assert starts == stops[::-1], units


def test_a_reset_stops_the_monitoring_that_holds_the_gpus_and_restores_it(played: Played) -> None:
    calls = played.calls("rx03")
    assert ("nvidia-smi", ["-r", "-i", "0"]) in calls, calls
    reset_at = calls.index(("nvidia-smi", ["-r", "-i", "0"]))
    assert ("systemctl", ["stop", "nvsm"]) in calls[:reset_at], calls
    assert ("systemctl", ["start", "nvsm"]) in calls[reset_at:], calls
    after, before = played.after["rx03"], played.before["rx03"]
    assert after["faults"] == [] and after["services"] == before["services"]
    assert after["modules"] == before["modules"] and after["slurm"]["drain"] is False
