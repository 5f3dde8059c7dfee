"""GPU facts shared by the nvidia_smi readers: the dataclasses and how raw values become them.

Conventions every reader follows:
- `None` means the tool did not report a value (N/A, [Not Supported], deprecated, absent);
  a reader never turns N/A into 0 or False.
- Values the tool printed as an error (`ERR!`, `Unknown Error`, `GPU is lost`, ...) are also
  `None`, and the field name lands in `GpuFacts.error_fields` so a runbook can see them.
- PCI bus ids are normalised to lower-case `dddddddd:bb:dd.f` (8-hex-digit domain).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from fleetfix.errors import ProbeParseError
from fleetfix.knowledge import recovery

K = TypeVar("K")
V = TypeVar("V")

GpuKey = int | str
"""How summaries name a GPU: its index, or its bus id (then uuid) when the index is unknown."""

_NA_WORDS = frozenset(
    {
        "",
        "n/a",
        "na",
        "not supported",
        "not available",
        "requested functionality has been deprecated",
        "insufficient permissions",
        "not found",
        "unknown",
    }
)
_ERROR_WORDS = frozenset(
    {"err!", "unknown error", "gpu is lost", "gpu lost", "gpu requires reset", "error"}
)
_TRUE_WORDS = frozenset({"yes", "enabled", "active", "on", "true", "enable"})
_FALSE_WORDS = frozenset({"no", "disabled", "not active", "off", "false", "disable"})
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(?:[A-Za-z%/()]+(?:\(s\))?)?$")
_BUS_ID = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)


def normalize_bus_id(raw: str) -> str | None:
    """One spelling of a PCI bus id for every probe, nvidia-smi's: `00000000:1b:00.0`.

    Accepts nvidia-smi's `00000000:1B:00.0`, the kernel's Xid `PCI:0000:1b:00`, lspci's
    `1b:00.0`; None if `raw` is not a bus id."""
    match = _BUS_ID.match(raw.strip())
    if match is None:
        return None
    domain, bus, device = (int(match[k] or "0", 16) for k in ("domain", "bus", "dev"))
    return f"{domain:08x}:{bus:02x}:{device:02x}.{match['fn'] or 0}"


def frozen_map(items: Mapping[K, V] | None = None) -> Mapping[K, V]:
    """A read-only mapping (facts are immutable; `to_data` renders it as a dict)."""
    return MappingProxyType(dict(items or {}))


def _bare(raw: str) -> str:
    """The value without CSV brackets (`[N/A]`) and surrounding blanks."""
    value = raw.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1].strip()
    return value


class ValueReader:
    """Turns nvidia-smi value strings into typed values for one GPU.

    Remembers the fields whose value the tool printed as an error, and raises
    ProbeParseError (with the line when known) for a value that is neither a value nor N/A.
    """

    def __init__(self, probe: str, text: str) -> None:
        self._probe = probe
        self._text = text
        self.error_fields: list[str] = []

    def fail(self, reason: str, line: int | None = None) -> ProbeParseError:
        """The error to raise for output this reader does not understand."""
        return ProbeParseError(self._probe, reason, self._text, line=line)

    def string(self, raw: str | None, name: str) -> str | None:
        """A free-text value, or None for N/A and error values."""
        if raw is None:
            return None
        value = _bare(raw)
        lowered = value.lower()
        if lowered in _ERROR_WORDS:
            self.error_fields.append(name)
            return None
        if lowered in _NA_WORDS:
            return None
        return value

    def integer(self, raw: str | None, name: str, line: int | None = None) -> int | None:
        """An integer with an optional unit (`27 C`, `81920 MiB`, `0 %`, `96 bank(s)`)."""
        number = self.number(raw, name, line)
        if number is None:
            return None
        if number != int(number):
            raise self.fail(f"{name}: expected a whole number, got {raw!r}", line)
        return int(number)

    def number(self, raw: str | None, name: str, line: int | None = None) -> float | None:
        """A decimal number with an optional unit (`67.03 W`, `-7 C`)."""
        value = self.string(raw, name)
        if value is None:
            return None
        match = _NUMBER.match(value)
        if match is None:
            raise self.fail(f"{name}: expected a number, got {raw!r}", line)
        return float(match.group(1))

    def flag(self, raw: str | None, name: str, line: int | None = None) -> bool | None:
        """Yes/No, Enabled/Disabled, Active/Not Active, On/Off as a bool."""
        value = self.string(raw, name)
        if value is None:
            return None
        lowered = value.lower()
        if lowered in _TRUE_WORDS:
            return True
        if lowered in _FALSE_WORDS:
            return False
        raise self.fail(f"{name}: expected yes/no or enabled/disabled, got {raw!r}", line)

    def hex_or_int(self, raw: str | None, name: str, line: int | None = None) -> int | None:
        """A bitmask or id printed as `0x1FF` or `511`."""
        value = self.string(raw, name)
        if value is None:
            return None
        try:
            return int(value, 0)
        except ValueError as exc:
            raise self.fail(f"{name}: expected an integer, got {raw!r}", line) from exc


_SRAM_SOURCE_NAMES = {"mcu": "microcontroller"}


def sram_source_name(key: str) -> str:
    """`sram_l2` (XML/-q) and `l2` (CSV) -> `l2`; CSV `mcu` -> `microcontroller`."""
    name = key.removeprefix("sram_")
    return _SRAM_SOURCE_NAMES.get(name, name)


def recovery_action_name(raw: str | None) -> str | None:
    """The driver's recovery action as a fact name: `Drain and Reset` -> `drain_and_reset`.

    Read through knowledge/recovery.py's table (every nvidia-smi, NVML and Xid 154 wording);
    a value the table does not know is `unknown`, never passed through as free text.
    """
    return recovery.recovery_action_name(raw)


def sum_known(*values: int | None) -> int | None:
    """The sum of the reported values, None when none was reported."""
    known = [value for value in values if value is not None]
    return sum(known) if known else None


@dataclass(frozen=True, slots=True)
class EccCounters:
    """ECC error counts of one kind (volatile: since driver load; aggregate: lifetime).

    `sbe`/`dbe` are the totals: single-bit / double-bit on pre-Ampere GPUs, correctable /
    uncorrectable (SRAM + DRAM) on newer ones. Per-location detail is kept where printed.
    """

    sbe: int | None = None
    dbe: int | None = None
    sram_correctable: int | None = None
    sram_uncorrectable: int | None = None
    sram_uncorrectable_parity: int | None = None
    sram_uncorrectable_secded: int | None = None
    dram_correctable: int | None = None
    dram_uncorrectable: int | None = None
    sram_threshold_exceeded: bool | None = None
    sbe_by_location: Mapping[str, int | None] = field(default_factory=frozen_map)
    dbe_by_location: Mapping[str, int | None] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class EccFacts:
    """ECC mode and counters; `enabled` is the current mode, `pending_enabled` after reboot."""

    enabled: bool | None = None
    pending_enabled: bool | None = None
    volatile: EccCounters = field(default_factory=EccCounters)
    aggregate: EccCounters = field(default_factory=EccCounters)
    aggregate_uncorrectable_sram_sources: Mapping[str, int | None] = field(
        default_factory=frozen_map
    )
    channel_repair_pending: bool | None = None
    tpc_repair_pending: bool | None = None
    unrepairable_memory: bool | None = None


@dataclass(frozen=True, slots=True)
class RetiredPages:
    """Dynamic page retirement (pre-Ampere): retired page counts and a pending retirement."""

    sbe: int | None = None
    dbe: int | None = None
    pending: bool | None = None


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """Row remapping (Ampere+): `pending` needs a GPU reset, `failure` means RMA."""

    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None
    histogram: Mapping[str, int | None] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class Temperatures:
    """Degrees C. Absolute thresholds on older drivers; newer ones report T.Limit margins:
    `tlimit` is the headroom below the limit, `*_tlimit` are offsets from it (may be < 0)."""

    gpu: int | None = None
    memory: int | None = None
    shutdown: int | None = None
    slowdown: int | None = None
    max_operating: int | None = None
    target: int | None = None
    tlimit: int | None = None
    shutdown_tlimit: int | None = None
    slowdown_tlimit: int | None = None
    max_operating_tlimit: int | None = None


@dataclass(frozen=True, slots=True)
class Power:
    """Watts. `draw` is the driver's headline reading (average where it reports both)."""

    draw: float | None = None
    draw_instant: float | None = None
    limit: float | None = None
    default_limit: float | None = None
    max_limit: float | None = None


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Framebuffer memory in MiB."""

    total: int | None = None
    used: int | None = None
    free: int | None = None
    reserved: int | None = None


@dataclass(frozen=True, slots=True)
class Utilization:
    """Percent busy."""

    gpu: int | None = None
    memory: int | None = None


@dataclass(frozen=True, slots=True)
class Clocks:
    """Current and maximum clocks in MHz."""

    graphics: int | None = None
    sm: int | None = None
    memory: int | None = None
    video: int | None = None
    max_graphics: int | None = None
    max_sm: int | None = None
    max_memory: int | None = None


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device (GPU instance + compute instance) on a MIG-enabled GPU."""

    index: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    multiprocessors: int | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    sram_uncorrectable: int | None = None


