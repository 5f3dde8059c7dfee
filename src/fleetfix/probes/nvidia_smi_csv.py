"""Read `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` into GPU facts.

With a header the columns are named by it (unit suffixes like ` [MiB]` dropped; values may
carry the unit or not). Without a header the columns must be one of the field lists the
probe itself queries (`FULL_FIELDS`, `BASIC_FIELDS`); anything else is refused, because
guessing which column is which would be guessing the facts.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from fleetfix.errors import ProbeParseError
from fleetfix.probes.gpu_facts import (
    Clocks,
    EccCounters,
    EccFacts,
    Fabric,
    Format,
    GpuFacts,
    MemoryUsage,
    MigFacts,
    Power,
    Reading,
    RemappedRows,
    RetiredPages,
    Temperatures,
    Utilization,
    ValueReader,
    frozen_map,
    normalize_bus_id,
    recovery_action_name,
    sram_source_name,
)
from fleetfix.probes.nvidia_smi_text import Paste

PROBE = "nvidia_smi"

FULL_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "pci.bus_id",
    "name",
    "serial",
    "driver_version",
    "vbios_version",
    "persistence_mode",
    "compute_mode",
    "pstate",
    "mig.mode.current",
    "mig.mode.pending",
    "ecc.mode.current",
    "ecc.mode.pending",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "power.limit",
    "memory.total",
    "memory.used",
    "memory.free",
    "utilization.gpu",
    "utilization.memory",
    "clocks.current.sm",
    "clocks.current.memory",
    "clocks.max.sm",
    "clocks_throttle_reasons.active",
)
"""What the probe's CSV fallback asks for (drivers of the last years know every field)."""

BASIC_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "pci.bus_id",
    "name",
    "driver_version",
    "persistence_mode",
    "pstate",
    "temperature.gpu",
    "power.draw",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
)
"""The last-resort query for old drivers that reject a field of FULL_FIELDS."""

# Query aliases nvidia-smi accepts on the command line but prints under another header.
_ALIASES = {
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
    "power.draw.average": "power.draw",
    "enforced.power.limit": "power.limit",
}
# NVML clock event reason bits, for output that only has the `.active` bitmask.
_REASON_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clocks_setting"),
)
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_HEADER_CELL = re.compile(r"^[A-Za-z_][\w.]*(?:\s*\[[^\]]*\])?$")
_UNIT = re.compile(r"\s*\[[^\]]*\]$")


def _column_key(header: str) -> str:
    key = _UNIT.sub("", header.strip()).lower()
    return _ALIASES.get(key, key)


def looks_like_csv(paste: Paste) -> bool:
    """Every non-blank line has at least one `, ` separator (the CSV form's delimiter)."""
    lines = paste.nonblank()
    return bool(lines) and all("," in line.text for line in lines)


@dataclass(frozen=True, slots=True)
class _Row:
    line: int
    values: Mapping[str, str]


def _split(paste: Paste, text: str) -> tuple[tuple[str, ...], list[_Row], bool]:
    """The column keys, the rows, and whether the last row was cut off."""
    lines = paste.nonblank()
    cells = [[cell.strip() for cell in row] for row in csv.reader(ln.text for ln in lines)]
    if all(_HEADER_CELL.match(cell) for cell in cells[0]):
        keys = tuple(_column_key(cell) for cell in cells[0])
        body = list(zip(lines[1:], cells[1:], strict=True))
    else:
        keys = _noheader_keys(len(cells[0]), text, lines[0].number)
        body = list(zip(lines, cells, strict=True))
    rows: list[_Row] = []
    for position, (line, row) in enumerate(body):
        if len(row) != len(keys):
            if position == len(body) - 1:
                return keys, rows, True
            reason = f"row has {len(row)} values for {len(keys)} columns"
            raise ProbeParseError(PROBE, reason, text, line=line.number)
        rows.append(_Row(line.number, dict(zip(keys, row, strict=True))))
    return keys, rows, False


def _noheader_keys(width: int, text: str, line: int) -> tuple[str, ...]:
    for fields in (FULL_FIELDS, BASIC_FIELDS):
        if width == len(fields):
            return tuple(_column_key(field) for field in fields)
    reason = f"CSV without a header and {width} columns: not a field list this probe queries"
    raise ProbeParseError(PROBE, reason, text, line=line)


