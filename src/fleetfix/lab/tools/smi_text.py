"""`nvidia-smi -q` text and the default `nvidia-smi` table, laid out like the R550 driver.

The `-q` layout follows shared/samples/nvidia-smi-q/gpud-e2e-a10-550.127.05-q-full.txt (keys
padded to column 42, four-space nesting, `Processes : None`); what changes with the driver
version (GPU Recovery Action, deprecated reset flags, column 55 from 580) is in lab/drivers.py,
checked against the real 580.159.04 H200 capture (tests/lab/test_real_forms.py).
The table follows the 550.90.07 H100 samples (89-column frame, trailing spaces on the timestamp
line).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from fleetfix.lab.drivers import DEPRECATED, DriverForms, forms
from fleetfix.lab.tools.gpu_view import GpuView, driver_major, smi_timestamp

Row = tuple[int, str, str | None]

_FRAME = "+" + "-" * 89 + "+"
_HEADER = (
    "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|" + " " * 41 + "|" + " " * 24 + "|" + "MIG M.".rjust(21) + " |",
    "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
)
_GPU_SEPARATOR = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"

# Sections nvidia-smi -d accepts, mapped to the -q section titles they keep.
DISPLAY_SECTIONS = MappingProxyType(
    {
        "MEMORY": ("FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"),
        "UTILIZATION": ("Utilization",),
        "ECC": ("ECC Mode", "ECC Errors"),
        "TEMPERATURE": ("Temperature",),
        "POWER": (
            "GPU Power Readings",
            "GPU Memory Power Readings",
            "GPU Memory Power Readings ",
            "Module Power Readings",
            "Power Smoothing",
            "Workload Power Profiles",
            "EDPp Multiplier",
        ),
        "CLOCK": ("Clocks", "Applications Clocks", "Default Applications Clocks", "Max Clocks"),
        "COMPUTE": ("Compute Mode",),
        "PIDS": ("Processes",),
        "PERFORMANCE": (
            "Performance State",
            "Clocks Event Reasons",
            "Clocks Event Reasons Counters",
        ),
        "PAGE_RETIREMENT": ("Retired Pages",),
        "ROW_REMAPPER": ("Remapped Rows",),
        "RESET_STATUS": ("GPU Reset Status", "GPU Recovery Action"),
    }
)


def render_query(
    views: Sequence[GpuView],
    attached: int,
    *,
    driver: str,
    cuda: str,
    now: float,
    sections: Sequence[str] = (),
) -> str:
    """`nvidia-smi -q` (optionally `-d SECTION,...`)."""
    width = forms(driver).key_width
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        _line(0, "Timestamp", smi_timestamp(now), width),
        _line(0, "Driver Version", driver, width),
        _line(0, "CUDA Version", cuda, width),
        "",
        _line(0, "Attached GPUs", str(attached), width),
    ]
    keep = _kept_titles(sections)
    for view in views:
        out.append(f"GPU {view.bus_id}")
        rows = _gpu_rows(view, driver)
        out.extend(_line(*row, width) for row in _filter(rows, keep))
        out.append("")
    return "\n".join(out) + "\n"


def _kept_titles(sections: Sequence[str]) -> set[str] | None:
    if not sections:
        return None
    return {title for name in sections for title in DISPLAY_SECTIONS.get(name, ())}


def _filter(rows: list[Row], keep: set[str] | None) -> list[Row]:
    if keep is None:
        return rows
    out: list[Row] = []
    inside = False
    for depth, key, value in rows:
        if depth == 1:
            inside = key in keep
        if inside:
            out.append((depth, key, value))
    return out


def _line(depth: int, key: str, value: str | None, width: int) -> str:
    label = "    " * depth + key
    return label if value is None else f"{label:<{width}}: {value}"


def _onoff(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


def _gpu_rows(view: GpuView, driver: str) -> list[Row]:
    shape = forms(driver)
    return [
        *_identity_rows(view, shape),
        *_mode_rows(view, driver, shape),
        *_pci_rows(view, shape),
        (1, "Fan Speed", "N/A"),
        (1, "Performance State", view.pstate),
        *_event_rows(view, shape),
        (1, "Sparse Operation Mode", "Disabled" if shape.q580 else "N/A"),
        *_memory_rows(view),
        (1, "Compute Mode", "Default"),
        *_util_rows(view, shape),
        *_ecc_rows(view, shape),
        *_remap_rows(view, shape),
        *_temperature_rows(view, shape),
        *_power_rows(view, shape),
        *_clock_rows(view, shape),
        *_fabric_rows(view, shape),
        *_process_rows(view),
        *([(1, "Capabilities", None), (2, "EGM", "disabled")] if shape.platform_info else []),
    ]


def _fabric_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    fabric = view.fabric
    if fabric is None:  # the classic board's fixed section
        values = ("Completed", "Success", "N/A", "N/A")
        health: tuple[str, ...] = ("Bandwidth",)
    else:
        values = (fabric.state, fabric.status, fabric.clique_id, fabric.cluster_uuid)
        health = shape.fabric_health
    rows: list[Row] = [(1, "Fabric", None)]
    rows += [(2, key, value) for key, value in zip(_FABRIC_KEYS, values, strict=True)]
    rows.append((2, "Health", None))
    rows += [(3, key, "N/A") for key in health]
    return rows


_FABRIC_KEYS = ("State", "Status", "CliqueId", "ClusterUUID")


def _identity_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    attached: list[Row] = [(1, "Display Attached", "Yes")] if shape.q580 else []
    pdi: list[Row] = [(1, "GPU PDI", view.pdi)] if shape.q580 else []
    module: list[Row] = (
        [
            (1, "Platform Info", None),
            *[
                (2, key, "N/A")
                for key in ("Chassis Serial Number", "Slot Number", "Tray Index", "Host ID")
            ],
            (2, "Peer Type", "N/A"),
            (2, "Module Id", str(view.module_id)),
            (2, "GPU Fabric GUID", "N/A"),
        ]
        if shape.platform_info
        else [(1, "Module ID", str(view.module_id))]
    )
    return [
        (1, "Product Name", view.name),
        (1, "Product Brand", "NVIDIA"),
        (1, "Product Architecture", view.architecture),
        (1, "Display Mode", DEPRECATED if shape.q580 else "Enabled"),
        *attached,
        (1, "Display Active", "Disabled"),
        (1, "Persistence Mode", _onoff(view.persistence)),
        (1, "Addressing Mode", "None"),
        (1, "MIG Mode", None),
        (2, "Current", "Disabled"),
        (2, "Pending", "Disabled"),
        (1, "Accounting Mode", "Disabled"),
        (1, "Accounting Mode Buffer Size", "4000"),
        (1, "Driver Model", None),
        (2, "Current", "N/A"),
        (2, "Pending", "N/A"),
        (1, "Serial Number", view.serial),
        (1, "GPU UUID", view.uuid),
        *pdi,
        (1, "Minor Number", str(view.index)),
        (1, "VBIOS Version", view.identity.vbios),
        (1, "MultiGPU Board", "No"),
        (1, "Board ID", view.board_id),
        (1, "Board Part Number", view.identity.board_part),
        (1, "GPU Part Number", view.identity.gpu_part),
        (1, "FRU Part Number", "N/A"),
        *module,
        (1, "Inforom Version", None),
        (2, "Image Version", view.identity.inforom_image),
        (2, "OEM Object", "2.1"),
        (2, "ECC Object", "7.16"),
        (2, "Power Management Object", "N/A"),
        (1, "Inforom BBX Object Flush", None),
        (2, "Latest Timestamp", "N/A"),
        (2, "Latest Duration", "N/A"),
    ]


def _reset_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    if shape.reset_status == "absent":
        return [(1, "GPU Recovery Action", view.recovery_action)]
    if shape.reset_status == "deprecated":
        return [
            (1, "GPU Reset Status", None),
            (2, "Reset Required", DEPRECATED),
            (2, "Drain and Reset Recommended", DEPRECATED),
            (1, "GPU Recovery Action", view.recovery_action),
        ]
    return [
        (1, "GPU Reset Status", None),
        (2, "Reset Required", _yes(view.reset_required)),
        (2, "Drain and Reset Recommended", _yes(view.reset_required and view.busy)),
    ]


def _mode_rows(view: GpuView, driver: str, shape: DriverForms) -> list[Row]:
    reset = _reset_rows(view, shape)
    return [
        (1, "GPU Operation Mode", None),
        (2, "Current", "N/A"),
        (2, "Pending", "N/A"),
        (1, "GPU C2C Mode", "Disabled" if shape.q580 else "N/A"),
        (1, "GPU Virtualization Mode", None),
        (2, "Virtualization Mode", "Pass-Through" if view.passthrough else "None"),
        (2, "Host VGPU Mode", "N/A"),
        (2, "vGPU Heterogeneous Mode", "N/A"),
        *reset,
        (1, "GSP Firmware Version", driver),
        (1, "IBMNPU", None),
        (2, "Relaxed Ordering Mode", "N/A"),
    ]


def _pci_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    atomic: list[Row] = [(2, "Atomic Caps Inbound", "N/A"), (2, "Atomic Caps Outbound", "N/A")]
    return [
        (1, "PCI", None),
        (2, "Bus", f"0x{view.bus:02X}"),
        (2, "Device", f"0x{view.device:02X}"),
        (2, "Domain", "0x0000"),
        (2, "Base Classcode", "0x3"),
        (2, "Sub Classcode", "0x2"),
        (2, "Device Id", view.device_id),
        (2, "Bus Id", view.bus_id),
        (2, "Sub System Id", view.identity.subsystem),
        (2, "GPU Link Info", None),
        (3, "PCIe Generation", None),
        (4, "Max", "5"),
        (4, "Current", "5"),
        (4, "Device Current", "5"),
        (4, "Device Max", "5"),
        (4, "Host Max", "N/A" if view.passthrough else "5"),
        (3, "Link Width", None),
        (4, "Max", "16x"),
        (4, "Current", "16x"),
        (2, "Bridge Chip", None),
        (3, "Type", "N/A"),
        (3, "Firmware", "N/A"),
        (2, "Replays Since Reset", "0"),
        (2, "Replay Number Rollovers", "0"),
        (2, "Tx Throughput", f"{2100 if view.busy else 0} KB/s"),
        (2, "Rx Throughput", f"{1750 if view.busy else 0} KB/s"),
        *(atomic[::-1] if shape.q580 else atomic),
    ]


def _event_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    idle = "Active" if not view.busy else "Not Active"
    rows: list[Row] = [(1, "Clocks Event Reasons", None), (2, "Idle", idle)]
    for name in ("Applications Clocks Setting", "SW Power Cap", "HW Slowdown"):
        rows.append((2, name, "Not Active"))
    rows += [(3, "HW Thermal Slowdown", "Not Active"), (3, "HW Power Brake Slowdown", "Not Active")]
    for name in ("Sync Boost", "SW Thermal Slowdown", "Display Clock Setting"):
        rows.append((2, name, "Not Active"))
    if shape.q580:
        rows.append((1, "Clocks Event Reasons Counters", None))
        rows += [(2, name, "0 us") for name in _EVENT_COUNTERS]
    return rows


_EVENT_COUNTERS = (
    "SW Power Capping",
    "Sync Boost",
    "SW Thermal Slowdown",
    "HW Thermal Slowdown",
    "HW Power Braking",
)


def _memory_rows(view: GpuView) -> list[Row]:
    return [
        (1, "FB Memory Usage", None),
        (2, "Total", f"{view.mem_total} MiB"),
        (2, "Reserved", f"{view.mem_reserved} MiB"),
        (2, "Used", f"{view.mem_used} MiB"),
        (2, "Free", f"{view.mem_free} MiB"),
        (1, "BAR1 Memory Usage", None),
        (2, "Total", f"{view.identity.bar1_mib} MiB"),
        (2, "Used", "1 MiB"),
        (2, "Free", f"{view.identity.bar1_mib - 1} MiB"),
        (1, "Conf Compute Protected Memory Usage", None),
        (2, "Total", "0 MiB"),
        (2, "Used", "0 MiB"),
        (2, "Free", "0 MiB"),
    ]


def _util_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    rows: list[Row] = [
        (1, "Utilization", None),
        (2, "GPU" if shape.platform_info else "Gpu", f"{view.util} %"),
        (2, "Memory", f"{view.util // 3} %"),
    ]
    rows += [(2, name, "0 %") for name in ("Encoder", "Decoder", "JPEG", "OFA")]
    for title in ("Encoder Stats", "FBC Stats"):
        rows += [
            (1, title, None),
            (2, "Active Sessions", "0"),
            (2, "Average FPS", "0"),
            (2, "Average Latency", "0"),
        ]
    if shape.platform_info:
        rows += [(1, "DRAM Encryption Mode", None), (2, "Current", "N/A"), (2, "Pending", "N/A")]
    return rows


_SRAM_SOURCES = (
    ("l2", "L2"),
    ("sm", "SM"),
    ("microcontroller", "Microcontroller"),
    ("pcie", "PCIE"),
    ("other", "Other"),
)


def _ecc_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    def counts(sbe: int, dbe: int, sram: int) -> list[Row]:
        return [
            (3, "SRAM Correctable", "0"),
            (3, "SRAM Uncorrectable Parity", "0"),
            (3, "SRAM Uncorrectable SEC-DED", str(sram)),
            (3, "DRAM Correctable", str(sbe)),
            (3, "DRAM Uncorrectable", str(dbe)),
        ]

    rows: list[Row] = [
        (1, "ECC Mode", None),
        (2, "Current", "Enabled"),
        (2, "Pending", "Enabled"),
        (1, "ECC Errors", None),
        (2, "Volatile", None),
        *counts(view.volatile_sbe, view.volatile_dbe, view.sram_volatile),
        (2, "Aggregate", None),
        *counts(view.aggregate_sbe, view.aggregate_dbe, view.sram_aggregate),
        (3, "SRAM Threshold Exceeded", _yes(view.sram_threshold)),
        (2, "Aggregate Uncorrectable SRAM Sources", None),
    ]
    rows += [
        (3, f"SRAM {label}", str(view.sram_aggregate if name == view.sram_source else 0))
        for name, label in _SRAM_SOURCES
    ]
    if shape.repair_flags:
        rows += [
            (2, "Channel Repair Pending", "No"),
            (2, "TPC Repair Pending", "No"),
            (2, "Unrepairable Memory", _yes(view.unrepairable)),
        ]
    rows += [
        (1, "Retired Pages", None),
        (2, "Single Bit ECC", "N/A"),
        (2, "Double Bit ECC", "N/A"),
        (2, "Pending Page Blacklist", "N/A"),
    ]
    return rows


def _remap_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    banks = view.remap_histogram
    inactive = shape.inactive_rows
    return [
        (1, "Remapped Rows", None),
        (2, "Correctable Error", str(view.remap_correctable)),
        *([(2, "Inactive Correctable Error", "0")] if inactive else []),
        (2, "Uncorrectable Error", str(view.remap_uncorrectable)),
        *([(2, "Inactive Uncorrectable Error", "0")] if inactive else []),
        (2, "Pending", _yes(view.remap_pending)),
        (2, "Remapping Failure Occurred", _yes(view.remap_failure)),
        (2, "Bank Remap Availability Histogram", None),
        *[
            (3, label, f"{count} bank(s)")
            for label, count in zip(("Max", "High", "Partial", "Low", "None"), banks, strict=True)
        ],
    ]


def _temperature_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    if shape.q580:  # T.Limit-relative thresholds, as in the 580 capture and the 590 sample
        return [
            (1, "Temperature", None),
            (2, "GPU Current Temp", f"{view.temp} C"),
            (2, "GPU T.Limit Temp", f"{87 - view.temp} C"),
            (2, "GPU Shutdown T.Limit Temp", "-5 C"),
            (2, "GPU Slowdown T.Limit Temp", "-2 C"),
            (2, "GPU Max Operating T.Limit Temp", "0 C"),
            (2, "GPU Target Temperature", "N/A"),
            (2, "Memory Current Temp", f"{view.memory_temp} C"),
            (2, "Memory Max Operating T.Limit Temp", "0 C"),
        ]
    return [
        (1, "Temperature", None),
        (2, "GPU Current Temp", f"{view.temp} C"),
        (2, "GPU T.Limit Temp", "N/A"),
        (2, "GPU Shutdown Temp", "92 C"),
        (2, "GPU Slowdown Temp", "89 C"),
        (2, "GPU Max Operating Temp", "87 C"),
        (2, "GPU Target Temperature", "N/A"),
        (2, "Memory Current Temp", f"{view.memory_temp} C"),
        (2, "Memory Max Operating Temp", "95 C"),
    ]


def _power_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    cap = f"{view.identity.power_limit_w:.2f} W"
    limits = (
        ("Current Power Limit", cap),
        ("Requested Power Limit", cap),
        ("Default Power Limit", cap),
        ("Min Power Limit", f"{view.identity.min_power_w:.2f} W"),
        ("Max Power Limit", cap),
    )
    if shape.platform_info:
        return _power_rows_570(view, limits, shape)
    rows: list[Row] = [
        (1, "GPU Power Readings", None),
        (2, "Power Draw", f"{view.power_draw:.2f} W"),
    ]
    rows += [(2, key, value) for key, value in limits]
    rows += [(1, "GPU Memory Power Readings", None), (2, "Power Draw", "N/A")]
    rows += [(1, "Module Power Readings", None), (2, "Power Draw", "N/A")]
    rows += [(2, key, "N/A") for key, _ in limits]
    return rows


def _power_rows_570(
    view: GpuView, limits: tuple[tuple[str, str], ...], shape: DriverForms
) -> list[Row]:
    """Average and instantaneous draw; the memory block's title really ends in a space."""
    rows: list[Row] = [
        (1, "GPU Power Readings", None),
        (2, "Average Power Draw", f"{view.power_draw:.2f} W"),
        (2, "Instantaneous Power Draw", f"{view.power_draw - 0.23:.2f} W"),
    ]
    rows += [(2, key, value) for key, value in limits]
    memory = f"{view.memory_power_draw:.2f} W" if shape.q580 else "N/A"
    rows += [(1, "GPU Memory Power Readings ", None)]
    rows += [(2, "Average Power Draw", memory), (2, "Instantaneous Power Draw", "N/A")]
    rows += [(1, "Module Power Readings", None)]
    rows += [(2, "Average Power Draw", "N/A"), (2, "Instantaneous Power Draw", "N/A")]
    rows += [(2, key, "N/A") for key, _ in limits]
    rows += [(1, "Power Smoothing", "N/A"), (1, "Workload Power Profiles", None)]
    rows += [(2, "Requested Profiles", "N/A"), (2, "Enforced Profiles", "N/A")]
    if shape.edpp:
        rows.append((1, "EDPp Multiplier", "100.00%"))
    return rows


