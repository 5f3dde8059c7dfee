"""`nvidia-smi --query-gpu=...` and `--query-compute-apps=...`, `--format=csv[,noheader,nounits]`.

Headers print each field's canonical name with its unit in brackets (`memory.total [MiB]`) even
with `nounits`, as the real tool does (shared/samples/query-gpu-csv/); values carry the unit
unless `nounits`; unavailable values print `[N/A]`. Any field name nvidia-smi documents for the
R550 driver is accepted, aliases included (`gpu_name` -> `name`, `clocks.gr` ->
`clocks.current.graphics`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleetfix.lab.state import GpuProcess
from fleetfix.lab.tools.gpu_view import GpuView, csv_timestamp

NA = "[N/A]"


@dataclass(frozen=True, slots=True)
class Env:
    """What a field value may depend on beyond the GPU."""

    driver: str
    now: float
    count: int


Getter = Callable[[GpuView, Env], str]


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    unit: str | None
    get: Getter
    aliases: tuple[str, ...] = ()

    @property
    def header(self) -> str:
        return f"{self.name} [{self.unit}]" if self.unit else self.name


def _const(value: str) -> Getter:
    return lambda view, env: value


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


def _reason(active: Callable[[GpuView], bool]) -> Getter:
    return lambda view, env: "Active" if active(view) else "Not Active"


def _identity_fields() -> list[Field]:
    return [
        Field("timestamp", None, lambda v, e: csv_timestamp(e.now)),
        Field("driver_version", None, lambda v, e: e.driver),
        Field("count", None, lambda v, e: str(e.count)),
        Field("name", None, lambda v, e: v.name, ("gpu_name",)),
        Field("serial", None, lambda v, e: v.serial, ("gpu_serial",)),
        Field("uuid", None, lambda v, e: v.uuid, ("gpu_uuid",)),
        Field("pci.bus_id", None, lambda v, e: v.bus_id, ("gpu_bus_id",)),
        Field("pci.domain", None, _const("0x0000")),
        Field("pci.bus", None, lambda v, e: f"0x{v.bus:02X}"),
        Field("pci.device", None, lambda v, e: f"0x{v.device:02X}"),
        Field("pci.baseClass", None, _const("0x3")),
        Field("pci.subClass", None, _const("0x2")),
        Field("pci.device_id", None, lambda v, e: v.device_id),
        Field("pci.sub_device_id", None, lambda v, e: v.identity.subsystem),
        *[
            Field(f"pcie.link.gen.{k}", None, _const("5"))
            for k in ("current", "gpucurrent", "max", "gpumax", "hostmax")
        ],
        Field("pcie.link.width.current", None, _const("16")),
        Field("pcie.link.width.max", None, _const("16")),
        Field("index", None, lambda v, e: str(v.index)),
        Field("display_mode", None, _const("Enabled")),
        Field("display_active", None, _const("Disabled")),
        Field("persistence_mode", None, lambda v, e: _enabled(v.persistence)),
        Field("addressing_mode", None, _const("None")),
        Field("accounting.mode", None, _const("Disabled")),
        Field("accounting.buffer_size", None, _const("4000")),
        Field("driver_model.current", None, _const(NA)),
        Field("driver_model.pending", None, _const(NA)),
        Field("vbios_version", None, lambda v, e: v.identity.vbios),
        Field("inforom.img", None, lambda v, e: v.identity.inforom_image, ("inforom.image",)),
        Field("inforom.oem", None, _const("2.1")),
        Field("inforom.ecc", None, _const("7.16")),
        Field("inforom.pwr", None, _const(NA), ("inforom.power",)),
        Field("gpu_recovery_action", None, lambda v, e: v.recovery_action),
        Field("gom.current", None, _const(NA), ("gpu_operation_mode.current",)),
        Field("gom.pending", None, _const(NA), ("gpu_operation_mode.pending",)),
        Field("fan.speed", "%", _const(NA)),
        Field("pstate", None, lambda v, e: v.pstate),
        Field("compute_mode", None, _const("Default")),
        Field("compute_cap", None, _const("9.0")),
        Field("mig.mode.current", None, _const("Disabled")),
        Field("mig.mode.pending", None, _const("Disabled")),
        Field("fabric.state", None, _fabric(0, "Completed")),
        Field("fabric.status", None, _fabric(1, "Success")),
    ]


def _fabric(position: int, classic: str) -> Getter:
    """A fabric.* value: the GPU's (FabricView field `position`), or the classic board's."""

    def get(view: GpuView, env: Env) -> str:
        if view.fabric is None:
            return classic
        value = (
            view.fabric.state,
            view.fabric.status,
            view.fabric.clique_id,
            view.fabric.cluster_uuid,
        )[position]
        return NA if value == "N/A" else value

    return get


def _event_fields() -> list[Field]:
    fields = [
        Field("clocks_event_reasons.supported", None, _const("0x00000000000001FF")),
        Field(
            "clocks_event_reasons.active",
            None,
            lambda v, e: "0x0000000000000000" if v.busy else "0x0000000000000001",
        ),
        Field("clocks_event_reasons.gpu_idle", None, _reason(lambda v: not v.busy)),
    ]
    for name in (
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
        "sync_boost",
    ):
        fields.append(Field(f"clocks_event_reasons.{name}", None, _const("Not Active")))
    throttle = [
        Field(f.name.replace("clocks_event_reasons", "clocks_throttle_reasons"), f.unit, f.get)
        for f in fields
    ]
    return [Field(f.name, f.unit, f.get, (t.name,)) for f, t in zip(fields, throttle, strict=True)]


def _memory_fields() -> list[Field]:
    return [
        Field("memory.total", "MiB", lambda v, e: f"{v.mem_total} MiB"),
        Field("memory.reserved", "MiB", lambda v, e: f"{v.mem_reserved} MiB"),
        Field("memory.used", "MiB", lambda v, e: f"{v.mem_used} MiB"),
        Field("memory.free", "MiB", lambda v, e: f"{v.mem_free} MiB"),
        Field("utilization.gpu", "%", lambda v, e: f"{v.util} %"),
        Field("utilization.memory", "%", lambda v, e: f"{v.util // 3} %"),
        *[
            Field(f"utilization.{k}", "%", _const("0 %"))
            for k in ("encoder", "decoder", "jpeg", "ofa")
        ],
    ]


def _ecc_fields() -> list[Field]:
    fields = [
        Field("ecc.mode.current", None, _const("Enabled")),
        Field("ecc.mode.pending", None, _const("Enabled")),
    ]
    counters: dict[tuple[str, str], Callable[[GpuView], int]] = {
        ("corrected", "volatile"): lambda v: v.volatile_sbe,
        ("corrected", "aggregate"): lambda v: v.aggregate_sbe,
        ("uncorrected", "volatile"): lambda v: v.volatile_dbe,
        ("uncorrected", "aggregate"): lambda v: v.aggregate_dbe,
    }
    for (kind, scope), count in counters.items():
        fields.extend(_ecc_scope(kind, scope, count))
    for scope, sram in (("volatile", _sram_volatile), ("aggregate", _sram_aggregate)):
        fields.append(Field(f"ecc.errors.uncorrected.{scope}.sram.parity", None, _const("0")))
        fields.append(Field(f"ecc.errors.uncorrected.{scope}.sram.secded", None, sram))
    fields.append(
        Field(
            "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded",
            None,
            lambda v, e: _yes(v.sram_threshold),
        )
    )
    return fields


def _sram_volatile(view: GpuView, env: Env) -> str:
    return str(view.sram_volatile)


def _sram_aggregate(view: GpuView, env: Env) -> str:
    return str(view.sram_aggregate)


def _ecc_scope(kind: str, scope: str, count: Callable[[GpuView], int]) -> list[Field]:
    prefix = f"ecc.errors.{kind}.{scope}"
    memory: Getter = lambda v, e: str(count(v))  # noqa: E731 - one getter shared by three names
    fields = [
        Field(f"{prefix}.device_memory", None, memory),
        Field(f"{prefix}.dram", None, memory),
        Field(f"{prefix}.sram", None, _sram_volatile if scope == "volatile" else _sram_aggregate)
        if kind == "uncorrected"
        else Field(f"{prefix}.sram", None, _const("0")),
        Field(f"{prefix}.total", None, memory),
    ]
    for unit in ("register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm", "cbu"):
        fields.append(Field(f"{prefix}.{unit}", None, _const(NA)))
    return fields


def _remap_fields() -> list[Field]:
    def bank(position: int) -> Getter:
        def get(v: GpuView, e: Env) -> str:
            if v.classic and position:  # the classic board always printed 0 for these
                return "0"
            return str(v.remap_histogram[position])

        return get

    return [
        Field("retired_pages.single_bit_ecc.count", None, _const(NA), ("retired_pages.sbe",)),
        Field("retired_pages.double_bit.count", None, _const(NA), ("retired_pages.dbe",)),
        Field("retired_pages.pending", None, _const(NA)),
        Field("remapped_rows.correctable", None, lambda v, e: str(v.remap_correctable)),
        Field("remapped_rows.uncorrectable", None, lambda v, e: str(v.remap_uncorrectable)),
        Field("remapped_rows.pending", None, lambda v, e: _yes(v.remap_pending)),
        Field("remapped_rows.failure", None, lambda v, e: _yes(v.remap_failure)),
        *[
            Field(f"remapped_rows.histogram.{k}", None, bank(position))
            for position, k in enumerate(("max", "high", "partial", "low", "none"))
        ],
    ]


def _thermal_fields() -> list[Field]:
    return [
        Field("temperature.gpu", None, lambda v, e: str(v.temp)),
        Field("temperature.gpu.tlimit", None, lambda v, e: str(87 - v.temp)),
        Field("temperature.memory", None, lambda v, e: str(v.memory_temp)),
        Field("power.management", None, _const("Enabled")),
        Field("power.draw", "W", lambda v, e: f"{v.power_draw:.2f} W"),
        Field("power.draw.average", "W", lambda v, e: f"{v.power_draw:.2f} W"),
        Field("power.draw.instant", "W", lambda v, e: f"{v.power_draw - 0.23:.2f} W"),
        Field("power.limit", "W", _power_cap),
        Field("enforced.power.limit", "W", _power_cap),
        Field("power.default_limit", "W", _power_cap),
        Field("power.min_limit", "W", lambda v, e: f"{v.identity.min_power_w:.2f} W"),
        Field("power.max_limit", "W", _power_cap),
    ]


def _power_cap(view: GpuView, env: Env) -> str:
    return f"{view.identity.power_limit_w:.2f} W"


def _max_memory(view: GpuView, env: Env) -> str:
    return f"{view.identity.memory_clocks[0]} MHz"


def _clock_fields() -> list[Field]:
    def current(v: GpuView, e: Env) -> str:
        return f"{v.graphics_clock} MHz"

    def memory(v: GpuView, e: Env) -> str:
        return f"{v.memory_clock} MHz"

    fields = [
        Field("clocks.current.graphics", "MHz", current, ("clocks.gr",)),
        Field("clocks.current.sm", "MHz", current, ("clocks.sm",)),
        Field("clocks.current.memory", "MHz", memory, ("clocks.mem",)),
        Field("clocks.current.video", "MHz", _const("765 MHz"), ("clocks.video",)),
    ]
    for group in ("applications", "default_applications", "max"):
        short = {
            "applications": "clocks.applications",
            "default_applications": "clocks.default_applications",
            "max": "clocks.max",
        }[group]
        fields.append(
            Field(f"clocks.{group}.graphics", "MHz", _const("1980 MHz"), (f"{short}.gr",))
        )
        fields.append(Field(f"clocks.{group}.memory", "MHz", _max_memory, (f"{short}.mem",)))
    fields.append(Field("clocks.max.sm", "MHz", _const("1980 MHz")))
    return fields


def _misc_fields() -> list[Field]:
    """Fields newer drivers add; constant on an H100 HGX node (values as in the real capture)."""
    constants = {
        "vgpu_driver_capability.heterogenous_multivGPU": NA,
        "display_attached": "No",
        "inforom.checksum_validation": "valid",
        "encoder.stats.sessionCount": "0",
        "encoder.stats.averageFps": "0",
        "encoder.stats.averageLatency": "0",
        "dramEncryption.mode.current": NA,
        "dramEncryption.mode.pending": NA,
        "gsp.mode.current": "Enabled",
        "gsp.mode.default": "Enabled",
        "c2c.mode": "Disabled",
        "platform.chassis_serial_number": "",
        "platform.slot_number": "0",
        "platform.tray_index": "0",
        "platform.host_id": "1",
        "platform.peer_type": "Direct Connected",
        "platform.gpu_fabric_guid": "0x0000000000000000",
        "hostname": NA,
    }
    fields = [Field(name, None, _const(value)) for name, value in constants.items()]
    fields.append(Field("fabric.cliqueId", None, _fabric(2, "0")))
    fields.append(
        Field("fabric.clusterUuid", None, _fabric(3, "00000000-0000-0000-0000-000000000000"))
    )
    for name in (
        "fractional_multiVgpu",
        "heterogeneous_timeSlice_profile",
        "heterogeneous_timeSlice_sizes",
        "homogeneous_placements",
        "mig_timeSlicing",
        "mig_timeSlicing_mode",
    ):
        fields.append(Field(f"vgpu_device_capability.{name}", None, _const(NA)))
    for name in (
        "summary",
        "bandwidth",
        "route_recovery_in_progress",
        "route_unhealthy",
        "access_timeout_recovery",
        "incorrect_configuration",
    ):
        fields.append(Field(f"fabric.health.{name}", None, _const("N/A")))
    fields.append(Field("platform.module_id", None, lambda v, e: str(v.module_id)))
    fields.append(Field("edpp_multiplier", "%", _const("100.00 %")))
    for name in ("total", "used", "free"):
        fields.append(Field(f"protected_memory.{name}", "MiB", _const("0 MiB")))
    return fields + _counter_fields() + _power_extra_fields()


def _counter_fields() -> list[Field]:
    names = (
        "sw_power_cap",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    )
    fields = [Field(f"clocks_event_reasons_counters.{n}", "us", _const("0 us")) for n in names]
    for name, source in (
        ("l2", "l2"),
        ("sm", "sm"),
        ("mcu", "microcontroller"),
        ("pcie", "pcie"),
        ("other", "other"),
    ):
        fields.append(
            Field(f"ecc.errors.uncorrected.aggregate.sram.{name}", None, _sram_source(source))
        )
    return fields


def _sram_source(source: str) -> Getter:
    return lambda v, e: str(v.sram_aggregate if v.sram_source == source else 0)


def _power_extra_fields() -> list[Field]:
    module = ("draw.average", "draw.instant", "limit", "default_limit", "min_limit", "max_limit")
    fields = [Field(f"module.power.{name}", "W", _const(NA)) for name in module]
    fields.append(Field("module.enforced.power.limit", "W", _const(NA)))
    smoothing = {
        "delayed_power_smoothing_supported": None,
        "primary_power_floor": "W",
        "secondary_power_floor": "W",
        "min_primary_floor_activation_offset": "W",
        "min_primary_floor_activation_point": "W",
        "window_multiplier": "ms",
        "curr_profile.secondary_power_floor": "W",
        "curr_profile.primary_floor_act_window_multiplier": None,
        "curr_profile.primary_floor_tar_window_multiplier": None,
        "curr_profile.primary_floor_act_offset": "W",
        "admin_override.secondary_power_floor": "W",
        "admin_override.primary_floor_act_window_multiplier": None,
        "admin_override.primary_floor_tar_window_multiplier": None,
        "admin_override.primary_floor_act_offset": "W",
    }
    fields += [Field(f"power_smoothing.{n}", unit, _const(NA)) for n, unit in smoothing.items()]
    return fields


def gpu_fields() -> dict[str, Field]:
    """Every --query-gpu field by name and alias."""
    table: dict[str, Field] = {}
    for group in (
        _identity_fields,
        _event_fields,
        _memory_fields,
        _ecc_fields,
        _remap_fields,
        _thermal_fields,
        _clock_fields,
        _misc_fields,
    ):
        for spec in group():
            for key in (spec.name, *spec.aliases):
                table[key.lower()] = spec
    return table


def app_fields() -> dict[str, Field]:
    """--query-compute-apps fields; their values come from (view, process) pairs."""
    return {
        name: Field(header, unit, _const(""))
        for name, header, unit in (
            ("timestamp", "timestamp", None),
            ("gpu_name", "gpu_name", None),
            ("gpu_bus_id", "gpu_bus_id", None),
            ("gpu_serial", "gpu_serial", None),
            ("gpu_uuid", "gpu_uuid", None),
            ("pid", "pid", None),
            ("process_name", "process_name", None),
            ("name", "process_name", None),
            ("used_memory", "used_gpu_memory", "MiB"),
            ("used_gpu_memory", "used_gpu_memory", "MiB"),
        )
    }


@dataclass(frozen=True, slots=True)
class CsvFormat:
    header: bool = True
    units: bool = True


def parse_format(value: str) -> CsvFormat | None:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if "csv" not in parts or any(p not in ("csv", "noheader", "nounits") for p in parts):
        return None
    return CsvFormat(header="noheader" not in parts, units="nounits" not in parts)


def unknown_field(names: Sequence[str], table: dict[str, Field]) -> str | None:
    for name in names:
        if name.lower() not in table:
            return name
    return None


def render_gpu_csv(views: Sequence[GpuView], names: Sequence[str], fmt: CsvFormat, env: Env) -> str:
    table = gpu_fields()
    fields = [table[name.lower()] for name in names]
    rows = [", ".join(f.header for f in fields)] if fmt.header else []
    for view in views:
        rows.append(", ".join(_strip(f.get(view, env), f.unit, fmt) for f in fields))
    return "".join(row + "\n" for row in rows)


def render_apps_csv(
    views: Sequence[GpuView], names: Sequence[str], fmt: CsvFormat, env: Env
) -> str:
    table = app_fields()
    fields = [table[name.lower()] for name in names]
    rows = [", ".join(f.header for f in fields)] if fmt.header else []
    for view in views:
        for process in view.processes:
            values = [_app_value(name.lower(), view, process, env) for name in names]
            rows.append(
                ", ".join(_strip(v, f.unit, fmt) for v, f in zip(values, fields, strict=True))
            )
    return "".join(row + "\n" for row in rows)


def _app_value(name: str, view: GpuView, process: GpuProcess, env: Env) -> str:
    values = {
        "timestamp": csv_timestamp(env.now),
        "gpu_name": view.name,
        "gpu_bus_id": view.bus_id,
        "gpu_serial": view.serial,
        "gpu_uuid": view.uuid,
        "pid": str(process.pid),
        "process_name": process.name,
        "name": process.name,
        "used_memory": f"{process.used_mib} MiB",
        "used_gpu_memory": f"{process.used_mib} MiB",
    }
    return values[name]


def _strip(value: str, unit: str | None, fmt: CsvFormat) -> str:
    if fmt.units or unit is None or value.startswith("["):
        return value
    return value.removesuffix(f" {unit}")
