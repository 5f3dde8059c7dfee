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
from dataclasses import dataclass

from fleetfix.lab import transitions
from fleetfix.lab.kmsg import KERNEL_RELEASE
from fleetfix.lab.scenario import EXTRA_UNITS
from fleetfix.lab.state import NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines


@dataclass(frozen=True, slots=True)
class Module:
    name: str
    size: int
    depends: tuple[str, ...]
    nvidia: bool = True
    """Loaded or not per node (the NVIDIA set and third-party users of it); the others are
    always loaded and never unloaded."""
    base_users: tuple[str, ...] = ()
    third_party: bool = False
    """Exists only on nodes whose scenario installs it."""


MODULES = (
    Module("gdrdrv", 24576, ("nvidia",), third_party=True),
    Module("nvidia_fs", 286720, ("nvidia",), third_party=True),
    Module("nvidia_uvm", 1511424, ("nvidia",)),
    Module("nvidia_drm", 77824, ("nvidia_modeset", "drm_kms_helper", "drm")),
    Module("nvidia_modeset", 1314816, ("nvidia", "video")),
    Module("nvidia_peermem", 16384, ("nvidia", "ib_core")),
    Module("nvidia", 56717312, ("drm",)),
    Module("mlx5_ib", 454656, ("ib_uverbs", "ib_core", "mlx5_core"), nvidia=False),
    Module("ib_uverbs", 176128, ("ib_core",), nvidia=False, base_users=("rdma_ucm",)),
    Module(
        "ib_core",
        434176,
        (),
        nvidia=False,
        base_users=("rdma_cm", "ib_ipoib", "iw_cm", "ib_umad", "rdma_ucm", "ib_cm"),
    ),
    Module("mlx5_core", 2056192, (), nvidia=False),
    Module("drm_kms_helper", 311296, ("drm",), nvidia=False),
    Module("drm", 622592, (), nvidia=False),
    Module("video", 65536, (), nvidia=False),
)


def _module(name: str) -> Module | None:
    return next((m for m in MODULES if m.name == name), None)


def _loaded(node: NodeState, module: Module) -> bool:
    return node.modules.get(module.name, False) if module.nvidia else True


def _installed(node: NodeState, name: str) -> bool:
    module = _module(name)
    if module is None:
        return False
    return not module.third_party or name in node.injected.third_party_modules


def users(node: NodeState, name: str) -> list[str]:
    """Loaded modules that depend on `name`, plus fixed users of the non-NVIDIA ones."""
    module = _module(name)
    found = [m.name for m in MODULES if name in m.depends and _loaded(node, m)]
    return [*(module.base_users if module else ()), *found]


def held_by_others(node: NodeState, name: str) -> int:
    """References from open device files: processes and services using the GPUs."""
    cuda = len(node.processes)
    if name == "nvidia_uvm":
        return cuda
    if name != "nvidia":
        return 0
    services = (
        "nvidia-persistenced",
        "nvidia-fabricmanager",
        "nvidia-imex",
        "nvidia-dcgm",
        *EXTRA_UNITS,
    )
    held = sum(len(node.gpus) + 1 for unit in services if node.unit_active(unit))
    return 2 * cuda + held


def lsmod(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    if argv:
        return fail("Usage: lsmod")
    rows = ["Module                  Size  Used by"]
    for module in MODULES:
        if not _loaded(ctx.node, module):
            continue
        holders = users(ctx.node, module.name)
        count = len(holders) + held_by_others(ctx.node, module.name)
        row = f"{module.name:<19} {module.size:>8}  {count}"
        rows.append(f"{row} {','.join(holders)}" if holders else row)
    return ToolReply(stdout=lines(*rows))


def _blocker(node: NodeState, name: str, tool: str) -> str | None:
    module = _module(name)
    if module is None or not _loaded(node, module):
        return f"{tool}: ERROR: Module {name} is not currently loaded"
    holders = users(node, name)
    if holders:
        return f"{tool}: ERROR: Module {name} is in use by: {' '.join(holders)}"
    if held_by_others(node, name) or not module.nvidia:
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
        if not _installed(ctx.node, name):
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
    module = _module(name)
    if module is None or not module.nvidia:
        return
    for dependency in module.depends:
        _load_with_deps(ctx, dependency)
    transitions.load_module(ctx.node, name, ctx.now, ctx.driver)


def _remove(ctx: ToolContext, names: list[str]) -> ToolReply:
    for name in names:
        module = _module(name)
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


def _remove_unused_deps(ctx: ToolContext, module: Module) -> None:
    """modprobe -r also removes dependencies nothing else uses any more."""
    for name in module.depends:
        dependency = _module(name)
        if dependency is None or not dependency.nvidia or not ctx.node.modules.get(name):
            continue
        if _blocker(ctx.node, name, "modprobe") is None:
            transitions.unload_module(ctx.node, name, ctx.now)
            _remove_unused_deps(ctx, dependency)


def insmod(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    target = argv[-1] if argv else ""
    return fail(f"insmod: ERROR: could not load module {target}: No such file or directory")
