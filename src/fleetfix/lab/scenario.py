"""What a lab scenario is: the fleet's shape and the faults injected per node, as values.

A scenario names the fleet's shape (spines, leaves, racks, nodes, GPUs, model, driver), the
SSH port, the reboot time and, per node, the faults to inject. `scenario_file` reads them
from YAML (docs/lab.md is the format's reference).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from fleetfix.errors import LabError
from fleetfix.lab.boards import board
from fleetfix.lab.environments import environment

RECOVERY_LEVELS = ("reset", "reload", "reboot", "power_cycle", "never")
"""How much it takes to clear a fault, weakest first: a GPU reset, a driver reload, a (warm)
reboot, a cold power cycle through the node's BMC (power removed: what a warm reboot cannot do)."""
INIT_FAILED_RECOVERY = ("reboot", "power_cycle", "never")
"""What can bring back a GPU that failed to initialise: the next boot, a cold one, or nothing."""

NVIDIA_MODULES = ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nvidia")
VM_NVIDIA_MODULES = ("nvidia_uvm", "nvidia")
"""What a VM without display or InfiniBand loads (the real Firecracker H200 capture)."""
THIRD_PARTY_MODULES = ("gdrdrv", "nvidia_fs")
"""Modules other software builds on `nvidia` (GDRCopy, GPUDirect Storage): a scenario installs
them per node; they load at boot and keep `nvidia` in use while loaded."""
EXTRA_UNITS = ("dcgm-exporter", "nvsm")
"""GPU monitoring units a scenario may install per node; while active they hold the GPUs (a
reset is "In use by another client") and the `nvidia` module, as DCGM does."""
IB_PORTS_PER_NODE = 8
NVLINKS_PER_GPU = 18

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = MappingProxyType({"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0})
_RANGE = re.compile(r"\[(\d+)[:-](\d+)\]")


@dataclass(frozen=True, slots=True)
class FleetShape:
    """The fleet's hardware: how many of everything, and what GPUs and driver it runs."""

    spines: int = 1
    leaves: int = 2
    racks: int = 2
    nodes_per_rack: int = 8
    nodes: int | None = None
    gpus_per_node: int = 8
    gpu_model: str = "NVIDIA H100 80GB HBM3"
    driver_version: str = "550.90.07"
    cuda_version: str = "12.4"
    node_name: str = "gpu{:03d}"
    partition: str = "gpu"
    persistence_at_boot: bool = True
    board: str = "classic"
    """The baseboard layout (lab/boards.py); `classic` is the lab's original HGX H100 model."""
    environment: str = "bare-metal"
    """What the nodes run in (lab/environments.py): bare-metal, vm, container."""

    @property
    def node_count(self) -> int:
        full = self.racks * self.nodes_per_rack
        return full if self.nodes is None else min(self.nodes, full)


@dataclass(frozen=True, slots=True)
class Timing:
    """How long slow operations take in the lab, in seconds (kept short for tests)."""

    nccl: float = 0.3
    modprobe: float = 0.2
    gpu_reset: float = 0.2
    service: float = 0.05
    epilog: float = 0.0
    """After a job ends its node stays COMPLETING this long (Slurm's epilog); 0: at once."""


XID_FORMS = ("xid", "xid-short", "bus-off", "bus-off-short")
"""How an Xid 79 reaches the kernel log: the Xid line (default), the short Xid line without
pid, or the driver's "fallen off the bus" messages without any Xid line (long or one line)."""
FABRIC_MANAGER_STATES = ("running", "stopped", "restarted")


@dataclass(frozen=True, slots=True)
class XidFault:
    code: int
    gpu: int
    recovery: str
    ago: float = 600.0
    form: str = "xid"
    action: str | None = None
    """The recovery action the driver reports (drivers.ACTIONS value); None: from `recovery`."""


@dataclass(frozen=True, slots=True)
class EccFault:
    gpu: int
    volatile_sbe: int = 0
    volatile_dbe: int = 0
    aggregate_sbe: int = 0
    aggregate_dbe: int = 0


@dataclass(frozen=True, slots=True)
class RowRemapFault:
    gpu: int
    pending: bool = False
    failure: bool = False
    correctable: int = 0
    uncorrectable: int = 0
    histogram: tuple[int, int, int, int, int] | None = None
    """Banks with Max/High/Partial/Low/None remap availability; None: derived from the rows."""
    unrepairable: bool = False


@dataclass(frozen=True, slots=True)
class SramFault:
    """Uncorrectable SRAM ECC errors (SEC-DED), and the driver's RMA threshold flag."""

    gpu: int
    volatile: int = 0
    aggregate: int = 0
    threshold_exceeded: bool = False
    source: str = "l2"


SRAM_SOURCES = ("l2", "sm", "microcontroller", "pcie", "other")


@dataclass(frozen=True, slots=True)
class SxidFault:
    """An NVSwitch error the switch driver logs; a fatal one stops CUDA work on `gpu`."""

    code: int
    switch: int
    link: int
    fatal: bool
    gpu: int | None = None
    ago: float = 600.0


@dataclass(frozen=True, slots=True)
class NcclWrong:
    """Collectives that include `gpu` return wrong elements (nccl-tests' #wrong column)."""

    elements: int
    gpu: int = 0
    recovery: str = "never"


@dataclass(frozen=True, slots=True)
class StaleShm:
    count: int
    age: float = 7200.0
    size: int = 33554432


@dataclass(frozen=True, slots=True)
class GpuProcessSpec:
    name: str
    gpu: int
    used_mib: int = 1024
    job_id: int | None = None
    """The Slurm job whose cgroup it is in; None: the node's running job, if any. A job Slurm
    does not have (no `slurm: {state: alloc, job_id: N}` for it) makes it a finished job's
    left-over: an orphan."""
    user: str | None = None
    """Its owner (default: its job's user, else root)."""
    args: str = ""
    """Its command line after the name (`train.py --resume`), as ps shows it."""
    ignores_term: bool = False
    """It ignores SIGTERM (a hung rank stuck in a collective): only SIGKILL ends it."""


@dataclass(frozen=True, slots=True)
class SlurmSpec:
    state: str = "idle"
    job_id: int | None = None
    user: str | None = None
    reason: str | None = None
    unreadable: bool = False
    """The node cannot reach slurmctld: Slurm commands run on it fail."""


@dataclass(frozen=True, slots=True)
class BecomeBusy:
    """A Slurm job starts on the node, with CUDA processes on its GPUs."""

    job_id: int | None = None
    user: str = "alice"
    processes: tuple[GpuProcessSpec, ...] = ()
    """Empty: one `python3` on every GPU the driver enumerates and that answers."""
    reservation: str | None = None
    """The job asks for this reservation (`sbatch --reservation=NAME`): it may start on a
    node that reservation holds, and on no other reserved node."""


@dataclass(frozen=True, slots=True)
class Drain:
    """A person drains the node in Slurm (or re-drains it with their own reason)."""

    user: str
    reason: str


@dataclass(frozen=True, slots=True)
class SetDrainReason:
    """A person overwrites the node's Slurm reason, leaving its state alone."""

    user: str
    reason: str


@dataclass(frozen=True, slots=True)
class SlurmUnreadable:
    """The node loses (True) or regains (False) its connection to slurmctld."""

    unreadable: bool = True


NodeChange = BecomeBusy | Drain | SetDrainReason | SlurmUnreadable
"""A change applied to a running node: by a scenario event or an `inject` control request."""


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A change that happens once the node has received `after_commands` SSH exec requests."""

    after_commands: int
    change: NodeChange


@dataclass(frozen=True, slots=True)
class NvlinkDown:
    gpu: int
    link: int


@dataclass(frozen=True, slots=True)
class IbSymbolErrors:
    """An HCA port (`mlx5_<port>`) whose symbol_error counter rises by `per_read` at every read
    of the node's counters (a dirty cable or transceiver; recovery never)."""

    port: int
    per_read: int = 50


@dataclass(frozen=True, slots=True)
class PcieAer:
    """An uncorrected PCIe error on a GPU, in the kernel log since boot (AER: its root port's
    report, the GPU's, and the nvidia driver's `can't recover`); the GPU keeps working in the
    lab, as many do until the next error."""

    gpu: int
    fatal: bool = False
    ago: float = 1200.0


@dataclass(frozen=True, slots=True)
class NcclHang:
    """This node's rank on `gpu` never entered collective `seq` of its Slurm job: the others
    time out waiting for it (the job's logs, lab/joblogs.py)."""

    gpu: int
    seq: int = 9001
    op: str = "ALLREDUCE"


@dataclass(frozen=True, slots=True)
class InitFailed:
    """A GPU on the PCI bus that the driver fails to initialise in every boot until `recovery`
    (`RmInitAdapter failed!` in each such boot's log, no Xid): nvidia-smi lists one fewer."""

    gpu: int
    recovery: str = "reboot"


@dataclass(frozen=True, slots=True)
class BmcCredentials:
    """The user and password of the lab's emulated BMCs (a lab-only secret)."""

    user: str = "admin"
    password: str = "fleetfix-lab"


@dataclass(frozen=True, slots=True)
class NodeBmc:
    """One node's BMC: none at all, or a user or password of its own (differing from the
    fleet's, which the inventory carries: the inventory is wrong for it)."""

    present: bool = True
    user: str | None = None
    password: str | None = None

    def credentials(self, fleet: BmcCredentials) -> BmcCredentials:
        """What this BMC accepts: its own user and password where it has them."""
        return BmcCredentials(
            self.user or fleet.user, fleet.password if self.password is None else self.password
        )


@dataclass(frozen=True, slots=True)
class NodeFaults:
    """Everything injected into one node; the defaults are a healthy node."""

    xids: tuple[XidFault, ...] = ()
    ecc: tuple[EccFault, ...] = ()
    row_remap: tuple[RowRemapFault, ...] = ()
    stale_shm: StaleShm | None = None
    persistence_off: bool = False
    persistence_off_at_boot: bool = False
    modules_unloaded: tuple[str, ...] = ()
    hung_nvidia_smi: str | None = None
    missing_gpus: tuple[int, ...] = ()
    missing_after_reboot: tuple[int, ...] = ()
    gpu_processes: tuple[GpuProcessSpec, ...] = ()
    slurm: SlurmSpec = field(default_factory=SlurmSpec)
    nvlink_down: tuple[NvlinkDown, ...] = ()
    ib_ports_down: tuple[int, ...] = ()
    ib_symbol_errors: tuple[IbSymbolErrors, ...] = ()
    pcie_aer: tuple[PcieAer, ...] = ()
    nccl_hang: NcclHang | None = None
    slow_nccl: float | None = None
    slow_nccl_recovery: str = "never"
    unreachable: bool = False
    flaky_ssh: int | None = None
    slow_ssh_ms: int = 0
    reboot_time: float | None = None
    events: tuple[NodeEvent, ...] = ()
    sram: tuple[SramFault, ...] = ()
    sxids: tuple[SxidFault, ...] = ()
    nccl_wrong: NcclWrong | None = None
    fabric_manager: str = "running"
    """`stopped`: nvidia-fabricmanager was stopped after boot; `restarted`: it was restarted
    without a GPU reset, so Hopper+ GPUs wait in fabric state In Progress."""
    board: str | None = None
    driver_version: str | None = None
    gpu_model: str | None = None
    third_party_modules: tuple[str, ...] = ()
    """Installed modules of THIRD_PARTY_MODULES (loaded at boot)."""
    extra_units: tuple[str, ...] = ()
    """Installed units of EXTRA_UNITS (enabled, running at boot)."""
    environment: str | None = None
    """The node's own environment (None: the fleet's)."""
    without: tuple[str, ...] = ()
    """Tool groups the node lacks beyond its environment's (environments.TOOL_GROUPS)."""
    init_failed: tuple[InitFailed, ...] = ()
    bmc: NodeBmc = field(default_factory=NodeBmc)


@dataclass(frozen=True, slots=True)
class NodeHardware:
    """What one node is made of: its board, GPU model and count, and driver."""

    board: str
    gpu_model: str
    gpus: int
    driver_version: str
    environment: str = "bare-metal"
    without: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole lab: fleet shape, fleet-wide settings and faults per node name."""

    name: str
    description: str
    fleet: FleetShape
    ssh_port: int
    reboot_time: float
    timing: Timing
    degraded_leaves: Mapping[str, float]
    faults: Mapping[str, NodeFaults]
    source: str
    inventory_gpus: bool = True
    """Whether generated inventories carry each host's `gpus=` var."""
    bmc: BmcCredentials = field(default_factory=BmcCredentials)
    """The fleet's BMC credentials (the inventory's `bmc_user` / `bmc_password`)."""

    def faults_of(self, node: str) -> NodeFaults:
        return self.faults.get(node, NodeFaults())

    def bmc_of(self, node: str) -> BmcCredentials | None:
        """The credentials `node`'s BMC accepts; None when the node has no BMC."""
        own = self.faults_of(node).bmc
        return own.credentials(self.bmc) if own.present else None

    def hardware_of(self, node: str) -> NodeHardware:
        return node_hardware(self.fleet, self.faults_of(node))


def node_hardware(fleet: FleetShape, faults: NodeFaults) -> NodeHardware:
    """The fleet's hardware with the node's own `board`, `driver_version`, `gpu_model`."""
    name = faults.board or fleet.board
    layout = board(name)
    model = faults.gpu_model or (fleet.gpu_model if name == fleet.board else layout.gpu_model)
    place = environment(faults.environment or fleet.environment, faults.without)
    return NodeHardware(
        board=name,
        gpu_model=model,
        gpus=min(fleet.gpus_per_node, layout.max_gpus, place.max_gpus),
        driver_version=faults.driver_version or fleet.driver_version,
        environment=faults.environment or fleet.environment,
        without=faults.without,
    )


def node_names(shape: FleetShape) -> tuple[str, ...]:
    return tuple(shape.node_name.format(i) for i in range(1, shape.node_count + 1))


def expand_selector(selector: str) -> tuple[str, ...]:
    """`gpu[003:005]` -> gpu003, gpu004, gpu005 (Ansible-style ranges keep zero padding)."""
    match = _RANGE.search(selector)
    if match is None:
        return (selector,)
    first, last = match.group(1), match.group(2)
    width = len(first) if first.startswith("0") else 0
    head, tail = selector[: match.start()], selector[match.end() :]
    names: list[str] = []
    for number in range(int(first), int(last) + 1):
        names.extend(expand_selector(f"{head}{number:0{width}d}{tail}"))
    return tuple(names)


def parse_duration(value: object, where: str) -> float:
    """Seconds from a number or a string like `90s`, `15m`, `2h`, `500ms`."""
    if isinstance(value, bool):
        raise LabError(f"{where}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.match(str(value))
    if match is None:
        raise LabError(f"{where}: expected a duration like 30s, 15m or 2h, got {value!r}")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]


def leaf_name(index: int) -> str:
    return f"leaf-{index + 1:02d}"


def rack_name(index: int) -> str:
    return f"rack-{index + 1:02d}"


def spine_name(index: int) -> str:
    return f"spine-{index + 1:02d}"