def _clock_rows(view: GpuView, shape: DriverForms) -> list[Row]:
    graphics = f"{view.graphics_clock} MHz"
    max_memory = f"{view.identity.memory_clocks[0]} MHz"
    graphics_app = DEPRECATED if shape.deprecated_app_clocks else "1980 MHz"
    memory_app = DEPRECATED if shape.deprecated_app_clocks else max_memory
    voltage: list[Row] = [] if shape.q580 else [(1, "Voltage", None), (2, "Graphics", "670.000 mV")]
    return [
        (1, "Clocks", None),
        (2, "Graphics", graphics),
        (2, "SM", graphics),
        (2, "Memory", f"{view.memory_clock} MHz"),
        (2, "Video", "765 MHz"),
        (1, "Applications Clocks", None),
        (2, "Graphics", graphics_app),
        (2, "Memory", memory_app),
        (1, "Default Applications Clocks", None),
        (2, "Graphics", graphics_app),
        (2, "Memory", memory_app),
        (1, "Deferred Clocks", None),
        (2, "Memory", "N/A"),
        (1, "Max Clocks", None),
        (2, "Graphics", "1980 MHz"),
        (2, "SM", "1980 MHz"),
        (2, "Memory", max_memory),
        (2, "Video", "1545 MHz"),
        (1, "Max Customer Boost Clocks", None),
        (2, "Graphics", "1980 MHz"),
        (1, "Clock Policy", None),
        (2, "Auto Boost", "N/A"),
        (2, "Auto Boost Default", "N/A"),
        *voltage,
    ]


