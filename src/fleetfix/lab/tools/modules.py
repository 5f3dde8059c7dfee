"""Emulated `lsmod`, `modprobe` and `rmmod` for the NVIDIA module stack.

Unloading follows the kernel's rules: a module with loaded users cannot go (`rmmod: ERROR:
Module nvidia is in use by: nvidia_uvm nvidia_modeset`), nor one whose reference count is held
by processes or services (`rmmod: ERROR: Module nvidia is in use`): CUDA processes hold
nvidia_uvm and nvidia; nvidia-persistenced, nv-hostengine (DCGM), the fabric manager, IMEX and
a node's monitoring units (dcgm-exporter, nvsm) hold nvidia. Loading the driver after an unload
re-initialises the GPUs (a "reload").

Third-party users of `nvidia` (GDRCopy's gdrdrv, GPUDirect Storage's nvidia_fs) exist only on
nodes whose scenario installs them: they show in nvidia's "Used by" column and elsewhere
`modprobe` does not find them.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetfix.lab import kmod, transitions
from fleetfix.lab.kmsg import KERNEL_RELEASE
from fleetfix.lab.state import NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines


def lsmod(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    if argv:
        return fail("Usage: lsmod")
    return ToolReply(stdout=kmod.lsmod_text(ctx.node))


def _blocker(node: NodeState, name: str, tool: str) -> str | None:
    module = kmod.module(name)
    if module is None or not kmod.loaded(node, module):
        return f"{tool}: ERROR: Module {name} is not currently loaded"
    holders = kmod.users(node, name)
    if holders:
        return f"{tool}: ERROR: Module {name} is in use by: {' '.join(holders)}"
    if kmod.held_by_others(node, name) or not module.nvidia:
        return f"{tool}: ERROR: Module {name} is in use"
    return None


def rmmod(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    names = [arg for arg in argv if not arg.startswith("-")]
    if not names:
        return fail("rmmod: ERROR: missing module name.")
    errors = []
    for name in names:
        problem = _blocker(ctx.node, _normalise(name), "rmmod")
        if problem:
            errors.append(problem)
            continue
        transitions.unload_module(ctx.node, _normalise(name), ctx.now)
    transitions.finish_unload(ctx.node, ctx.driver)
    return ToolReply(stderr=lines(*errors) if errors else "", rc=1 if errors else 0)


def _normalise(name: str) -> str:
    """Module names accept dashes for underscores and a .ko suffix, as kmod does."""
    return name.removesuffix(".ko").replace("-", "_")


def modprobe(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    remove = any(arg in ("-r", "--remove") for arg in argv)
    names = [_normalise(arg) for arg in argv if not arg.startswith("-")]
    if not names:
        return fail("modprobe: ERROR: missing parameters. See -h.")
    if remove:
        return _remove(ctx, names)
    for name in names:
        if not kmod.installed(ctx.node, name):
            return fail(
                f"modprobe: FATAL: Module {name} not found in directory "
                f"/lib/modules/{KERNEL_RELEASE}"
            )
    loaded_before = ctx.node.driver_loaded()
    for name in names:
        _load_with_deps(ctx, name)
    slow = not loaded_before and ctx.node.driver_loaded()
    return ToolReply(delay=ctx.fleet.scenario.timing.modprobe if slow else 0.0)


def _load_with_deps(ctx: ToolContext, name: str) -> None:
    module = kmod.module(name)
    if module is None or not module.nvidia:
        return
    for dependency in module.depends:
        _load_with_deps(ctx, dependency)
    transitions.load_module(ctx.node, name, ctx.now, ctx.driver)


def _remove(ctx: ToolContext, names: list[str]) -> ToolReply:
    for name in names:
        module = kmod.module(name)
        if module is None or (module.nvidia and not ctx.node.modules.get(name)):
            continue
        problem = _blocker(ctx.node, name, "modprobe")
        if problem:
            transitions.finish_unload(ctx.node, ctx.driver)
            return fail(f"modprobe: FATAL: Module {name} is in use.")
        transitions.unload_module(ctx.node, name, ctx.now)
        _remove_unused_deps(ctx, module)
    transitions.finish_unload(ctx.node, ctx.driver)
    return ToolReply()


def _remove_unused_deps(ctx: ToolContext, module: kmod.Module) -> None:
    """modprobe -r also removes dependencies nothing else uses any more."""
    for name in module.depends:
        dependency = kmod.module(name)
        if dependency is None or not dependency.nvidia or not ctx.node.modules.get(name):
            continue
        if _blocker(ctx.node, name, "modprobe") is None:
            transitions.unload_module(ctx.node, name, ctx.now)
            _remove_unused_deps(ctx, dependency)


def insmod(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    target = argv[-1] if argv else ""
    return fail(f"insmod: ERROR: could not load module {target}: No such file or directory")