def read_csv(paste: Paste, text: str) -> Reading:
    """Facts from `--query-gpu` CSV. A cut-off last row or a `[...]` elision marks the reading
    incomplete; rows after an elision get no index unless an `index` column says it."""
    keys, rows, cut = _split(paste, text)
    if not rows and "index" not in keys and "uuid" not in keys and "pci.bus_id" not in keys:
        raise ProbeParseError(PROBE, "CSV names no GPU column (index, uuid, pci.bus_id)", text)
    gpus = tuple(_CsvGpu(row, ValueReader(PROBE, text)).read() for row in rows)
    first = ValueReader(PROBE, text)
    values = rows[0].values if rows else {}
    attached = first.integer(values.get("count"), "count")
    complete = not (cut or paste.elided) and attached in (None, len(gpus))
    return Reading(
        format=Format.CSV,
        complete=complete,
        gpus=gpus,
        timestamp=first.string(values.get("timestamp"), "timestamp"),
        driver_version=first.string(values.get("driver_version"), "driver_version"),
        attached_gpus=attached,
    )


class _CsvGpu:
    """One CSV row as GPU facts."""

    def __init__(self, row: _Row, values: ValueReader) -> None:
        self.row = row
        self.values = values

    def raw(self, *keys: str) -> str | None:
        return next((self.row.values[k] for k in keys if k in self.row.values), None)

    def text(self, *keys: str) -> str | None:
        return self.values.string(self.raw(*keys), keys[0])

    def integer(self, *keys: str) -> int | None:
        return self.values.integer(self.raw(*keys), keys[0], self.row.line)

    def number(self, *keys: str) -> float | None:
        return self.values.number(self.raw(*keys), keys[0], self.row.line)

    def flag(self, *keys: str) -> bool | None:
        return self.values.flag(self.raw(*keys), keys[0], self.row.line)

    def read(self) -> GpuFacts:
        reported = self.text("pci.bus_id")
        gpu = GpuFacts(
            index=self.integer("index"),
            bus_id=normalize_bus_id(reported) if reported else None,
            bus_id_reported=reported,
            uuid=self.text("uuid"),
            name=self.text("name"),
            serial=self.text("serial"),
            vbios=self.text("vbios_version"),
            persistence_mode=self.flag("persistence_mode"),
            compute_mode=self.text("compute_mode"),
            performance_state=self.text("pstate"),
            mig=MigFacts(
                enabled=self.flag("mig.mode.current"), pending_enabled=self.flag("mig.mode.pending")
            ),
            ecc=self.ecc(),
            retired_pages=RetiredPages(
                sbe=self.integer("retired_pages.single_bit_ecc.count", "retired_pages.sbe"),
                dbe=self.integer("retired_pages.double_bit.count", "retired_pages.dbe"),
                pending=self.flag("retired_pages.pending"),
            ),
            remapped_rows=self.remapped_rows(),
            temperature=Temperatures(
                gpu=self.integer("temperature.gpu"),
                memory=self.integer("temperature.memory"),
                tlimit=self.integer("temperature.gpu.tlimit"),
            ),
            power=Power(
                draw=self.number("power.draw"),
                draw_instant=self.number("power.draw.instant"),
                limit=self.number("power.limit"),
                default_limit=self.number("power.default_limit"),
                max_limit=self.number("power.max_limit"),
            ),
            memory=MemoryUsage(
                total=self.integer("memory.total"),
                used=self.integer("memory.used"),
                free=self.integer("memory.free"),
                reserved=self.integer("memory.reserved"),
            ),
            utilization=Utilization(
                gpu=self.integer("utilization.gpu"), memory=self.integer("utilization.memory")
            ),
            clocks=self.clocks(),
            throttle_reasons=self.throttle_reasons(),
            fabric=self.fabric(),
            recovery_action=recovery_action_name(self.text("gpu_recovery_action")),
        )
        errors = tuple(dict.fromkeys(self.values.error_fields))
        return replace(gpu, error_fields=errors) if errors else gpu

    def ecc(self) -> EccFacts:
        prefix = "ecc.errors.uncorrected.aggregate.sram."
        sources = {
            sram_source_name(key.removeprefix(prefix)): self.integer(key)
            for key in self.row.values
            if key.startswith(prefix) and key.removeprefix(prefix) not in _SRAM_FIELDS
        }
        return EccFacts(
            enabled=self.flag("ecc.mode.current"),
            pending_enabled=self.flag("ecc.mode.pending"),
            volatile=self.ecc_counters("volatile"),
            aggregate=self.ecc_counters("aggregate"),
            aggregate_uncorrectable_sram_sources=frozen_map(sources),
        )

    def ecc_counters(self, kind: str) -> EccCounters:
        corrected, uncorrected = f"ecc.errors.corrected.{kind}.", f"ecc.errors.uncorrected.{kind}."
        return EccCounters(
            sbe=self.integer(corrected + "total"),
            dbe=self.integer(uncorrected + "total"),
            sram_correctable=self.integer(corrected + "sram"),
            sram_uncorrectable=self.integer(uncorrected + "sram"),
            sram_uncorrectable_parity=self.integer(uncorrected + "sram.parity"),
            sram_uncorrectable_secded=self.integer(uncorrected + "sram.secded"),
            dram_correctable=self.integer(corrected + "dram"),
            dram_uncorrectable=self.integer(uncorrected + "dram"),
            sram_threshold_exceeded=self.flag(uncorrected + "sram.thresholdexceeded"),
            sbe_by_location=frozen_map(self.locations(corrected)),
            dbe_by_location=frozen_map(self.locations(uncorrected)),
        )

    def locations(self, prefix: str) -> dict[str, int | None]:
        """Per-location counters (device_memory, register_file, l1_cache, ...)."""
        return {
            key.removeprefix(prefix): self.integer(key)
            for key in self.row.values
            if key.startswith(prefix) and key.removeprefix(prefix) in _LOCATIONS
        }

    def remapped_rows(self) -> RemappedRows:
        prefix = "remapped_rows.histogram."
        histogram = {
            key.removeprefix(prefix): self.integer(key)
            for key in self.row.values
            if key.startswith(prefix)
        }
        return RemappedRows(
            correctable=self.integer("remapped_rows.correctable"),
            uncorrectable=self.integer("remapped_rows.uncorrectable"),
            pending=self.flag("remapped_rows.pending"),
            failure=self.flag("remapped_rows.failure"),
            histogram=frozen_map(histogram),
        )

    def clocks(self) -> Clocks:
        return Clocks(
            graphics=self.integer("clocks.current.graphics"),
            sm=self.integer("clocks.current.sm"),
            memory=self.integer("clocks.current.memory"),
            video=self.integer("clocks.current.video"),
            max_graphics=self.integer("clocks.max.graphics"),
            max_sm=self.integer("clocks.max.sm"),
            max_memory=self.integer("clocks.max.memory"),
        )

    def throttle_reasons(self) -> tuple[str, ...] | None:
        states: dict[str, bool | None] = {}
        for key in self.row.values:
            for prefix in _REASON_PREFIXES:
                name = key.removeprefix(prefix)
                if key.startswith(prefix) and name not in ("supported", "active"):
                    states[name] = self.flag(key)
        if states and any(state is not None for state in states.values()):
            return tuple(name for name, state in states.items() if state)
        mask_key = next(
            (p + "active" for p in _REASON_PREFIXES if p + "active" in self.row.values), None
        )
        mask = self.values.hex_or_int(self.raw(mask_key), "throttle_reasons") if mask_key else None
        if mask is None:
            return None
        return tuple(name for bit, name in _REASON_BITS if mask & bit)

    def fabric(self) -> Fabric | None:
        if not any(key.startswith("fabric.") for key in self.row.values):
            return None
        return Fabric(
            state=self.text("fabric.state"),
            status=self.text("fabric.status"),
            clique_id=self.text("fabric.cliqueid"),
            cluster_uuid=self.text("fabric.clusteruuid"),
            health=self.text("fabric.health.summary"),
        )


_SRAM_FIELDS = frozenset({"parity", "secded", "thresholdexceeded"})
_LOCATIONS = frozenset(
    {
        "device_memory",
        "register_file",
        "l1_cache",
        "l2_cache",
        "texture_memory",
        "texture_shm",
        "cbu",
    }
)
