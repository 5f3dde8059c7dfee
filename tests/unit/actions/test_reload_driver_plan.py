"""reload_driver's plan: what holds the driver stops, every user of `nvidia` (third-party ones
from lsmod's "Used by" included) unloads first and loads back after it, the services come back
in the reverse order, the fabric is waited for where it can register, and what the node had is
journaled so a resumed run restores it.
"""

from __future__ import annotations

from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.driver import ACTIONS
from fleetfix.probes import kernel_modules, services
from fleetfix.probes.gpu_facts import Fabric, NvidiaSmiFacts
from tests.unit.actions.node_facts import H100, SAMPLES, flag, node, units

GDRDRV = SAMPLES / "synthetic-kernel-modules" / "synthetic-kernel-modules-open-595-gdrdrv-busy.txt"
RELOAD = ACTIONS[0]
HGX = {
    "nvidia_persistenced": "active",
    "nvidia_fabricmanager": "active",
    "nvidia_dcgm": "active",
    "dcgm_exporter": "active",
}
WITH_NVIDIA_FS = """\
### lsmod
Module                  Size  Used by
nvidia_fs             286720  0
gdrdrv                 24576  0
nvidia_uvm           2076672  0
nvidia_drm            135168  0
nvidia_modeset       1638400  1 nvidia_drm
nvidia_peermem         16384  0
nvidia              11763712  5 nvidia_fs,gdrdrv,nvidia_uvm,nvidia_peermem,nvidia_modeset
ib_core               520192  8 rdma_cm,ib_ipoib,nvidia_peermem,iw_cm,ib_umad,rdma_ucm,ib_uverbs
### version
NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build
"""


def modules(text: str) -> kernel_modules.KernelModulesFacts:
    return kernel_modules.parse(text)


def plan(
    mods: kernel_modules.KernelModulesFacts,
    svc: services.ServicesFacts,
    interrupted: dict[str, str] | None = None,
) -> ActionPlan:
    facts = {"kernel_modules": mods, "services": svc}
    return RELOAD.plan(ActionContext("n1", {}, facts, {}, interrupted=interrupted or {}))


def commands(result: ActionPlan) -> list[str]:
    return [
        "<wait for fabric>" if c.command.startswith("deadline=") else c.command
        for c in result.commands
    ]


def test_third_party_users_of_nvidia_unload_first_and_load_back_after_it() -> None:
    done = plan(modules(WITH_NVIDIA_FS), units(**HGX))
    assert commands(done) == [
        "systemctl stop dcgm-exporter",
        "systemctl stop nvidia-dcgm",
        "systemctl stop nvidia-fabricmanager",
        "systemctl stop nvidia-persistenced",
        "rmmod nvidia_uvm",
        "rmmod nvidia_drm",
        "rmmod nvidia_modeset",
        "rmmod nvidia_peermem",
        "rmmod gdrdrv",
        "rmmod nvidia_fs",
        "rmmod nvidia",
        "modprobe nvidia",
        "modprobe nvidia_modeset",
        "modprobe nvidia_drm",
        "modprobe nvidia_uvm",
        "modprobe nvidia_fs",
        "modprobe gdrdrv",
        "modprobe nvidia_peermem",
        "systemctl start nvidia-persistenced",
        "systemctl start nvidia-fabricmanager",
        "systemctl start nvidia-dcgm",
        "systemctl start dcgm-exporter",
        "<wait for fabric>",
    ]
    assert done.before == {
        "services": "dcgm-exporter,nvidia-dcgm,nvidia-fabricmanager,nvidia-persistenced",
        "modules": "nvidia_uvm,nvidia_drm,nvidia_modeset,nvidia_peermem,gdrdrv,nvidia_fs,nvidia",
    }
    assert done.notes == ("other modules that use nvidia go and come back too: gdrdrv, nvidia_fs",)
    assert all(c.always for c in done.commands[11:22]) and not done.commands[22].always


def test_a_real_lsmod_with_gdrdrv_is_read_from_its_used_by_column() -> None:
    done = plan(modules(GDRDRV.read_text()), units(**HGX))
    unloads = [c for c in commands(done) if c.startswith("rmmod ")]
    assert unloads.index("rmmod gdrdrv") < unloads.index("rmmod nvidia") == len(unloads) - 1
    assert commands(done).index("modprobe gdrdrv") > commands(done).index("modprobe nvidia")


