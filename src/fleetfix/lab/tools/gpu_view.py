"""Per-GPU values nvidia-smi prints, derived once from node state for every output format."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from fleetfix.lab.state import GpuProcess, GpuState, NodeState, stable_hex

H100_MEMORY_MIB = 81559
H100_RESERVED_MIB = 475
POWER_LIMIT_W = 700.0


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

    @property
    def mem_free(self) -> int:
        return self.mem_total - self.mem_reserved - self.mem_used

    @property
    def busy(self) -> bool:
        return bool(self.processes)


def gpu_view(node: NodeState, gpu: GpuState, model: str) -> GpuView:
    processes = tuple(p for p in node.processes if p.gpu == gpu.index)
    busy = bool(processes)
    wobble = int(stable_hex("temp", node.name, gpu.index)[:2], 16) % 6
    reset_required = gpu.remap_pending or _reset_faults(node, gpu.index)
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
        mem_total=H100_MEMORY_MIB,
        mem_reserved=H100_RESERVED_MIB,
        mem_used=sum(p.used_mib for p in processes),
        util=100 if busy else 0,
        pstate="P0",
        graphics_clock=1980 if busy else 345,
        memory_clock=2619,
        volatile_sbe=gpu.volatile_sbe,
        volatile_dbe=gpu.volatile_dbe,
        aggregate_sbe=gpu.aggregate_sbe,
        aggregate_dbe=gpu.aggregate_dbe,
        remap_pending=gpu.remap_pending,
        remap_failure=gpu.remap_failure,
        remap_correctable=gpu.remap_correctable,
        remap_uncorrectable=gpu.remap_uncorrectable,
        reset_required=reset_required,
        recovery_action="Reset" if reset_required else "None",
        processes=processes,
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


def driver_major(driver: str) -> int:
    head = driver.split(".", 1)[0]
    return int(head) if head.isdigit() else 0
