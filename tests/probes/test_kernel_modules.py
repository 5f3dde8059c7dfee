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
