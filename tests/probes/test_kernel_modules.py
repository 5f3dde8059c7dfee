"""The kernel_modules probe: lsmod / /proc/modules, the NVIDIA set, unload order, driver version."""

from __future__ import annotations

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes.kernel_modules import PROBE, KernelModulesFacts, unload_order
from tests.probes.cases import SAMPLES


def _sample(name: str) -> KernelModulesFacts:
    return PROBE.parse((SAMPLES / name).read_text(encoding="utf-8"))


def test_real_pasted_lsmod_excerpt() -> None:
    facts = _sample("misc/issue-gpud-pr39-lsmod-peermem-yaml-indented.txt")
    nvidia = next(m for m in facts.modules if m.name == "nvidia")
    assert (nvidia.size, nvidia.used_by, nvidia.open_refs) == (56717312, 550, 547)
    assert nvidia.users == ("nvidia_uvm", "nvidia_peermem", "nvidia_modeset")
    # uvm and modeset have no line of their own, but nvidia names them as users.
    assert facts.nvidia_modules == ("nvidia_uvm", "nvidia_modeset", "nvidia_peermem", "nvidia")
    assert facts.missing_nvidia_modules == ("nvidia_drm",)
    assert facts.unload_order == ("nvidia_uvm", "nvidia_modeset", "nvidia_peermem", "nvidia")
    assert facts.in_use_modules == ("nvidia",)
    assert (facts.driver_version, facts.complete) == (None, False)


def test_full_output_with_version() -> None:
    facts = _sample("synthetic-kernel-modules/synthetic-kernel-modules-535-hgx-persistenced.txt")
    assert facts.unload_order == (
        "nvidia_uvm",
        "nvidia_drm",
        "nvidia_modeset",
        "nvidia_peermem",
        "nvidia",
    )
    assert facts.missing_nvidia_modules == ()
    assert (facts.driver_version, facts.open_kernel_module) == ("535.154.05", False)
    assert facts.complete is True


def test_third_party_users_of_nvidia_are_unloaded_first() -> None:
    facts = _sample("synthetic-kernel-modules/synthetic-kernel-modules-open-595-gdrdrv-busy.txt")
    assert facts.unload_order.index("gdrdrv") < facts.unload_order.index("nvidia")
    assert facts.unload_order[-1] == "nvidia"
    assert facts.in_use_modules == ("nvidia_uvm", "nvidia")
    assert (facts.driver_version, facts.open_kernel_module) == ("595.71.05", True)


def test_driver_not_loaded() -> None:
    facts = _sample("synthetic-kernel-modules/synthetic-kernel-modules-driver-unloaded.txt")
    assert (facts.nvidia_loaded, facts.unload_order, facts.driver_version) == (False, (), None)
    assert len(facts.missing_nvidia_modules) == 5


def test_proc_modules_fallback_format() -> None:
    facts = _sample("synthetic-kernel-modules/synthetic-kernel-modules-proc-modules-fallback.txt")
    modeset = next(m for m in facts.modules if m.name == "nvidia_modeset")
    assert modeset.users == ("nvidia_drm",)
    assert facts.missing_nvidia_modules == ("nvidia_peermem",)
    assert facts.driver_version == "550.54.15"


H200 = "real-nodes/h200-sxm-vm-580.159.04"


def test_real_proc_modules_of_a_kernel_without_module_unloading() -> None:
    """The real H200 VM: no lsmod, so /proc/modules, whose kernel (built without module
    unloading) prints `-` for the count and the users; taint `(O)`, real addresses (root)."""
    facts = _sample(f"{H200}/probe-kernel_modules.txt")
    assert [
        (m.name, m.used_by, m.users, m.open_refs, m.state, m.taints) for m in facts.modules
    ] == [
        ("nvidia_uvm", None, (), None, "Live", "O"),
        ("nvidia", None, (), None, "Live", "O"),
    ]
    assert (facts.nvidia_loaded, facts.unload_supported, facts.complete) == (True, False, True)
    # Who uses nvidia is unknown: the NVIDIA set in its own order, never nvidia alone.
    assert facts.unload_order == ("nvidia_uvm", "nvidia")
    assert facts.in_use_modules == ()  # says nothing: no module can be unloaded here
    assert (facts.driver_version, facts.open_kernel_module) == ("580.159.04", True)
    assert facts.gcc_version == "gcc version 15.3.0 (GCC)"
    pasted = _sample(f"{H200}/proc-modules.txt")  # `cat /proc/modules` alone
    assert (pasted.modules, pasted.complete) == (facts.modules, False)