@dataclass(frozen=True, slots=True)
class MigFacts:
    """MIG mode now (`enabled`) and after the next reset (`pending_enabled`), and its devices
    (None when the output did not list them)."""

    enabled: bool | None = None
    pending_enabled: bool | None = None
    devices: tuple[MigDevice, ...] | None = None


@dataclass(frozen=True, slots=True)
class Fabric:
    """NVLink fabric registration (NVSwitch / NVL systems): state and status as printed."""

    state: str | None = None
    status: str | None = None
    clique_id: str | None = None
    cluster_uuid: str | None = None
    health: str | None = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process the driver reports on a GPU."""

    pid: int
    name: str | None
    type: str | None = None
    used_memory_mib: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class LostGpu:
    """A GPU nvidia-smi could not open ("Unable to determine the device handle ...")."""

    bus_id: str | None
    message: str


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """Everything one GPU reported. `index` is None when the output does not say it."""

    index: int | None
    bus_id: str | None = None
    bus_id_reported: str | None = None
    uuid: str | None = None
    name: str | None = None
    architecture: str | None = None
    serial: str | None = None
    vbios: str | None = None
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    performance_state: str | None = None
    mig: MigFacts = field(default_factory=MigFacts)
    ecc: EccFacts = field(default_factory=EccFacts)
    retired_pages: RetiredPages = field(default_factory=RetiredPages)
    remapped_rows: RemappedRows = field(default_factory=RemappedRows)
    temperature: Temperatures = field(default_factory=Temperatures)
    power: Power = field(default_factory=Power)
    memory: MemoryUsage = field(default_factory=MemoryUsage)
    utilization: Utilization = field(default_factory=Utilization)
    clocks: Clocks = field(default_factory=Clocks)
    throttle_reasons: tuple[str, ...] | None = None
    """Active clock throttle ("clocks event") reasons; () = none active, None = not reported."""
    processes: tuple[GpuProcess, ...] | None = None
    """() = the tool said no processes; None = the output did not show the process list."""
    fabric: Fabric | None = None
    recovery_action: str | None = None
    """The driver's GPU recovery action as a fact name (none, reset, reboot, drain_p2p,
    drain_and_reset, recover_imex_domain, bus_reset, system_reboot, or unknown for a value
    knowledge/recovery.py cannot read); None when the driver does not report one."""
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    error_fields: tuple[str, ...] = ()

    @property
    def key(self) -> GpuKey:
        """The name summaries use: the index, else the bus id, else the uuid."""
        if self.index is not None:
            return self.index
        return self.bus_id or self.uuid or "unknown"


class Format(enum.StrEnum):
    """The nvidia-smi output forms `parse` recognises."""

    XML = "xml"
    TEXT = "text"
    CSV = "csv"
    TABLE = "table"
    ERROR = "error"
    """Only the tool's own failure messages (driver not loaded, no devices, ...)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What one format reader extracted, before the summaries are computed."""

    format: Format
    complete: bool
    gpus: tuple[GpuFacts, ...]
    timestamp: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    attached_gpus: int | None = None