def test_mps_and_nvsm_stop_with_the_rest() -> None:
    svc = units(**HGX, nvsm="active", nvidia_cuda_mps_control="active", nvidia_imex="active")
    done = plan(modules(GDRDRV.read_text()), svc)
    stops = [c for c in commands(done) if "stop" in c or "quit" in c]
    assert stops == [
        "systemctl stop dcgm-exporter",
        "systemctl stop nvsm",
        "systemctl stop nvidia-dcgm",
        "echo quit | nvidia-cuda-mps-control",
        "systemctl stop nvidia-imex",
        "systemctl stop nvidia-fabricmanager",
        "systemctl stop nvidia-persistenced",
    ]
    starts = [c for c in commands(done) if "start" in c or c.endswith(" -d")]
    assert starts == [
        "systemctl start nvidia-persistenced",
        "systemctl start nvidia-fabricmanager",
        "systemctl start nvidia-imex",
        "nvidia-cuda-mps-control -d",
        "systemctl start nvidia-dcgm",
        "systemctl start nvsm",
        "systemctl start dcgm-exporter",
    ]


def test_no_fabric_wait_where_no_fabric_can_register() -> None:
    done = plan(modules(GDRDRV.read_text()), units(nvidia_persistenced="active"))
    assert "<wait for fabric>" not in commands(done)


def test_an_installed_fabric_manager_is_started_even_if_it_was_not_running() -> None:
    svc = units(nvidia_persistenced="active", nvidia_fabricmanager="inactive")
    done = plan(modules(GDRDRV.read_text()), svc)
    assert "systemctl start nvidia-fabricmanager" in commands(done)
    assert "systemctl stop nvidia-fabricmanager" not in commands(done)


def test_a_resumed_reload_brings_back_what_the_interrupted_one_took_away() -> None:
    """Killed after the unloads: the node now has no NVIDIA module and no service running."""
    interrupted = {
        "services": "dcgm-exporter,nvidia-dcgm,nvidia-fabricmanager,nvidia-persistenced",
        "modules": "nvidia_uvm,nvidia_drm,nvidia_modeset,nvidia_peermem,gdrdrv,nvidia_fs,nvidia",
    }
    bare = modules("### lsmod\nModule                  Size  Used by\n### version\n")
    svc = units(nvidia_persistenced="inactive", nvidia_fabricmanager="inactive")
    done = plan(bare, svc, interrupted)
    loads = [c.removeprefix("modprobe ") for c in commands(done) if c.startswith("modprobe")]
    assert loads[0] == "nvidia" and set(loads) == set(interrupted["modules"].split(","))
    starts = [c.removeprefix("systemctl start ") for c in commands(done) if "start" in c]
    assert starts == [
        "nvidia-persistenced",
        "nvidia-fabricmanager",
        "nvidia-dcgm",
        "dcgm-exporter",
    ]
    assert done.before == interrupted


def test_verification_waits_for_the_fabric_and_everything_promised() -> None:
    svc = units(**HGX)
    mods = modules(WITH_NVIDIA_FS)
    done = plan(mods, svc)

    def check(smi: NvidiaSmiFacts, after: kernel_modules.KernelModulesFacts) -> str:
        facts = {"kernel_modules": after, "services": svc, "nvidia_smi": smi}
        assert RELOAD.check is not None
        return RELOAD.check(ActionContext("n1", {}, facts, {}, plan=done)) or "ok"

    assert check(node(H100), mods) == "ok"
    waiting = flag(node(H100), 5, fabric=Fabric(state="Not Started", status=None))
    assert check(waiting, mods) == (
        "NVLink fabric not registered after reload: GPU 5: fabric Not Started (status N/A)"
    )
    without = WITH_NVIDIA_FS.replace("gdrdrv                 24576  0\n", "")
    without_gdrdrv = modules(without.replace("nvidia_fs,gdrdrv,", "nvidia_fs,"))
    assert check(node(H100), without_gdrdrv) == "modules not loaded after reload: gdrdrv"


def test_a_kernel_that_cannot_unload_modules_is_refused_not_rmmodded() -> None:
    """The real H200 VM: /proc/modules shows '-' for every module's users (no module unload)."""
    real = SAMPLES / "real-nodes" / "h200-sxm-vm-580.159.04" / "probe-kernel_modules.txt"
    mods = modules(real.read_text(encoding="utf-8"))
    assert mods.unload_supported is False
    refused = plan(mods, units()).refused
    assert refused is not None and "cannot unload modules" in refused and "reboot" in refused