def test_proc_modules_states_permanent_users_and_taints() -> None:
    name = (
        "synthetic-kernel-modules/synthetic-kernel-modules-proc-modules-states-permanent-taints.txt"
    )
    facts = _sample(name)
    by_name = {m.name: m for m in facts.modules}
    assert (by_name["nvidia_peermem"].state, by_name["nvidia_peermem"].taints) == ("Loading", "OE")
    assert (by_name["nvidia_drm"].state, by_name["nvidia_drm"].taints) == ("Unloading", "OE")
    assert by_name["nvidia"].users == ("nvidia_peermem", "nvidia_uvm", "nvidia_modeset")
    assert (by_name["nvidia"].used_by, by_name["nvidia"].open_refs) == (5, 2)
    assert by_name["ib_core"].taints is None  # an in-tree module taints nothing
    crc = by_name["crc32_pclmul"]
    assert (crc.permanent, crc.users, crc.used_by) == (True, (), 0)  # `[permanent],`
    assert facts.unsettled_modules == ("nvidia_drm", "nvidia_peermem")
    assert (facts.unload_supported, facts.in_use_modules) == (True, ("nvidia_uvm", "nvidia"))


def test_the_synthetic_proc_modules_sample_has_the_real_shape() -> None:
    """The synthetic fallback sample was written before a real capture existed: its lines
    have the real capture's fields (a counting kernel prints a number where the VM's prints
    `-`, and a reader without root an address of zeros)."""
    synthetic = _sample(
        "synthetic-kernel-modules/synthetic-kernel-modules-proc-modules-fallback.txt"
    )
    assert {m.state for m in synthetic.modules} == {"Live"}
    assert [m.taints for m in synthetic.modules] == ["POE", "POE", "POE", "POE", None]
    assert synthetic.unload_supported is True


def test_busybox_lsmod_header_and_kmod_without_counts() -> None:
    busybox = _sample(
        "synthetic-kernel-modules/synthetic-kernel-modules-busybox-lsmod-tainted-header.txt"
    )
    assert [m.name for m in busybox.modules] == ["nvidia_uvm", "nvidia_modeset", "nvidia"]
    assert busybox.unload_order == ("nvidia_uvm", "nvidia_modeset", "nvidia")
    # kmod's lsmod prints the errno it got reading a refcnt the kernel does not keep
    facts = PROBE.read("Module                  Size  Used by\nnvidia  14299136  -2\n")
    assert (facts.modules[0].used_by, facts.unload_supported) == (None, False)


def test_header_only_lsmod_is_a_host_without_modules() -> None:
    facts = PROBE.parse("### lsmod\nModule                  Size  Used by\n### version\n")
    assert (facts.modules, facts.nvidia_loaded) == ((), False)


def test_permanent_modules() -> None:
    facts = PROBE.parse("### lsmod\nipv6  450560  42 [permanent]\n### version\n")
    (ipv6,) = facts.modules
    assert (ipv6.permanent, ipv6.users, ipv6.open_refs) == (True, (), 42)


def test_unload_order_tolerates_cycles() -> None:
    facts = PROBE.parse("a 1 1 nvidia\nnvidia 1 1 a\n")
    assert unload_order({m.name: m for m in facts.modules}) == ("a", "nvidia")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "lsmod printed nothing"),
        ("<html>502</html>\n", "not an lsmod"),
        ("### lsmod\n### version\n", "lsmod printed nothing"),
        ("### version\nNVRM version: x\n### lsmod\nnvidia 1 0\n", "expected '### lsmod' then"),
        ("### lsmod\nnvidia 1 0\n### version\ngarbage here\n", "unexpected line"),
        ("### lsmod\nnvidia 1 0\n### version\nGCC version:  gcc 12\n", "no 'NVRM version:'"),
        ("### lsmod\nnvidia 1 0 nvidia_uvm,??\n### version\n", "not an lsmod"),
        ("### lsmod\nnvidia 1 - - Live 0xffff (O\n### version\n", "not an lsmod"),
        ("### lsmod\nnvidia 1 0 - Dying 0x0000000000000000\n### version\n", "not an lsmod"),
        (
            "### lsmod\nnvidia 1 0\n### version\nNVRM version: NVIDIA UNIX x86_64 Kernel Mo",
            "cut off",
        ),
    ],
)
def test_rejects_garbage_and_cut_output(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=reason):
        PROBE.parse(text)


def test_command_has_markers_and_a_proc_modules_fallback() -> None:
    command = PROBE.command({})
    assert "echo '### lsmod'; lsmod 2>/dev/null || cat /proc/modules" in command
    assert "cat /proc/driver/nvidia/version" in command