def _process_rows(view: GpuView) -> list[Row]:
    if not view.processes:
        return [(1, "Processes", "None")]
    rows: list[Row] = [(1, "Processes", None)]
    for process in view.processes:
        rows += [
            (2, "GPU instance ID", "N/A"),
            (2, "Compute instance ID", "N/A"),
            (2, "Process ID", str(process.pid)),
            (3, "Type", "C"),
            (3, "Name", process.name),
            (3, "Used GPU Memory", f"{process.used_mib} MiB"),
        ]
    return rows


def render_table(views: Sequence[GpuView], driver: str, cuda: str, now: float) -> str:
    """The default `nvidia-smi` view: GPU table, then the process table. From 580 the frame
    under the banner is drawn with `+` and the line between the tables is empty (the 580.159.04
    capture, the 590.48.01 sample); before, `|---` and 89 spaces (550, 570 samples)."""
    banner = f"| NVIDIA-SMI {driver:<23}Driver Version: {driver:<15}CUDA Version: {cuda:<9}|"
    late = forms(driver).q580
    header = (_GPU_SEPARATOR, *_HEADER[1:]) if late else _HEADER
    out = [smi_timestamp(now) + "       ", _FRAME, banner, *header]
    for view in views:
        out.extend(_table_gpu(view))
        out.append(_GPU_SEPARATOR)
    out.append("" if late else " " * 89)
    out.extend(_table_processes(views, driver))
    return "\n".join(out) + "\n"


