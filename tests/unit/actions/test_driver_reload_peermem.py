"""GPUDirect RDMA's peer-memory module in a driver reload (issue 18): NVIDIA's driver ships
nvidia_peermem as a drop-in replacement for the legacy nv_peer_mem, and only one can be loaded
at a time. reload_driver loads back exactly the one the node had, never both; driver-reload.yml
expects one only on a node with RDMA devices. The playbook runs through the real loader and
engine over the FakeTransport, on the real H200's nvidia-smi (a VM without InfiniBand)."""

from __future__ import annotations

from pathlib import Path

from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.driver import ACTIONS
from fleetfix.probes import kernel_modules
from fleetfix.transport.fake import FakeTransport, Reply
from tests.unit.actions.node_facts import units
from tests.unit.actions.test_device_holders import H200, run_book

RELOAD = ACTIONS[0]
ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = ROOT / "playbooks" / "driver-reload.yml"
BASE = """\
### lsmod
Module                  Size  Used by
{peer}nvidia_uvm           2076672  0
nvidia_drm            135168  0
nvidia_modeset       1638400  1 nvidia_drm
nvidia              11763712  {count} {users}nvidia_uvm,nvidia_modeset
### version
NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build
"""


def lsmod(peer: str | None = None) -> str:
    """lsmod of a node with the base modules and, if named, a peer-memory module."""
    line = f"{peer:<19} {16384:>8}  0\n" if peer else ""
    users = f"{peer}," if peer else ""
    return BASE.format(peer=line, count=3 if peer else 2, users=users)


def working_node(fake: FakeTransport, modules: str, *, rdma: str = "", legacy: str = "") -> None:
    """A node whose driver works (the real H200's nvidia-smi, no Xid), with `modules` loaded,
    `rdma` what /sys/class/infiniband and `ibstat -l` list, `legacy` what `systemctl
    is-enabled nv_peer_mem` prints."""
    host = fake.host("gpu001")
    host.on(r"### lsmod", Reply(stdout=modules))
    host.on(r"nvidia-smi -q -x", Reply(stdout=(H200 / "probe-nvidia_smi.txt").read_text()))
    host.on(r"^dmesg", Reply(stdout="[Sat Nov 28 06:30:21 2026] Linux version 6.18.44\n"))
    host.on(r"/sys/class/infiniband", Reply(stdout=rdma))
    host.on(r"is-enabled nv_peer_mem", Reply(stdout=legacy))


def modprobes(fake: FakeTransport) -> list[str]:
    return [c for c in fake.commands_on("gpu001") if c.startswith("modprobe")]


INVENTORY = "[gpu]\ngpu001 gpus=1 fleetfix_slurm=false\n"


async def test_a_node_without_infiniband_is_not_asked_for_a_peer_memory_module(
    tmp_path: Path,
) -> None:
    """The real H200 VM has no HCA and no ibstat: before, the playbook expected nvidia_peermem
    there and tried to load it in place (it cannot load without RDMA support)."""
    fake = FakeTransport()
    working_node(fake, lsmod())
    result = await run_book(tmp_path, fake, PLAYBOOK, INVENTORY)
    assert modprobes(fake) == []
    assert result.stats["gpu001"].as_dict()["failed"] == 0
    assert result.stats["gpu001"].as_dict()["changed"] == 0


async def test_a_node_with_the_legacy_module_keeps_it(tmp_path: Path) -> None:
    """nv_peer_mem loaded on an InfiniBand node: nothing is missing; before, nvidia_peermem
    was missing by the playbook's list and was loaded beside it."""
    fake = FakeTransport()
    working_node(fake, lsmod("nv_peer_mem"), rdma="mlx5_0\nmlx5_1\n")
    result = await run_book(tmp_path, fake, PLAYBOOK, INVENTORY)
    assert modprobes(fake) == []
    assert result.stats["gpu001"].as_dict()["failed"] == 0


async def test_an_infiniband_node_missing_its_module_gets_the_one_it_uses(tmp_path: Path) -> None:
    """No peer-memory module loaded: nvidia_peermem by default, nv_peer_mem where the legacy
    service is enabled (NVIDIA: nvidia_peermem needs that service disabled)."""
    fake = FakeTransport()
    working_node(fake, lsmod(), rdma="mlx5_0\n")
    fake.host("gpu001").on(r"modprobe", Reply())
    await run_book(tmp_path, fake, PLAYBOOK, INVENTORY)
    assert modprobes(fake) == ["modprobe -a nvidia_peermem"]

    legacy = FakeTransport()
    working_node(legacy, lsmod(), rdma="mlx5_0\n", legacy="enabled\n")
    await run_book(tmp_path, legacy, PLAYBOOK, INVENTORY)
    assert modprobes(legacy) == ["modprobe -a nv_peer_mem"]


# --- reload_driver ------------------------------------------------------------------------


def reload(lsmod_text: str, **params: object) -> ActionPlan:
    facts = {"kernel_modules": kernel_modules.parse(lsmod_text), "services": units()}
    return RELOAD.plan(ActionContext("n1", params, facts, {}))


def loads(done: ActionPlan) -> list[str]:
    return [c.command.removeprefix("modprobe ") for c in done.commands if "modprobe" in c.command]


ASKED = ["nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm", "nvidia_peermem"]


def test_the_reload_loads_back_the_legacy_module_not_the_one_asked_for() -> None:
    done = reload(lsmod("nv_peer_mem"), modules=ASKED)
    assert "rmmod nv_peer_mem" in [c.command for c in done.commands]
    assert loads(done) == ["nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm", "nv_peer_mem"]
    assert done.notes == (
        "other modules that use nvidia go and come back too: nv_peer_mem",
        "nv_peer_mem comes back, not nvidia_peermem: the node uses nv_peer_mem (one at a time)",
    )


def test_the_reload_loads_back_nvidia_peermem_where_the_node_had_it() -> None:
    done = reload(lsmod("nvidia_peermem"), modules=[*ASKED[:4], "nv_peer_mem"])
    assert loads(done)[-1] == "nvidia_peermem" and "nv_peer_mem" not in loads(done)


def test_no_peer_memory_module_comes_back_that_neither_the_node_nor_the_playbook_had() -> None:
    assert loads(reload(lsmod(), modules=ASKED[:4])) == ASKED[:4]
    assert loads(reload(lsmod())) == ASKED[:4]


def test_a_resumed_reload_restores_the_legacy_module_the_interrupted_one_unloaded() -> None:
    bare = kernel_modules.parse("### lsmod\nModule                  Size  Used by\n### version\n")
    ctx = ActionContext(
        "n1",
        {"modules": ASKED},
        {"kernel_modules": bare, "services": units()},
        {},
        interrupted={"modules": "nvidia_uvm,nvidia_drm,nvidia_modeset,nv_peer_mem,nvidia"},
    )
    done = RELOAD.plan(ctx)
    assert loads(done) == ["nvidia", "nvidia_modeset", "nvidia_drm", "nvidia_uvm", "nv_peer_mem"]


def test_asking_for_both_is_refused() -> None:
    done = reload(lsmod(), modules=[*ASKED, "nv_peer_mem"])
    assert done.commands == ()
    assert done.refused == (
        "nvidia_peermem and nv_peer_mem would both be loaded: only one peer-memory module can"
        " be loaded at a time (NVIDIA driver README, GPUDirect RDMA Peer Memory Client); name"
        " the one this node uses in `modules`"
    )
