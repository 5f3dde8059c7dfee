"""Scenario files: shipped ones load, bad ones fail with file, line and a suggestion."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetfix.errors import LabError
from fleetfix.lab.build import build_fleet
from fleetfix.lab.inventory import render_inventory
from fleetfix.lab.layout import bmc_address, fleet_layout
from fleetfix.lab.scenario import BmcCredentials, expand_selector, parse_duration
from fleetfix.lab.scenario_file import load_scenario, shipped_scenarios


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yml"
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_scenarios_load() -> None:
    assert {"xid79", "mixed-faults", "bad-leaf", "healthy-1000"} <= set(shipped_scenarios())
    xid79 = load_scenario("xid79")
    assert xid79.fleet.node_count == 16 and xid79.ssh_port == 2222 and xid79.reboot_time == 3.0
    assert [x.recovery for x in xid79.faults["gpu007"].xids] == ["never"]
    # the demo's protected nodes carry an Xid 79 too, so the demo shows them protected
    for node in ("gpu005", "gpu014"):
        assert [x.code for x in xid79.faults[node].xids] == [79]
    assert xid79.faults["gpu014"].slurm.reason == "reseat GPU 4, ticket OPS-1187"
    assert load_scenario("healthy-1000").fleet.node_count == 1000
    assert load_scenario("bad-leaf").degraded_leaves == {"leaf-03": 0.25}


def test_layout_is_deterministic_and_topological() -> None:
    nodes = fleet_layout(load_scenario("bad-leaf").fleet)
    assert [n.address for n in nodes[:2]] == ["127.10.1.1", "127.10.1.2"]
    assert (nodes[8].name, nodes[8].address, nodes[8].rack, nodes[8].leaf) == (
        "gpu009",
        "127.10.2.1",
        "rack-02",
        "leaf-01",
    )
    assert {n.spine for n in nodes if n.leaf in ("leaf-01", "leaf-02")} == {"spine-01"}
    assert {n.spine for n in nodes if n.leaf in ("leaf-03", "leaf-04")} == {"spine-02"}
    big = fleet_layout(load_scenario("healthy-1000").fleet)
    assert len({n.address for n in big}) == 1000 and big[-1].name == "gpu1000"
    huge = fleet_layout(load_scenario("healthy-10000").fleet)
    bmcs = {bmc_address(n.address) for n in huge}
    assert len(bmcs) == 10000 and not bmcs & {n.address for n in huge}  # a range of their own
    assert bmc_address("127.10.1.3") == "127.110.1.3"


def test_nodes_override_grows_the_fleet() -> None:
    scenario = load_scenario("xid79", nodes=40)
    assert scenario.fleet.node_count == 40 and scenario.fleet.racks == 20  # racks of two
    assert fleet_layout(scenario.fleet)[-1].address == "127.10.20.2"


def test_ranges_and_durations() -> None:
    assert expand_selector("gpu[003:005]") == ("gpu003", "gpu004", "gpu005")
    assert expand_selector("n[8:10]x") == ("n8x", "n9x", "n10x")
    assert [parse_duration(v, "x") for v in (30, "90s", "15m", "2h", "500ms")] == [
        30,
        90,
        900,
        7200,
        0.5,
    ]
    with pytest.raises(LabError, match="expected a duration"):
        parse_duration("soon", "reboot_time")


def test_range_selector_applies_faults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nodes:\n  gpu[003:005]:\n    stale_shm: 2\n  gpu004:\n    xid: {code: 48, gpu: 1}\n",
    )
    scenario = load_scenario(path)
    assert sorted(scenario.faults) == ["gpu003", "gpu004", "gpu005"]
    assert scenario.faults["gpu004"].stale_shm is not None
    assert [(x.code, x.recovery) for x in scenario.faults["gpu004"].xids] == [(48, "reset")]


def test_unknown_fault_key_points_at_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "name: t\nnodes:\n  gpu002:\n    stale_shmm: 3\n")
    with pytest.raises(LabError) as caught:
        load_scenario(path)
    error = caught.value
    assert error.position is not None and error.position.line == 4 and error.position.column == 5
    assert error.hint == "did you mean 'stale_shm'?"
    assert "    stale_shmm: 3\n        ^" in error.render()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes:\n  gpu099: {unreachable: true}\n", "'gpu099' is not in the fleet"),
        (
            "nodes:\n  gpu001: {xid: {code: 79, gpu: 1, recovery: sometimes}}\n",
            "unknown recovery 'sometimes'",
        ),
        ("nodes:\n  gpu001: {xid: {code: 79, gpu: 8}}\n", "GPU 8 does not exist"),
        ("nodes:\n  gpu001: {slurm: {state: busy}}\n", "unknown state 'busy'"),
        ("nodes:\n  gpu001: {modules_unloaded: [nvidia_foo]}\n", "unknown module 'nvidia_foo'"),
        ("nodes:\n  gpu001: {ib_port_down: mlx5_9}\n", "expected mlx5_0..mlx5_7"),
        ("nodes:\n  gpu001: {slow_nccl: 1.5}\n", "expected a factor in (0, 1]"),
        ("leaves:\n  leaf-09: degraded\n", "unknown key 'leaf-09'"),
        ("fleet: {racks: 1, leaves: 2}\n", "need spines <= leaves <= racks"),
        ("fleet: {nodes_per_rack: zero}\n", "expected an integer >= 1"),
        ("flet: {}\n", "did you mean 'fleet'?"),
        ("nodes: [1, 2\n", "not valid YAML"),
        (
            "nodes:\n  gpu001: {gpu_init_failed: {gpu: 2, recovery: reset}}\n",
            "unknown recovery 'reset'",
        ),
        ("nodes:\n  gpu001: {gpu_init_failed: 9}\n", "GPU 9 does not exist"),
        ("nodes:\n  gpu001: {bmc: {pasword: x}}\n", "did you mean 'password'?"),
        ("bmc: {password: twenty-one-characters}\n", "at most 20 bytes"),
        ("bmc: {user: a-user-name-of-17-b}\n", "1 to 16 bytes"),
    ],
)
def test_bad_scenarios_are_rejected(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(LabError) as caught:
        load_scenario(write(tmp_path, text))
    assert message in caught.value.render()


def test_unknown_scenario_name_suggests_a_shipped_one() -> None:
    with pytest.raises(LabError) as caught:
        load_scenario("xid97")
    assert caught.value.hint == "did you mean 'xid79'?"


def test_initial_state_follows_the_scenario(tmp_path: Path) -> None:
    fleet = build_fleet(load_scenario("mixed-faults"), tmp_path, time.time())
    assert fleet.nodes["gpu013"].modules == dict.fromkeys(
        ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nvidia"), False
    )
    assert fleet.nodes["gpu015"].modules["nvidia_peermem"] is False
    assert fleet.nodes["gpu015"].modules["nvidia"] is True
    assert not fleet.nodes["gpu013"].services["nvidia-persistenced"].active
    assert fleet.nodes["gpu026"].status == "unreachable"
    assert fleet.slurm.nodes["gpu024"].job_id == 50117 and fleet.slurm.jobs[50117].user == "carol"
    stale = sorted((tmp_path / "nodes" / "gpu010" / "tmpfs").iterdir())
    ages = [time.time() - p.stat().st_mtime for p in stale]
    assert len(stale) == 2 and all(age > 29 * 86400 for age in ages)


def test_power_cycle_faults_gpu_init_failures_and_bmcs(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "bmc: {user: ops}\n"
        "nodes:\n"
        "  gpu001:\n"
        "    xid:\n"
        "      - {code: 119, gpu: 2, action: system-reboot}\n"
        "      - {code: 120, gpu: 4, action: bus-reset, recovery: never}\n"
        "      - {code: 79, gpu: 3, recovery: power_cycle}\n"
        "    gpu_init_failed: [6, {gpu: 1, recovery: never}]\n"
        "    bmc: {password: its-own}\n"
        "  gpu002: {bmc: false, gpu_init_failed: {gpu: 0, recovery: power_cycle}}\n",
    )
    scenario = load_scenario(path)
    one = scenario.faults["gpu001"]
    assert [(x.code, x.recovery, x.action) for x in one.xids] == [
        (119, "power_cycle", "System Reboot"),  # a warm reboot does not give what it asks
        (120, "never", "Bus Reset"),
        (79, "power_cycle", None),
    ]
    assert [(f.gpu, f.recovery) for f in one.init_failed] == [(6, "reboot"), (1, "never")]
    assert scenario.bmc.user == "ops" and scenario.bmc.password == "fleetfix-lab"
    assert scenario.bmc_of("gpu001") == BmcCredentials("ops", "its-own")
    assert scenario.bmc_of("gpu002") is None and scenario.bmc_of("gpu003") == scenario.bmc
    fleet = build_fleet(scenario, tmp_path, time.time())
    assert [f.to_data() for f in fleet.nodes["gpu002"].faults] == [
        {"kind": "gpu_init_failed", "recovery": "power_cycle", "gpu": 0}
    ]
    assert (fleet.nodes["gpu001"].bmc, fleet.nodes["gpu002"].bmc) == ("127.110.1.1", None)
    assert fleet.by_bmc["127.110.1.3"].name == "gpu003"


def test_the_cold_cycle_scenario_hides_the_gpu_count_and_one_bmc_is_wrong() -> None:
    scenario = load_scenario("cold-cycle")
    assert scenario.fleet.node_count == 10 and not scenario.inventory_gpus
    inventory = render_inventory(scenario)
    assert " gpus=" not in inventory
    assert "bmc_host=127.110.9.1" in inventory and "gpu010 " in inventory  # a rack each
    assert "bmc_host=127.110.10.1" not in inventory  # gpu010 has no BMC
    wrong = scenario.bmc_of("gpu009")
    assert wrong is not None and wrong.password != scenario.bmc.password
    assert f"bmc_password={scenario.bmc.password}\n" in inventory