def _table_gpu(view: GpuView) -> list[str]:
    name = view.name if len(view.name) <= 29 else view.name[:26] + "..."
    persistence = "On" if view.persistence else "Off"
    ecc = str(view.volatile_dbe)
    power = f"{round(view.power_draw)}W"
    memory = f"{view.mem_used}MiB"
    cap = f"{view.identity.power_limit_w}W"
    return [
        f"| {view.index:>3}  {name:<29}{persistence:>4}  |{view.bus_id:>19} Off |{ecc:>21} |",
        f"| N/A {view.temp:>4}C    {view.pstate:<2}{power:>16} / {cap:>5} |"
        f"{memory:>11} / {view.mem_total:>6}MiB |{view.util:>7}%{'Default':>13} |",
        f"|{'':41}|{'':24}|{'Disabled':>21} |",
    ]


def _boxed(text: str) -> str:
    return f"|{text:<89}|"


def _table_processes(views: Sequence[GpuView], driver: str) -> list[str]:
    wide = driver_major(driver) >= 560
    pid_width, name_width = (16, 33) if wide else (10, 39)
    pid = "PID".rjust(pid_width + 1)
    out = [
        _FRAME,
        _boxed(" Processes:"),
        _boxed(f"  GPU   GI   CI{pid}   Type   {'Process name':<{name_width}}   GPU Memory "),
        _boxed(f"        ID   ID{'':{pid_width + 11}}{'':<{name_width}}   Usage      "),
        _boxed("=" * 89),
    ]
    rows = [
        f"|{v.index:>5}{'N/A':>6}{'N/A':>5}{p.pid:>{pid_width}}{'C':>7}   "
        f"{p.name[:name_width]:<{name_width}}{str(p.used_mib) + 'MiB':>13} |"
        for v in views
        for p in v.processes
    ]
    out.extend(rows or [_boxed("  No running processes found")])
    out.append(_FRAME)
    return out