@dataclass(frozen=True, slots=True)
class NvidiaSmiFacts:
    """What the nvidia_smi probe learned about a host's GPUs.

    `complete` is False when the output was partial (a truncated or elided paste, a
    single-GPU `-i` query, a table without its process list): the summaries then only
    cover what was shown. `errors` holds the tool's own failure messages.
    """

    format: Format
    complete: bool
    gpus: tuple[GpuFacts, ...]
    timestamp: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    attached_gpus: int | None = None
    gpu_count: int = 0
    expected_gpus: int | None = None
    count_ok: bool | None = None
    lost_gpus: tuple[LostGpu, ...] = ()
    errors: tuple[str, ...] = ()
    gpus_with_dbe: tuple[GpuKey, ...] = ()
    gpus_with_aggregate_dbe: tuple[GpuKey, ...] = ()
    gpus_with_sbe: tuple[GpuKey, ...] = ()
    retired_pages_pending_gpus: tuple[GpuKey, ...] = ()
    row_remap_pending_gpus: tuple[GpuKey, ...] = ()
    row_remap_failure_gpus: tuple[GpuKey, ...] = ()
    sram_threshold_exceeded_gpus: tuple[GpuKey, ...] = ()
    persistence_off_gpus: tuple[GpuKey, ...] = ()
    hw_slowdown_gpus: tuple[GpuKey, ...] = ()
    recovery_action_gpus: tuple[GpuKey, ...] = ()
    reset_required_gpus: tuple[GpuKey, ...] = ()
    gpus_with_processes: tuple[GpuKey, ...] = ()
    gpus_reporting_errors: tuple[GpuKey, ...] = ()


