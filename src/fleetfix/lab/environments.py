"""What a node runs in besides its board: bare metal, a VM with a GPU passed through, a container.

A scenario's `environment:` (fleet-wide or per node) picks one; `without: [GROUP, ...]` takes
further tool groups off a node (`without: [slurm]`: a node with no Slurm client). A tool that
is not installed is not on the node's PATH at all, so bash answers `bash: line 1: scontrol:
command not found` (exit 127) and `command -v` finds nothing, as on the real machines:

* `vm` is the real node captured in tests/fixtures/samples/real-nodes/h200-sxm-vm-580.159.04:
  one GPU passed through to a Firecracker VM (PCI 00000000:00:06.0, no NVSwitch or NVLink
  visible, fabric state N/A, Virtualization Mode Pass-Through), the open kernel module, a
  kernel without module unloading (/proc/modules prints `- -` for references and users) and
  only nvidia + nvidia_uvm loaded, no systemd (no unit runs; persistence mode is set by
  `nvidia-smi -pm`), and no kmod, journalctl, lspci, Slurm, InfiniBand, DCGM or nccl-tests.
* `container` is a GPU container: `dmesg` may not read the kernel ring buffer (`dmesg: read
  kernel buffer failed: Operation not permitted`, exit 1), no systemd (systemctl, journalctl)
  and no kmod; the host's daemons still hold the GPUs, but nothing on the node manages them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType

from fleetfix.errors import LabError

NCCL_TOOLS = (
    "all_reduce_perf",
    "all_gather_perf",
    "broadcast_perf",
    "reduce_perf",
    "reduce_scatter_perf",
    "alltoall_perf",
    "sendrecv_perf",
    "mpirun",
)
TOOL_GROUPS = MappingProxyType(
    {
        "kmod": ("lsmod", "modprobe", "rmmod", "insmod"),
        "systemd": ("systemctl", "journalctl"),
        "journal": ("journalctl",),
        "slurm": ("scontrol", "sinfo", "squeue", "scancel", "sacct"),
        "ib": ("ibstat", "ibstatus", "perfquery"),
        "dcgm": ("dcgmi",),
        "lspci": ("lspci",),
        "nccl-tests": NCCL_TOOLS,
    }
)
"""`without:` names: each takes these commands off the node."""


@dataclass(frozen=True, slots=True)
class Environment:
    """How a node's system around the GPUs looks."""

    name: str
    absent: frozenset[str] = frozenset()
    """Commands the node does not have (not on its PATH)."""
    dmesg_denied: bool = False
    """The kernel ring buffer is not readable (a container without CAP_SYSLOG)."""
    units: bool = True
    """NVIDIA and Slurm daemons run as systemd units (False: nothing runs them)."""
    module_unload: bool = True
    """The kernel can unload modules: /proc/modules has reference counts and users."""
    host_modules: bool = True
    """The InfiniBand, DRM and display modules are loaded beside the NVIDIA ones."""
    passthrough: bool = False
    """Each GPU is passed through alone to a VM: PCI 00:06.0 and on, no NVSwitch, no NVLink."""
    open_module: bool = False
    """The driver is NVIDIA's open kernel module (whatever the board)."""
    signed_modules: bool = False
    """Out-of-tree modules are signed (no `E` taint): the capture's VM kernel."""
    max_gpus: int = 8
    """GPUs the node can see (a VM gets one passed through)."""

    @property
    def has_slurm(self) -> bool:
        return "scontrol" not in self.absent

    @property
    def has_ib(self) -> bool:
        return "ibstat" not in self.absent


def _tools(*groups: str) -> frozenset[str]:
    return frozenset(tool for group in groups for tool in TOOL_GROUPS[group])


ENVIRONMENTS = MappingProxyType(
    {
        "bare-metal": Environment("bare-metal"),
        "vm": Environment(
            "vm",
            absent=_tools("kmod", "systemd", "lspci", "slurm", "ib", "dcgm", "nccl-tests"),
            units=False,
            module_unload=False,
            host_modules=False,
            passthrough=True,
            open_module=True,
            signed_modules=True,
            max_gpus=1,
        ),
        "container": Environment("container", absent=_tools("systemd", "kmod"), dmesg_denied=True),
    }
)
"""Every environment a scenario may name; `bare-metal` is the default (as before)."""


def environment(name: str, without: Iterable[str] = ()) -> Environment:
    """The environment `name` less the tool groups in `without`.

    Raises:
        LabError: no such environment or tool group.
    """
    return _environment(name, tuple(without))


@cache
def _environment(name: str, groups: tuple[str, ...]) -> Environment:
    without = sorted(set(groups))
    found = ENVIRONMENTS.get(name)
    if found is None:
        raise LabError(
            f"unknown environment {name!r}", hint=f"environments: {', '.join(ENVIRONMENTS)}"
        )
    unknown = [group for group in without if group not in TOOL_GROUPS]
    if unknown:
        raise LabError(
            f"unknown tool group {unknown[0]!r}", hint=f"groups: {', '.join(TOOL_GROUPS)}"
        )
    return replace(found, absent=found.absent | _tools(*without)) if without else found
