"""`nvidia-smi -q -x`: the XML log, shaped like the real nvsmi_device_v12/v13 output.

Real nvidia-smi writes tab-indented XML with `<?xml version="1.0" ?>`, a DOCTYPE naming the
DTD, empty containers as an open/close pair and a blank line after each `</gpu>` (see
shared/samples/nvidia-smi-xml/). Drivers before 570 use the v12 DTD (GPU reset status, plain
power draw, *_threshold temperatures); newer ones v13 (recovery action, PDI, platform info,
average/instant power, T.Limit thresholds, the longer fabric health block).
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from fleetfix.lab.drivers import DEPRECATED, DriverForms, forms
from fleetfix.lab.tools.gpu_view import GpuView, smi_timestamp

Element = tuple[str, "str | list[Element]"]

_SUPPORTED_GRAPHICS = tuple(range(1980, 344, -15))


def render_xml(
    views: Sequence[GpuView], attached: int, *, driver: str, cuda: str, now: float, fabric_ok: bool
) -> str:
    shape = forms(driver)
    v13 = shape.xml_v13
    out = [
        '<?xml version="1.0" ?>',
        f'<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_{"v13" if v13 else "v12"}.dtd">',
        "<nvidia_smi_log>",
        f"\t<timestamp>{smi_timestamp(now)}</timestamp>",
        f"\t<driver_version>{driver}</driver_version>",
        f"\t<cuda_version>{cuda}</cuda_version>",
        f"\t<attached_gpus>{attached}</attached_gpus>",
    ]
    for view in views:
        out.append(f'\t<gpu id="{view.bus_id}">')
        out.extend(_render(_gpu(view, driver, shape, fabric_ok), 2))
        out.append("\t</gpu>")
        out.append("")
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


def _render(elements: list[Element], depth: int) -> list[str]:
    pad = "\t" * depth
    out: list[str] = []
    for tag, value in elements:
        if tag == "#text" and isinstance(value, str):
            out.append(pad + value)
        elif isinstance(value, str):
            out.append(f"{pad}<{tag}>{escape(value)}</{tag}>")
        else:
            out.append(f"{pad}<{tag}>")
            out.extend(_render(value, depth + 1))
            out.append(f"{pad}</{tag}>")
    return out


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _gpu(view: GpuView, driver: str, shape: DriverForms, fabric_ok: bool) -> list[Element]:
    v13 = shape.xml_v13
    processes: list[Element] = [
        ("process_info", _process(p.pid, p.name, p.used_mib)) for p in view.processes
    ]
    return [
        *_identity(view, shape),
        *_modes(view, driver, shape),
        ("pci", _pci(view)),
        ("fan_speed", "N/A"),
        ("performance_state", view.pstate),
        ("clocks_event_reasons", _event_reasons(view)),
        *_event_counters(v13),
        ("sparse_operation_mode", "Disabled" if shape.q580 else "N/A"),
        *_memory(view),
        ("compute_mode", "Default"),
        ("utilization", _utilization(view)),
        ("encoder_stats", _stats()),
        ("fbc_stats", _stats()),
        *_dram_encryption(shape),
        ("ecc_mode", [("current_ecc", "Enabled"), ("pending_ecc", "Enabled")]),
        ("ecc_errors", _ecc(view, v13)),
        ("retired_pages", _retired_pages()),
        ("remapped_rows", _remapped_rows(view, shape)),
        ("temperature", _temperature(view, shape)),
        (
            "supported_gpu_target_temp",
            [("gpu_target_temp_min", "N/A"), ("gpu_target_temp_max", "N/A")],
        ),
        *_power(view, shape),
        *_clocks(view),
        *_voltage(shape),
        ("fabric", _fabric(view, fabric_ok, shape)),
        ("supported_clocks", _supported_clocks(view)),
        ("processes", processes),
        ("accounted_processes", []),
        *_capabilities(v13),
    ]


def _capabilities(v13: bool) -> list[Element]:
    return [("capabilities", [("egm", "disabled")])] if v13 else []


def _identity(view: GpuView, shape: DriverForms) -> list[Element]:
    v13 = shape.xml_v13
    platform: list[Element] = (
        [
            (
                "platformInfo",
                [
                    ("chassis_serial_number", "N/A"),
                    ("slot_number", "N/A"),
                    ("tray_index", "N/A"),
                    ("host_id", "N/A"),
                    ("peer_type", "N/A"),
                    ("module_id", str(view.module_id)),
                    ("gpu_fabric_guid", "N/A"),
                ],
            )
        ]
        if v13
        else [("gpu_module_id", str(view.module_id))]
    )
    return [
        ("product_name", view.name),
        ("product_brand", "NVIDIA"),
        ("product_architecture", view.architecture),
        ("display_mode", DEPRECATED if shape.q580 else "Enabled"),
        *([("display_attached", "Yes")] if shape.q580 else []),
        ("display_active", "Disabled"),
        ("persistence_mode", _enabled(view.persistence)),
        ("addressing_mode", "None"),
        ("mig_mode", [("current_mig", "Disabled"), ("pending_mig", "Disabled")]),
        ("mig_devices", [("#text", "None")]),
        ("accounting_mode", "Disabled"),
        ("accounting_mode_buffer_size", "4000"),
        ("driver_model", [("current_dm", "N/A"), ("pending_dm", "N/A")]),
        ("serial", view.serial),
        ("uuid", view.uuid),
        *([("pdi", view.pdi)] if v13 else []),
        ("minor_number", str(view.index)),
        ("vbios_version", view.identity.vbios),
        ("multigpu_board", "No"),
        ("board_id", view.board_id),
        ("board_part_number", view.identity.board_part),
        ("gpu_part_number", view.identity.gpu_part),
        ("gpu_fru_part_number", "N/A"),
        *platform,
        (
            "inforom_version",
            [
                ("img_version", view.identity.inforom_image),
                ("oem_object", "2.1"),
                ("ecc_object", "7.16"),
                ("pwr_object", "N/A"),
            ],
        ),
        ("inforom_bbx_flush", [("latest_timestamp", "N/A"), ("latest_duration", "N/A")]),
    ]


def _modes(view: GpuView, driver: str, shape: DriverForms) -> list[Element]:
    reset: list[Element] = (
        [("gpu_recovery_action", view.recovery_action)]
        if shape.xml_v13
        else [
            (
                "gpu_reset_status",
                [
                    ("reset_required", _yes(view.reset_required)),
                    ("drain_and_reset_recommended", _yes(view.reset_required and view.busy)),
                ],
            )
        ]
    )
    return [
        ("gpu_operation_mode", [("current_gom", "N/A"), ("pending_gom", "N/A")]),
        ("c2c_mode", "Disabled" if shape.q580 else "N/A"),
        (
            "gpu_virtualization_mode",
            [
                ("virtualization_mode", "Pass-Through" if view.passthrough else "None"),
                ("host_vgpu_mode", "N/A"),
                ("vgpu_heterogeneous_mode", "N/A"),
            ],
        ),
        *reset,
        ("gsp_firmware_version", driver),
        ("ibmnpu", [("relaxed_ordering_mode", "N/A")]),
    ]


def _pci(view: GpuView) -> list[Element]:
    return [
        ("pci_bus", f"{view.bus:02X}"),
        ("pci_device", f"{view.device:02X}"),
        ("pci_domain", "0000"),
        ("pci_base_class", "3"),
        ("pci_sub_class", "2"),
        ("pci_device_id", view.device_id[2:]),
        ("pci_bus_id", view.bus_id),
        ("pci_sub_system_id", view.identity.subsystem[2:]),
        (
            "pci_gpu_link_info",
            [
                (
                    "pcie_gen",
                    [
                        ("max_link_gen", "5"),
                        ("current_link_gen", "5"),
                        ("device_current_link_gen", "5"),
                        ("max_device_link_gen", "5"),
                        ("max_host_link_gen", "N/A" if view.passthrough else "5"),
                    ],
                ),
                ("link_widths", [("max_link_width", "16x"), ("current_link_width", "16x")]),
            ],
        ),
        ("pci_bridge_chip", [("bridge_chip_type", "N/A"), ("bridge_chip_fw", "N/A")]),
        ("replay_counter", "0"),
        ("replay_rollover_counter", "0"),
        ("tx_util", f"{2100 if view.busy else 0} KB/s"),
        ("rx_util", f"{1750 if view.busy else 0} KB/s"),
        ("atomic_caps_outbound", "N/A"),
        ("atomic_caps_inbound", "N/A"),
    ]


def _event_reasons(view: GpuView) -> list[Element]:
    names = (
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "display_clocks_setting",
    )
    idle = not view.busy
    return [
        (f"clocks_event_reason_{name}", "Active" if name == "gpu_idle" and idle else "Not Active")
        for name in names
    ]


def _event_counters(v13: bool) -> list[Element]:
    if not v13:
        return []
    names = (
        "sw_power_cap",
        "sync_boost",
        "sw_therm_slowdown",
        "hw_therm_slowdown",
        "hw_power_brake",
    )
    counters: list[Element] = [(f"clocks_event_reasons_counters_{n}", "0 us") for n in names]
    return [("clocks_event_reasons_counters", counters)]


def _memory(view: GpuView) -> list[Element]:
    return [
        (
            "fb_memory_usage",
            [
                ("total", f"{view.mem_total} MiB"),
                ("reserved", f"{view.mem_reserved} MiB"),
                ("used", f"{view.mem_used} MiB"),
                ("free", f"{view.mem_free} MiB"),
            ],
        ),
        (
            "bar1_memory_usage",
            [
                ("total", f"{view.identity.bar1_mib} MiB"),
                ("used", "1 MiB"),
                ("free", f"{view.identity.bar1_mib - 1} MiB"),
            ],
        ),
        ("cc_protected_memory_usage", [("total", "0 MiB"), ("used", "0 MiB"), ("free", "0 MiB")]),
    ]


def _utilization(view: GpuView) -> list[Element]:
    return [
        ("gpu_util", f"{view.util} %"),
        ("memory_util", f"{view.util // 3} %"),
        ("encoder_util", "0 %"),
        ("decoder_util", "0 %"),
        ("jpeg_util", "0 %"),
        ("ofa_util", "0 %"),
    ]


def _stats() -> list[Element]:
    return [("session_count", "0"), ("average_fps", "0"), ("average_latency", "0")]


def _ecc(view: GpuView, v13: bool) -> list[Element]:
    def counts(sbe: int, dbe: int, sram: int) -> list[Element]:
        return [
            ("sram_correctable", "0"),
            ("sram_uncorrectable_parity", "0"),
            ("sram_uncorrectable_secded", str(sram)),
            ("dram_correctable", str(sbe)),
            ("dram_uncorrectable", str(dbe)),
        ]

    aggregate = counts(view.aggregate_sbe, view.aggregate_dbe, view.sram_aggregate)
    aggregate.append(("sram_threshold_exceeded", _yes(view.sram_threshold)))
    sources: list[Element] = [
        (f"sram_{name}", str(view.sram_aggregate if name == view.sram_source else 0))
        for name in ("l2", "sm", "microcontroller", "pcie", "other")
    ]
    repair: list[Element] = (
        [
            ("channel_repair_pending", "No"),
            ("tpc_repair_pending", "No"),
            ("unrepairable_memory", _yes(view.unrepairable)),
        ]
        if v13
        else []
    )
    return [
        ("volatile", counts(view.volatile_sbe, view.volatile_dbe, view.sram_volatile)),
        ("aggregate", aggregate),
        ("aggregate_uncorrectable_sram_sources", sources),
        *repair,
    ]


def _retired_pages() -> list[Element]:
    return [
        ("multiple_single_bit_retirement", [("retired_count", "N/A"), ("retired_pagelist", "N/A")]),
        ("double_bit_retirement", [("retired_count", "N/A"), ("retired_pagelist", "N/A")]),
        ("pending_blacklist", "N/A"),
        ("pending_retirement", "N/A"),
    ]


def _remapped_rows(view: GpuView, shape: DriverForms) -> list[Element]:
    v13 = shape.xml_v13
    histogram: list[Element] = [
        (f"row_remapper_histogram_{name}", f"{count} bank(s)")
        for name, count in zip(
            ("max", "high", "partial", "low", "none"), view.remap_histogram, strict=True
        )
    ]
    inactive_corr: list[Element] = [("remapped_row_corr_inactive", "0")] if v13 else []
    inactive_unc: list[Element] = [("remapped_row_unc_inactive", "0")] if v13 else []
    return [
        ("remapped_row_corr", str(view.remap_correctable)),
        *inactive_corr,
        ("remapped_row_unc", str(view.remap_uncorrectable)),
        *inactive_unc,
        ("remapped_row_pending", _yes(view.remap_pending)),
        ("remapped_row_failure", _yes(view.remap_failure)),
        ("row_remapper_histogram", histogram),
    ]


def _temperature(view: GpuView, shape: DriverForms) -> list[Element]:
    if shape.xml_v13:
        memory_limit = "0 C" if shape.q580 else "N/A"  # HBM: 0 C in the 580.159.04 capture
        return [
            ("gpu_temp", f"{view.temp} C"),
            ("gpu_temp_tlimit", f"{87 - view.temp} C"),
            ("gpu_temp_max_tlimit_threshold", "-5 C"),
            ("gpu_temp_slow_tlimit_threshold", "-2 C"),
            ("gpu_temp_max_gpu_tlimit_threshold", "0 C"),
            ("gpu_target_temperature", "N/A"),
            ("memory_temp", f"{view.memory_temp} C"),
            ("gpu_temp_max_mem_tlimit_threshold", memory_limit),
        ]
    return [
        ("gpu_temp", f"{view.temp} C"),
        ("gpu_temp_tlimit", "N/A"),
        ("gpu_temp_max_threshold", "92 C"),
        ("gpu_temp_slow_threshold", "89 C"),
        ("gpu_temp_max_gpu_threshold", "87 C"),
        ("gpu_target_temperature", "N/A"),
        ("memory_temp", f"{view.memory_temp} C"),
        ("gpu_temp_max_mem_threshold", "95 C"),
    ]


def _power(view: GpuView, shape: DriverForms) -> list[Element]:
    v13 = shape.xml_v13
    draw: list[Element] = (
        [
            ("average_power_draw", f"{view.power_draw:.2f} W"),
            ("instant_power_draw", f"{view.power_draw - 0.23:.2f} W"),
        ]
        if v13
        else [("power_draw", f"{view.power_draw:.2f} W")]
    )
    cap = f"{view.identity.power_limit_w:.2f} W"
    limits: list[Element] = [
        ("current_power_limit", cap),
        ("requested_power_limit", cap),
        ("default_power_limit", cap),
        ("min_power_limit", f"{view.identity.min_power_w:.2f} W"),
        ("max_power_limit", cap),
    ]
    module_draw: list[Element] = [(tag, "N/A") for tag, _ in draw]
    return [
        ("gpu_power_readings", [("power_state", view.pstate), *draw, *limits]),
        *_memory_power(view, shape),
        (
            "module_power_readings",
            [
                ("power_state", view.pstate),
                *module_draw,
                *[(tag, "N/A") for tag, _ in limits],
            ],
        ),
        *_power_extras(shape),
    ]


def _voltage(shape: DriverForms) -> list[Element]:
    """Gone from 580 (the 580.159.04 capture has no <voltage>)."""
    return [] if shape.q580 else [("voltage", [("graphics_volt", "670.000 mV")])]


def _power_extras(shape: DriverForms) -> list[Element]:
    """580+: power smoothing and workload power profiles (the 580.159.04 capture)."""
    if not shape.q580:
        return []
    profiles: list[Element] = [
        ("power_profile_requested_profiles", "N/A"),
        ("power_profile_enforced_profiles", "N/A"),
    ]
    return [("power_smoothing", "N/A"), ("power_profiles", profiles)]


def _dram_encryption(shape: DriverForms) -> list[Element]:
    if not shape.q580:
        return []
    modes: list[Element] = [("current_dram_encryption", "N/A"), ("pending_dram_encryption", "N/A")]
    return [("dram_encryption_mode", modes)]


def _memory_power(view: GpuView, shape: DriverForms) -> list[Element]:
    """Only v13 logs have this block (v12 drivers print it in -q text alone); 580+ measure
    the average (the 580.159.04 capture)."""
    if not shape.xml_v13:
        return []
    average = f"{view.memory_power_draw:.2f} W" if shape.q580 else "N/A"
    draws: list[Element] = [("average_power_draw", average), ("instant_power_draw", "N/A")]
    return [("gpu_memory_power_readings", draws)]


def _clocks(view: GpuView) -> list[Element]:
    graphics = f"{view.graphics_clock} MHz"
    memory = f"{view.identity.memory_clocks[0]} MHz"
    return [
        (
            "clocks",
            [
                ("graphics_clock", graphics),
                ("sm_clock", graphics),
                ("mem_clock", f"{view.memory_clock} MHz"),
                ("video_clock", "765 MHz"),
            ],
        ),
        ("applications_clocks", [("graphics_clock", "1980 MHz"), ("mem_clock", memory)]),
        ("default_applications_clocks", [("graphics_clock", "1980 MHz"), ("mem_clock", memory)]),
        ("deferred_clocks", [("mem_clock", "N/A")]),
        (
            "max_clocks",
            [
                ("graphics_clock", "1980 MHz"),
                ("sm_clock", "1980 MHz"),
                ("mem_clock", memory),
                ("video_clock", "1545 MHz"),
            ],
        ),
        ("max_customer_boost_clocks", [("graphics_clock", "1980 MHz")]),
        ("clock_policy", [("auto_boost", "N/A"), ("auto_boost_default", "N/A")]),
    ]


_HEALTH_V13 = (
    "summary",
    "bandwidth",
    "route_recovery_in_progress",
    "route_unhealthy",
    "access_timeout_recovery",
    "incorrect_configuration",
)


def _fabric(view: GpuView, fabric_ok: bool, shape: DriverForms) -> list[Element]:
    fabric = view.fabric
    if fabric is None:  # the classic board: Completed while nvidia-fabricmanager runs
        return [
            ("state", "Completed" if fabric_ok else "Not Started"),
            ("status", "Success" if fabric_ok else "N/A"),
            ("cliqueId", "N/A"),
            ("clusterUuid", "N/A"),
            ("health", [("bandwidth", "N/A")]),
        ]
    names = _HEALTH_V13 if shape.xml_v13 else ("bandwidth",)
    partition = ("partition_assigned",) if shape.inactive_rows else ()
    health: list[Element] = [(name, "N/A") for name in (*names, *partition)]
    return [
        ("state", fabric.state),
        ("status", fabric.status),
        ("cliqueId", fabric.clique_id),
        ("clusterUuid", fabric.cluster_uuid),
        ("health", health),
    ]


def _supported_clocks(view: GpuView) -> list[Element]:
    graphics: list[Element] = [
        ("supported_graphics_clock", f"{c} MHz") for c in _SUPPORTED_GRAPHICS
    ]
    return [
        ("supported_mem_clock", [("value", f"{memory} MHz"), *graphics])
        for memory in view.identity.memory_clocks
    ]


def _process(pid: int, name: str, used_mib: int) -> list[Element]:
    return [
        ("gpu_instance_id", "N/A"),
        ("compute_instance_id", "N/A"),
        ("pid", str(pid)),
        ("type", "C"),
        ("process_name", name),
        ("used_memory", f"{used_mib} MiB"),
    ]