_HW_SLOWDOWN = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})


def _keys(gpus: tuple[GpuFacts, ...], test: Callable[[GpuFacts], bool]) -> tuple[GpuKey, ...]:
    """Keys of the GPUs for which `test(gpu)` is true."""
    return tuple(gpu.key for gpu in gpus if test(gpu))


def _positive(value: int | None) -> bool:
    return value is not None and value > 0


def _hw_slowdown(gpu: GpuFacts) -> bool:
    return bool(_HW_SLOWDOWN.intersection(gpu.throttle_reasons or ()))


def summarize(
    reading: Reading,
    *,
    expected_gpus: int | None = None,
    lost_gpus: tuple[LostGpu, ...] = (),
    errors: tuple[str, ...] = (),
) -> NvidiaSmiFacts:
    """The reading with counts, `count_ok` and the problem-GPU lists filled in.

    `count_ok` needs the expected count, the same number of GPUs seen (and attached, where
    the output says), no lost GPU and no tool error.
    """
    gpus = reading.gpus
    count_ok = None
    if expected_gpus is not None:
        attached_ok = reading.attached_gpus in (None, expected_gpus)
        count_ok = len(gpus) == expected_gpus and attached_ok and not lost_gpus and not errors
    return NvidiaSmiFacts(
        format=reading.format,
        complete=reading.complete and not errors,
        gpus=gpus,
        timestamp=reading.timestamp,
        driver_version=reading.driver_version,
        cuda_version=reading.cuda_version,
        attached_gpus=reading.attached_gpus,
        gpu_count=len(gpus),
        expected_gpus=expected_gpus,
        count_ok=count_ok,
        lost_gpus=lost_gpus,
        errors=errors,
        gpus_with_dbe=_keys(gpus, lambda g: _positive(g.ecc.volatile.dbe)),
        gpus_with_aggregate_dbe=_keys(gpus, lambda g: _positive(g.ecc.aggregate.dbe)),
        gpus_with_sbe=_keys(gpus, lambda g: _positive(g.ecc.volatile.sbe)),
        retired_pages_pending_gpus=_keys(gpus, lambda g: g.retired_pages.pending is True),
        row_remap_pending_gpus=_keys(gpus, lambda g: g.remapped_rows.pending is True),
        row_remap_failure_gpus=_keys(gpus, lambda g: g.remapped_rows.failure is True),
        sram_threshold_exceeded_gpus=_keys(
            gpus, lambda g: g.ecc.aggregate.sram_threshold_exceeded is True
        ),
        persistence_off_gpus=_keys(gpus, lambda g: g.persistence_mode is False),
        hw_slowdown_gpus=_keys(gpus, _hw_slowdown),
        recovery_action_gpus=_keys(gpus, lambda g: g.recovery_action not in (None, "none")),
        reset_required_gpus=_keys(gpus, lambda g: g.reset_required is True),
        gpus_with_processes=_keys(gpus, lambda g: bool(g.processes)),
        gpus_reporting_errors=_keys(gpus, lambda g: bool(g.error_fields)),
    )
