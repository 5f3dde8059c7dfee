"""The lab's emulated BMCs (issue 18), through the program the controller runs: the lab's
ipmitool (`<state>/bmc/ipmitool`, what lab inventories name as `fleetfix_ipmitool`), given the
arguments fleetfix's power_cycle action sends. A power cycle cold-boots the node whose BMC it
names (new boot id; `power_cycle`- and `reboot`-level faults gone, `never` ones kept), a warm
reboot does not clear what needs a cold cycle, and a wrong password gets ipmitool's refusal."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.inventory import load_inventory
from fleetfix.lab.control import LabHandle, default_state_dir
from fleetfix.lab.embedded import embedded_lab
from fleetfix.lab.inventory import render_inventory
from fleetfix.lab.ipmitool import tool_path
from fleetfix.lab.scenario_file import load_scenario
from fleetfix.playbook.conditions import Templar
from tests.lab.support import eventually, run, running_lab

POWER = """\
name: power
fleet: {spines: 1, leaves: 1, racks: 1, nodes_per_rack: 5, node_name: "p{:02d}"}
ssh: {port: 0}
bmc: {user: ops, password: lab-secret}
nodes:
  p01:
    xid:
      - {code: 79, gpu: 3, recovery: power_cycle}
      - {code: 74, gpu: 1}
    gpu_init_failed: {gpu: 6, recovery: reboot}
    gpu_processes: [{name: python3, gpu: 0}]
    slurm: {state: alloc, job_id: 4242, user: alice}
  p02:
    xid: {code: 79, gpu: 2, recovery: power_cycle}
  p03:
    bmc: {password: changed-by-vendor}
  p05:
    bmc: false
