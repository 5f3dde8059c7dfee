"""Per-GPU values nvidia-smi prints, derived once from node state for every output format."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from fleetfix.lab import drivers
from fleetfix.lab.boards import H100_IDENTITY, GpuIdentity
from fleetfix.lab.state import COMPLETED, GpuProcess, GpuState, NodeState, stable_hex, stable_uuid

NO_CLUSTER = "00000000-0000-0000-0000-000000000000"
driver_major = drivers.driver_major


@dataclass(frozen=True, slots=True)
class FabricView:
    """The GPU's NVLink fabric section (`nvidia-smi -q` Fabric, XML <fabric>, fabric.* fields)."""

    state: str
    status: str
    clique_id: str
    cluster_uuid: str


@dataclass(frozen=True, slots=True)
class GpuView:
    """Everything the nvidia-smi formats need about one GPU, as numbers and words."""

    index: int
    name: str
    bus_id: str
    bus: int
    uuid: str
    serial: str
    module_id: int
    persistence: bool
    temp: int
    memory_temp: int
    power_draw: float
    mem_total: int
    mem_reserved: int
    mem_used: int
    util: int
    pstate: str
    graphics_clock: int
    memory_clock: int
    volatile_sbe: int
    volatile_dbe: int
    aggregate_sbe: int
    aggregate_dbe: int
    remap_pending: bool
    remap_failure: bool
    remap_correctable: int
    remap_uncorrectable: int
    reset_required: bool
    recovery_action: str
    processes: tuple[GpuProcess, ...]
    classic: bool = True
    """The classic board (lab/boards.py): its output stays what the lab always printed."""
    architecture: str = "Hopper"
    device_id: str = "0x233010DE"
    fabric: FabricView | None = None
    """None on the classic board: its fixed fabric values (see smi_text/smi_xml/smi_query)."""
    remap_histogram: tuple[int, int, int, int, int] = (H100_IDENTITY.remap_banks, 0, 0, 0, 0)
    unrepairable: bool = False
    sram_volatile: int = 0
    sram_aggregate: int = 0
    sram_threshold: bool = False
    sram_source: str = "l2"
    identity: GpuIdentity = H100_IDENTITY
    """The model's firmware, part numbers, clocks and power limits."""
    device: int = 0
    """PCI device number (a VM's passed-through GPU: 6 and on)."""
    passthrough: bool = False
    """Passed through to a VM: Virtualization Mode Pass-Through, no host link generation."""

    @property
    def mem_free(self) -> int:
        return self.mem_total - self.mem_reserved - self.mem_used

    @property
    def busy(self) -> bool:
        return bool(self.processes)

    @property
    def board_id(self) -> str:
        """nvidia-smi's Board ID: the PCI slot's number (0x1b00 on an HGX bus, 0x6 in a VM)."""
        return f"0x{self.device:x}" if self.passthrough else f"0x{self.bus:x}00"

    @property
    def memory_power_draw(self) -> float:
        """HBM power (580+ -q reports it: 52.36 W on the idle H200 capture, 43.19 W H100)."""
        return round(self.power_draw * 0.65, 2)

    @property
    def pdi(self) -> str:
        """The GPU PDI (590+): a stable 64-bit id, derived from the serial."""
        return f"0x{int(self.serial) * 7919 % (1 << 64):016x}"


def gpu_view(node: NodeState, gpu: GpuState, model: str) -> GpuView:
    processes = tuple(p for p in node.processes if p.gpu == gpu.index)
    busy = bool(processes)
    wobble = int(stable_hex("temp", node.name, gpu.index)[:2], 16) % 6
    reset_required = gpu.remap_pending or _reset_faults(node, gpu.index)
    if drivers.forms(node.driver).recovery_action:
        action = node.recovery_action(gpu.index)
    else:
        action = drivers.RESET if reset_required else drivers.NONE
    board = node.board
    return GpuView(
        index=gpu.index,
        name=model,
        bus_id=gpu.bus_id,
        bus=gpu.bus,
        uuid=gpu.uuid,
        serial=gpu.serial,
        module_id=gpu.index + 1,
        persistence=gpu.persistence,
        temp=(58 if busy else 26) + wobble,
        memory_temp=(64 if busy else 33) + wobble,
        power_draw=(612.0 if busy else 68.0) + wobble + 0.13 * gpu.index,
        mem_total=board.memory_mib,
        mem_reserved=board.identity.reserved_mib,
        mem_used=sum(p.used_mib for p in processes),
        util=100 if busy else 0,
        pstate="P0",
        graphics_clock=1980 if busy else 345,
        memory_clock=board.identity.memory_clocks[0],
        volatile_sbe=gpu.volatile_sbe,
        volatile_dbe=gpu.volatile_dbe,
        aggregate_sbe=gpu.aggregate_sbe,
        aggregate_dbe=gpu.aggregate_dbe,
        remap_pending=gpu.remap_pending,
        remap_failure=gpu.remap_failure,
        remap_correctable=gpu.remap_correctable,
        remap_uncorrectable=gpu.remap_uncorrectable,
        reset_required=reset_required,
        recovery_action=action,
        processes=processes,
        classic=board.classic,
        architecture=board.architecture,
        device_id=board.device_id,
        fabric=None if board.classic else _fabric(node, gpu),
        remap_histogram=gpu.remap_histogram or _histogram(gpu, board.identity.remap_banks),
        unrepairable=gpu.unrepairable or gpu.remap_failure,
        sram_volatile=gpu.sram_volatile,
        sram_aggregate=gpu.sram_aggregate,
        sram_threshold=gpu.sram_threshold,
        sram_source=gpu.sram_source,
        identity=board.identity,
        device=gpu.device,
        passthrough=node.env.passthrough,
    )


def _histogram(gpu: GpuState, banks: int) -> tuple[int, int, int, int, int]:
    used = min(gpu.remap_correctable + gpu.remap_uncorrectable, banks)
    return banks - used, used, 0, 0, 0


def _fabric(node: NodeState, gpu: GpuState) -> FabricView:
    state = node.fabric_state(gpu)
    if state == "N/A":
        return FabricView("N/A", "N/A", "N/A", "N/A")
    done = state == COMPLETED
    if node.board.imex:
        clique = str(int(stable_hex("clique", node.spec.rack)[:4], 16) % 32767)
        cluster = stable_uuid("nvl-domain", node.spec.rack)
    else:
        clique, cluster = "0", NO_CLUSTER
    return FabricView(
        state=state,
        status="Success" if done else "N/A",
        clique_id=clique if done else "N/A",
        cluster_uuid=cluster if done else "N/A",
    )


def _reset_faults(node: NodeState, index: int) -> bool:
    return any(f.kind == "xid" and f.gpu == index and f.recovery == "reset" for f in node.faults)


def smi_timestamp(now: float) -> str:
    """nvidia-smi's timestamp: `Tue Jul 14 08:12:38 2026` (day padded with a space)."""
    moment = datetime.fromtimestamp(now, tz=UTC)
    return moment.strftime("%a %b ") + f"{moment.day:2d}" + moment.strftime(" %H:%M:%S %Y")


def csv_timestamp(now: float) -> str:
    """The `timestamp` query field: `2026/07/14 08:12:53.500`."""
    moment = datetime.fromtimestamp(now, tz=UTC)
    return moment.strftime("%Y/%m/%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
