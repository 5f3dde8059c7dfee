"""The kernel modules a lab node has, and the two ways it lists them: lsmod and /proc/modules.

The NVIDIA stack (`nvidia_uvm nvidia_drm nvidia_modeset nvidia_peermem nvidia`, or only
`nvidia_uvm nvidia` in a VM), third-party users of `nvidia` a scenario installs (GDRCopy's
gdrdrv, GPUDirect Storage's nvidia_fs), and the InfiniBand/DRM modules they use. A module's
reference count is its loaded users plus the open device files of processes and services.

/proc/modules is the kernel's own form (kernel/module/procfs.c): `name size refcount users,
state address taints`, the users each followed by a comma (or `-` for none), `Live`, the
module's address (root reads it; the lab's users are root) and the taint flags of an
out-of-tree module: `(POE)` for the proprietary driver, `(OE)` for the open one built by DKMS
and unsigned, `(O)` for a signed one (the real VM). A kernel without module unloading prints
`- -` for the count and users (the real VM capture:
`nvidia_uvm 1830912 - - Live 0xffffffffc080c000 (O)`).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetfix.lab.scenario import EXTRA_UNITS
from fleetfix.lab.state import NodeState

MODULE_BASE = 0xFFFFFFFFC0400000
"""Where the first module loaded sits (the real VM's `nvidia`); later ones follow upwards."""
_PAGE = 0x1000


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
    open_size: int = 0
    """Its size built from the open kernel module sources (the real 580.159.04 VM capture);
    0: the same as the proprietary build."""

    def size_on(self, node: NodeState) -> int:
        return self.open_size if self.open_size and node.open_module else self.size


MODULES = (
    Module("gdrdrv", 24576, ("nvidia",), third_party=True),
    Module("nvidia_fs", 286720, ("nvidia",), third_party=True),
    Module("nvidia_uvm", 1511424, ("nvidia",), open_size=1830912),
    Module("nvidia_drm", 77824, ("nvidia_modeset", "drm_kms_helper", "drm")),
    Module("nvidia_modeset", 1314816, ("nvidia", "video")),
    Module("nvidia_peermem", 16384, ("nvidia", "ib_core")),
    Module("nvidia", 56717312, ("drm",), open_size=14299136),
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


def module(name: str) -> Module | None:
    return next((m for m in MODULES if m.name == name), None)


def loaded(node: NodeState, found: Module) -> bool:
    """Loaded on `node`: an NVIDIA (or third-party) module as its state says; the others
    while the node's system loads them at all (not in a VM without display or InfiniBand)."""
    if found.nvidia:
        return node.modules.get(found.name, False)
    return node.env.host_modules


def installed(node: NodeState, name: str) -> bool:
    found = module(name)
    if found is None or (found.nvidia and name not in node.module_names):
        return False
    return not found.third_party or name in node.injected.third_party_modules


def users(node: NodeState, name: str) -> list[str]:
    """Loaded modules that depend on `name`, plus fixed users of the non-NVIDIA ones."""
    own = module(name)
    found = [m.name for m in MODULES if name in m.depends and loaded(node, m)]
    return [*(own.base_users if own else ()), *found]


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


def loaded_modules(node: NodeState) -> list[Module]:
    """The node's loaded modules, newest first (the kernel's list order)."""
    return [m for m in MODULES if loaded(node, m)]


def refcount(node: NodeState, name: str) -> int:
    return len(users(node, name)) + held_by_others(node, name)


def lsmod_text(node: NodeState) -> str:
    rows = ["Module                  Size  Used by"]
    for found in loaded_modules(node):
        holders = users(node, found.name)
        row = f"{found.name:<19} {found.size_on(node):>8}  {refcount(node, found.name)}"
        rows.append(f"{row} {','.join(holders)}" if holders else row)
    return "".join(row + "\n" for row in rows)


def proc_modules(node: NodeState) -> str:
    """The node's /proc/modules."""
    found = loaded_modules(node)
    addresses = _addresses(node, found)
    rows = []
    for entry in found:
        if node.env.module_unload:
            holders = "".join(f"{name}," for name in users(node, entry.name)) or "-"
            usage = f"{refcount(node, entry.name)} {holders}"
        else:
            usage = "- -"
        taint = _taint(node, entry)
        row = f"{entry.name} {entry.size_on(node)} {usage} Live 0x{addresses[entry.name]:016x}"
        rows.append(f"{row} {taint}" if taint else row)
    return "".join(row + "\n" for row in rows)


def _addresses(node: NodeState, found: list[Module]) -> dict[str, int]:
    """Oldest module at MODULE_BASE, each newer one above the last (page-aligned)."""
    out: dict[str, int] = {}
    address = MODULE_BASE
    for entry in reversed(found):
        out[entry.name] = address
        address += -(-entry.size_on(node) // _PAGE) * _PAGE
    return out


def _taint(node: NodeState, entry: Module) -> str:
    if not entry.nvidia:
        return ""
    proprietary = not entry.third_party and not node.open_module
    unsigned = not node.env.signed_modules
    return f"({'P' if proprietary else ''}O{'E' if unsigned else ''})"