"""
SESSION_ERROR = "Error: Unable to establish IPMI v2 / RMCP+ session\n"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scenario") / "power.yml"
    path.write_text(POWER, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def lab(scenario: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    state = tmp_path_factory.mktemp("state")
    with running_lab(str(scenario), state, reboot_time=0.5) as handle:
        yield handle


def ipmitool(
    tool: Path, bmc: str, *command: str, user: str = "ops", password: str = "lab-secret"
) -> tuple[int, str, str]:
    """The lab's ipmitool as fleetfix's power_cycle runs it (password in IPMI_PASSWORD)."""
    env = {**os.environ, "IPMI_PASSWORD": password}
    argv = [str(tool), "-I", "lanplus", "-H", bmc, "-U", user, "-E", *command]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=False)
    return done.returncode, done.stdout, done.stderr


async def node(lab: LabHandle, name: str) -> dict[str, Any]:
    truth: dict[str, Any] = (await lab.atruth())["nodes"][name]
    return truth


async def back(lab: LabHandle, name: str, boots: int) -> dict[str, Any]:
    """Wait until `name` is up in its `boots`-th boot; its truth then."""

    async def up() -> bool:
        now = await node(lab, name)
        return bool(now["status"] == "up" and now["boots"] == boots)

    await eventually(up, what=f"{name} up in boot {boots}")
    return await node(lab, name)


def kinds(truth: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["kind"], f["recovery"]) for f in truth["faults"] if "recovery" in f]


async def test_a_power_cycle_cold_boots_the_node_whose_bmc_it_names(lab: LabHandle) -> None:
    before = (await lab.atruth())["nodes"]
    one = before["p01"]
    assert one["bmc"] == "127.110.1.1" and one["power_cycles"] == 0
    assert sorted(kinds(one)) == [
        ("gpu_init_failed", "reboot"),
        ("xid", "never"),
        ("xid", "power_cycle"),
    ]
    said = ipmitool(lab.ipmitool, "127.110.1.1", "chassis", "power", "cycle")
    assert said == (0, "Chassis Power Control: Cycle\n", "")
    after = await back(lab, "p01", 2)
    assert after["boot_id"] != one["boot_id"] and after["power_cycles"] == 1
    assert kinds(after) == [("xid", "never")]  # Xid 74: the GPU's NVLink is broken for good
    assert after["gpu_processes"] == [] and after["slurm"]["job_id"] is None  # the job died
    assert (await run(lab, "p01", "nvidia-smi -L | wc -l")).stdout == "8\n"
    [entry] = after["audit"]
    assert (entry["tool"], entry["argv"][-3:], entry["user"], entry["boot"], entry["rc"]) == (
        "ipmitool",
        ["chassis", "power", "cycle"],
        "ops",
        1,
        0,
    )
    assert entry["argv"][:6] == ["-I", "lanplus", "-H", "127.110.1.1", "-U", "ops"]
    others = (await lab.atruth())["nodes"]
    for name in ("p02", "p03", "p04", "p05"):
        assert others[name]["boot_id"] == before[name]["boot_id"], f"{name} was cycled too"


async def test_a_warm_reboot_leaves_what_needs_a_cold_cycle(lab: LabHandle) -> None:
    with contextlib.suppress(OSError):  # the connection may drop first, as on real nodes
        await run(lab, "p02", "reboot", timeout=10)
    warm = await back(lab, "p02", 2)
    assert kinds(warm) == [("xid", "power_cycle")] and warm["power_cycles"] == 0
    seen = await run(
        lab, "p02", "nvidia-smi -L | wc -l; lspci | grep -c '3D controller'; dmesg | grep NVRM"
    )
    count, on_bus, *log = seen.stdout.splitlines()
    assert (count, on_bus) == ("7", "8")  # back on the bus, but the driver could not bring it up
    assert any("GPU 0000:52:00.0: RmInitAdapter failed!" in line for line in log)
    assert not any("Xid" in line for line in log)
    assert ipmitool(lab.ipmitool, "127.110.1.2", "power", "cycle")[0] == 0
    cold = await back(lab, "p02", 3)
    assert kinds(cold) == [] and cold["power_cycles"] == 1
    assert (await run(lab, "p02", "nvidia-smi -L | wc -l")).stdout == "8\n"
    assert [(e["tool"], e["boot"]) for e in cold["audit"]] == [("reboot", 1), ("ipmitool", 2)]


async def test_a_wrong_password_or_user_gets_ipmitools_refusal(lab: LabHandle) -> None:
    before = await node(lab, "p03")
    refused = ipmitool(lab.ipmitool, "127.110.1.3", "chassis", "power", "cycle")
    assert refused == (1, "", SESSION_ERROR)  # the fleet's password; this BMC has its own
    assert ipmitool(
        lab.ipmitool, "127.110.1.3", "power", "status", user="root", password="changed-by-vendor"
    ) == (1, "", SESSION_ERROR)
    right = ipmitool(lab.ipmitool, "127.110.1.3", "power", "status", password="changed-by-vendor")
    assert right == (0, "Chassis Power is on\n", "")
    after = await node(lab, "p03")
    assert (after["boot_id"], after["boots"], after["status"]) == (
        before["boot_id"],
        1,
        "up",
    )
    assert [(e["argv"][-1], e["rc"]) for e in after["audit"]] == [("cycle", 1)]


async def test_power_off_and_on_and_what_a_bmc_refuses_while_off(lab: LabHandle) -> None:
    tool = lab.ipmitool
    assert ipmitool(tool, "127.110.1.4", "chassis", "power", "off")[:2] == (
        0,
        "Chassis Power Control: Down/Off\n",
    )

    async def off() -> bool:
        return bool((await node(lab, "p04"))["status"] == "off")

    await eventually(off, what="p04 powered off")
    with pytest.raises(OSError):
        await run(lab, "p04", "true", timeout=5)
    assert ipmitool(tool, "127.110.1.4", "power", "status")[1] == "Chassis Power is off\n"
    assert ipmitool(tool, "127.110.1.4", "power", "cycle") == (
        1,
        "",
        "Set Chassis Power Control to Cycle failed: Command not supported in present state\n",
    )
    assert ipmitool(tool, "127.110.1.4", "power", "on")[:2] == (0, "Chassis Power Control: Up/On\n")
    on = await back(lab, "p04", 2)
    assert on["power_cycles"] == 1
    assert [e["argv"][-1] for e in on["audit"]] == ["off", "cycle", "on"]


async def test_no_bmc_answers_where_the_lab_has_none(lab: LabHandle) -> None:
    assert (await node(lab, "p05"))["bmc"] is None
    for address in ("127.110.1.5", "127.110.1.9", "127.10.1.1"):
        assert ipmitool(lab.ipmitool, address, "power", "status") == (1, "", SESSION_ERROR)
    tool = [str(lab.ipmitool), "chassis", "power", "status"]
    no_host = subprocess.run(tool, capture_output=True, text=True, timeout=30, check=False)
    assert no_host.returncode == 1
    assert no_host.stderr.startswith("Could not open device at /dev/ipmi0")


def test_the_running_labs_inventory_reaches_its_bmcs(lab: LabHandle) -> None:
    inventory = load_inventory([lab.inventory_path])
    one = inventory.host_vars("p01")
    assert (one["bmc_host"], one["bmc_user"], one["bmc_password"]) == (
        "127.110.1.1",
        "ops",
        "lab-secret",
    )
    assert one["fleetfix_ipmitool"] == str(lab.ipmitool) == str(tool_path(lab.state_dir))
    assert "bmc_host" not in inventory.host_vars("p05")


async def test_the_embedded_labs_inventory_renders_to_its_ipmitool(
    scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A generated inventory (no running lab) names the ipmitool of the lab `fleetfix run`
    starts from it: the scenario's default state dir, worked out when the run renders it."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "power.ini"
    path.write_text(render_inventory(load_scenario(scenario)), encoding="utf-8")
    variables = load_inventory([path]).host_vars("p02")
    rendered = Templar().render(variables["fleetfix_ipmitool"], variables)
    assert rendered == str(tool_path(default_state_dir("power")))
    async with embedded_lab(str(scenario)) as hosts:
        assert hosts["p02"]["ansible_host"] == "127.10.1.2"
        said = ipmitool(Path(rendered), variables["bmc_host"], "power", "status")
        assert said == (0, "Chassis Power is on\n", "")
