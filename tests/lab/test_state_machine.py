"""Remediation changes lab nodes as it would real ones; outcomes are read through `truth`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from fleetfix.lab.control import LabHandle
from tests.lab.support import Result, eventually, faults, run, running_lab

STOP_HOLDERS = "systemctl stop nvidia-persistenced nvidia-fabricmanager nvidia-dcgm"
START_HOLDERS = "systemctl start nvidia-persistenced nvidia-fabricmanager nvidia-dcgm"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with running_lab("xid79", tmp_path_factory.mktemp("state"), reboot_time=0.5) as handle:
        yield handle


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with running_lab("mixed-faults", tmp_path_factory.mktemp("state"), reboot_time=0.5) as handle:
        yield handle


async def reboot(lab: LabHandle, node: str) -> dict[str, Any]:
    """Reboot over SSH and wait until the node answers with a new boot id; return its truth."""
    before = (await lab.atruth())["nodes"][node]
    with contextlib.suppress(OSError):  # the connection may drop first, as on real nodes
        await run(lab, node, "reboot", timeout=10)

    async def back() -> bool:
        now = (await lab.atruth())["nodes"][node]
        return bool(now["status"] == "up" and now["boots"] == before["boots"] + 1)

    await eventually(back, what=f"{node} to come back from reboot")
    after: dict[str, Any] = (await lab.atruth())["nodes"][node]
    assert after["boot_id"] != before["boot_id"]
    return after


async def test_reboot_clears_recoverable_xid79_but_not_never(lab: LabHandle) -> None:
    truth = await lab.atruth()
    assert [f["recovery"] for f in faults(truth, "gpu003", "xid")] == ["reboot"]
    assert [f["recovery"] for f in faults(truth, "gpu007", "xid")] == ["never"]
    fixed, broken = await asyncio.gather(reboot(lab, "gpu003"), reboot(lab, "gpu007"))
    assert not [f for f in fixed["faults"] if f["kind"] == "xid"]
    assert [f["code"] for f in broken["faults"] if f["kind"] == "xid"] == [79]
    good = await run(lab, "gpu003", "nvidia-smi -L | wc -l; cat /proc/sys/kernel/random/boot_id")
    assert good.stdout.split() == ["8", fixed["boot_id"]]
    assert "Xid" not in (await run(lab, "gpu003", "dmesg")).stdout
    bad = await run(lab, "gpu007", "nvidia-smi -L; dmesg | grep -c 'RmInitAdapter failed'")
    assert bad.rc == 0 and bad.stdout.count("GPU ") == 7 and bad.stdout.endswith("\n1\n")


async def test_reboot_keeps_a_human_drain(lab: LabHandle) -> None:
    before = (await lab.atruth())["nodes"]["gpu014"]["slurm"]
    assert before["drain"] and before["reason_user"] == "bob"
    after = await reboot(lab, "gpu014")
    assert after["slurm"] == before
    shown = await run(lab, "gpu001", "scontrol show node gpu014 | grep -E 'State=|Reason='")
    assert (
        "State=IDLE+DRAIN" in shown.stdout
        and "Reason=reseat GPU 4, ticket OPS-1187 [bob@" in shown.stdout
    )


async def test_busy_node_refuses_reset_and_unload_until_drained_and_idle(lab: LabHandle) -> None:
    node = "gpu005"
    refused = await run(lab, node, "nvidia-smi -r -i 0")
    assert refused.rc == 255 and "GPU 00000000:1B:00.0: In use by another client" in refused.stdout
    unload = await run(lab, node, "rmmod nvidia_uvm")
    assert (unload.rc, unload.stderr) == (1, "rmmod: ERROR: Module nvidia_uvm is in use\n")
    drain = await run(
        lab, node, "scontrol update NodeName=gpu005 State=DRAIN Reason='fleetfix: xid test'"
    )
    assert drain.rc == 0
    slurm = (await lab.atruth())["nodes"][node]["slurm"]
    assert (slurm["state"], slurm["drain"], slurm["reason"]) == (
        "ALLOCATED",
        True,
        "fleetfix: xid test",
    )
    pids = (
        await run(lab, node, "nvidia-smi --query-compute-apps=pid --format=csv,noheader")
    ).stdout.split()
    assert len(pids) == 2
    await run(lab, node, f"kill {' '.join(pids)}")

    async def idle() -> bool:
        state = (await lab.atruth())["nodes"][node]
        return not state["gpu_processes"] and state["slurm"]["state"] == "IDLE"

    await eventually(idle, what="the job to end after its processes were killed")
    still_held = await run(lab, node, "nvidia-smi -r -i 0")
    assert still_held.rc == 255, "persistence and GPU services still hold the GPU"
    reset = await run(lab, node, f"{STOP_HOLDERS} && nvidia-smi -r -i 0")
    assert (reset.rc, reset.stdout) == (0, "GPU 00000000:1B:00.0 was successfully reset.\n")


async def test_driver_unload_order_and_reload(lab: LabHandle) -> None:
    node = "gpu010"
    held = await run(lab, node, "rmmod nvidia")
    assert (
        held.stderr
        == "rmmod: ERROR: Module nvidia is in use by: nvidia_uvm nvidia_modeset nvidia_peermem\n"
    )
    wrong_order = await run(lab, node, "rmmod nvidia_modeset")
    assert wrong_order.stderr == "rmmod: ERROR: Module nvidia_modeset is in use by: nvidia_drm\n"
    users_gone = await run(
        lab, node, "rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia_peermem && rmmod nvidia"
    )
    assert users_gone.stderr == "rmmod: ERROR: Module nvidia is in use\n", (
        "services still hold nvidia"
    )
    unloaded = await run(
        lab, node, f"{STOP_HOLDERS} && rmmod nvidia && lsmod | grep -c '^nvidia'; nvidia-smi"
    )
    assert unloaded.stdout.startswith("0\nNVIDIA-SMI has failed because it couldn't communicate")
    assert unloaded.rc == 9
    truth = await lab.atruth()
    assert faults(truth, node, "modules_unloaded")[0]["modules"] == [
        "nvidia_uvm",
        "nvidia_drm",
        "nvidia_modeset",
        "nvidia_peermem",
        "nvidia",
    ]
    reload = await run(
        lab, node, f"modprobe nvidia_uvm nvidia_drm nvidia_peermem && {START_HOLDERS}"
    )
    assert reload.rc == 0
    after = (await lab.atruth())["nodes"][node]
    assert after["faults"] == [] and after["persistence"] == [True] * 8
    assert (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07"
        in (await run(lab, node, "cat /proc/driver/nvidia/version")).stdout
    )


async def test_drain_and_resume(lab: LabHandle) -> None:
    node = "gpu012"
    denied = await run(lab, node, "scontrol update NodeName=gpu012 State=DRAIN")
    assert denied.rc == 1 and "You must specify a reason" in denied.stderr
    await run(
        lab, node, "scontrol update NodeName=$(hostname -s) State=DRAIN Reason='fleetfix: nccl'"
    )
    shown = await run(lab, "gpu001", "sinfo -N -h -n gpu012 -o '%N %t %E'")
    assert shown.stdout == "gpu012 drain fleetfix: nccl\n"
    resumed = await run(lab, node, "scontrol update NodeName=gpu012 State=RESUME")
    assert resumed.rc == 0
    slurm = (await lab.atruth())["nodes"][node]["slurm"]
    assert (slurm["state"], slurm["drain"], slurm["reason"]) == ("IDLE", False, None)
    again = await run(lab, node, "scontrol update NodeName=gpu012 State=RESUME")
    assert again.rc == 1 and "Invalid node state specified" in again.stderr


async def test_stale_shm_lives_in_the_node_and_rm_cleans_it(mixed: LabHandle) -> None:
    node = "gpu009"
    assert faults(await mixed.atruth(), node, "stale_shm")[0]["count"] == 4
    listing = await run(mixed, node, "ls /dev/shm; touch /dev/shm/fleetfix-lab-marker")
    assert len(listing.stdout.split()) == 4 and all(
        n.startswith("nccl-") for n in listing.stdout.split()
    )
    node_dir = mixed.state_dir / "nodes" / node / "tmpfs"
    assert (node_dir / "fleetfix-lab-marker").exists()
    cleaned = await run(mixed, node, "rm -f /dev/shm/nccl-* && ls /dev/shm")
    assert cleaned.stdout == "fleetfix-lab-marker\n"
    assert not faults(await mixed.atruth(), node, "stale_shm")
    other = await run(mixed, "gpu010", "ls /dev/shm | wc -l")
    assert other.stdout == "2\n", "each node has its own /dev/shm"


async def test_reset_applies_pending_row_remap(mixed: LabHandle) -> None:
    node = "gpu006"
    before = await mixed.atruth()
    assert faults(before, node, "row_remap_pending") and faults(before, node, "xid")
    reset = await run(mixed, node, f"{STOP_HOLDERS} && nvidia-smi -pm 0 && nvidia-smi -r -i 4")
    assert reset.rc == 0, reset.stdout + reset.stderr
    after = await mixed.atruth()
    assert not faults(after, node, "row_remap_pending") and not faults(after, node, "xid")
    xml = (await run(mixed, node, "nvidia-smi -q -x -i 4")).stdout
    assert "<remapped_row_unc>1</remapped_row_unc>" in xml and "<remapped_row_pending>No<" in xml


async def test_reload_level_fault_needs_a_driver_reload(mixed: LabHandle) -> None:
    node = "gpu023"
    reset = await run(
        mixed, node, f"{STOP_HOLDERS} && nvidia-smi -pm 0 >/dev/null && nvidia-smi -r"
    )
    assert reset.rc == 0 and reset.stdout.count("was successfully reset") == 8
    assert faults(await mixed.atruth(), node, "xid"), "a reset does not clear a reload-level Xid"
    unload = await run(
        mixed, node, "modprobe -r nvidia_drm nvidia_uvm nvidia_peermem; lsmod | grep -c ^nvidia"
    )
    assert unload.stdout == "0\n", "modprobe -r also removes dependencies nothing uses any more"
    assert (await run(mixed, node, "modprobe nvidia")).rc == 0
    assert not faults(await mixed.atruth(), node, "xid")


async def test_ecc_counters_reset(mixed: LabHandle) -> None:
    node = "gpu002"
    assert faults(await mixed.atruth(), node, "ecc")[0]["volatile"] == {"sbe": 12, "dbe": 0}
    await run(mixed, node, "nvidia-smi -p 0 -i 3")
    ecc = faults(await mixed.atruth(), node, "ecc")[0]
    assert ecc["volatile"] == {"sbe": 0, "dbe": 0} and ecc["aggregate"] == {"sbe": 52, "dbe": 0}
    cleared = await run(mixed, node, "nvidia-smi -p 1 -i 3")
    assert (
        cleared.stdout
        == "Reset aggregate ECC errors to zero for GPU 00000000:61:00.0.\nAll done.\n"
    )
    assert not faults(await mixed.atruth(), node, "ecc")


async def test_persistence_comes_back_to_the_boot_default(mixed: LabHandle) -> None:
    survives, volatile = "gpu012", "gpu010"
    enabled = await run(mixed, survives, "nvidia-smi -pm 1 | tail -1")
    assert enabled.stdout == "All done.\n"
    assert not faults(await mixed.atruth(), survives, "persistence_off")
    first, second = await asyncio.gather(reboot(mixed, survives), reboot(mixed, volatile))
    assert [f["kind"] for f in first["faults"]] == ["persistence_off"], "service disabled at boot"
    assert not [f for f in second["faults"] if f["kind"] in ("persistence_off", "stale_shm")]
    fixed = await run(
        mixed,
        survives,
        "systemctl enable --now nvidia-persistenced; systemctl is-enabled nvidia-persistenced",
    )
    assert fixed.stdout == "enabled\n" and "Created symlink" in fixed.stderr
    assert not faults(await mixed.atruth(), survives, "persistence_off")


async def test_hung_gpu_recovers_only_on_reboot(mixed: LabHandle) -> None:
    node = "gpu016"
    hung: Result = await run(mixed, node, "timeout 1 nvidia-smi -L; echo rc=$?")
    assert hung.stdout == "rc=124\n"
    after = await reboot(mixed, node)
    assert not [f for f in after["faults"] if f["kind"] in ("hung_nvidia_smi", "xid")]
    assert (await run(mixed, node, "nvidia-smi -L | wc -l")).stdout == "8\n"


async def test_hardware_faults_survive_reboot(mixed: LabHandle) -> None:
    missing, nvlink = await asyncio.gather(reboot(mixed, "gpu018"), reboot(mixed, "gpu019"))
    assert [f["kind"] for f in missing["faults"]] == ["missing_gpu"]
    assert {f["kind"] for f in nvlink["faults"]} == {"nvlink_down", "xid"}
    topo = await run(mixed, "gpu019", "nvidia-smi topo -m | sed -n 2p")
    assert topo.stdout.split("\t")[3] == "NV16"


@pytest.fixture(scope="module")
def bad_leaf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    with running_lab("bad-leaf", tmp_path_factory.mktemp("state"), reboot_time=0.5) as handle:
        yield handle


async def _pair_busbw(lab: LabHandle, first: str, second: str) -> float:
    command = f"mpirun -np 16 -H {first}:8,{second}:8 all_reduce_perf -b 1G -e 2G -f 2 -g 1"
    done = await run(lab, first, command)
    assert done.rc == 0, done.stderr
    line = next(row for row in done.stdout.splitlines() if row.startswith("# Avg bus bandwidth"))
    return float(line.split(":")[1])


async def test_bad_leaf_stays_bad_whatever_is_done_to_nodes(bad_leaf: LabHandle) -> None:
    truth = await bad_leaf.atruth()
    under = sorted(n for n, node in truth["nodes"].items() if node["leaf"] == "leaf-03")
    healthy = sorted(n for n, node in truth["nodes"].items() if node["leaf"] == "leaf-04")
    assert len(under) == 16 and all(faults(truth, n, "degraded_leaf") for n in under)
    good = await _pair_busbw(bad_leaf, healthy[0], healthy[1])
    bad = await _pair_busbw(bad_leaf, under[0], under[1])
    assert bad < 0.3 * good
    mixed_pair = await _pair_busbw(bad_leaf, healthy[0], under[2])
    assert mixed_pair < 0.3 * good, "any node below the bad leaf slows the whole run"
    single = (await run(bad_leaf, under[0], "all_reduce_perf -b 1G -e 1G -g 8")).stdout
    assert float(next(r for r in single.splitlines() if r.startswith("# Avg")).split(":")[1]) > 400
    await reboot(bad_leaf, under[0])
    assert await _pair_busbw(bad_leaf, under[0], under[1]) == pytest.approx(bad, rel=0.01)
    assert faults(await bad_leaf.atruth(), under[0], "degraded_leaf")


async def test_unreachable_host_in_mpirun_fails_like_orte(bad_leaf: LabHandle) -> None:
    done = await run(
        bad_leaf, "gpu001", "mpirun -np 16 -H gpu001:8,gpu999:8 all_reduce_perf -b 8 -e 8"
    )
    assert done.rc == 1 and "ORTE was unable to reliably start one or more daemons" in done.stderr


async def test_fuser_kill_frees_the_gpu(mixed: LabHandle) -> None:
    node = "gpu024"
    listed = await run(mixed, node, "fuser -v /dev/nvidia5")
    rows = listed.stderr.splitlines()
    assert rows[0] == "                     USER        PID ACCESS COMMAND"
    assert rows[1].startswith("/dev/nvidia5:        root ") and rows[-1].endswith(" F...m python3")
    pid = int(listed.stdout.split()[-1])
    await run(mixed, node, "fuser -k /dev/nvidia5")

    async def freed() -> bool:
        state = (await mixed.atruth())["nodes"][node]
        return not state["gpu_processes"] and state["slurm"]["job_id"] is None

    await eventually(freed, what="fuser -k to kill the GPU process and end its job")
    assert pid not in [p["pid"] for p in (await mixed.atruth())["nodes"][node]["gpu_processes"]]
    after = await run(mixed, node, "fuser /dev/nvidia5; echo rc=$?")
    assert after.stdout == "rc=1\n"
    services = (await mixed.atruth())["nodes"][node]["services"]
    assert not services["nvidia-persistenced"], "fuser -k also kills the daemons holding the GPU"
