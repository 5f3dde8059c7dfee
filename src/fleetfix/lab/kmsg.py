"""The kernel messages a lab node logs: boot banner, driver load/unload, Xid and SXid events.

Xid lines follow the real NVRM shapes in shared/samples/dmesg-xid/ (e.g. `NVRM: Xid
(PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.`); the short
Xid 79 line is the one in nvsentinel-155-comment-xid79-line.txt, and the "fallen off the bus and
is not responding to commands" record is the driver's own (open-gpu-kernel-modules nv.c), one
printk whose lines dmesg shows indented. SXid lines follow the convention in NVIDIA's Fabric
Manager user guide (`nvidia-nvswitchN: SXid (PCI:...): 12028, Non-fatal, Link 61 ...`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from fleetfix.lab.drivers import NONE, DriverForms, strongest
from fleetfix.lab.scenario import SxidFault
from fleetfix.lab.state import GpuState, LogLine

KERNEL_RELEASE = "5.15.0-105-generic"
KERNEL_VERSION = "#115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024"
DRIVER_BUILD_DATE = "Fri May 31 09:35:42 UTC 2024"
GCC_VERSION = "gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)"
OPEN_MODULE_BUILDER = "dvs-builder@U22-I3-AE18-23-3"

LOG_ERR = 3
LOG_WARNING = 4
LOG_NOTICE = 5
LOG_INFO = 6

_XID_TEXT = MappingProxyType(
    {
        13: "Graphics SM Warp Exception on (GPC 4, TPC 1, SM 0): Out Of Range Address",
        31: "Ch 0000000c, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_T1_0 faulted @ "
        "0x7f3a_12340000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        43: "channel 0x0000000a",
        45: "Ch 00000010",
        48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
        "at partition 6, subpartition 0.",
        63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
        64: "Row Remapper: Failed to remap row, row remapping resources exhausted.",
        74: "NVLink: fatal error detected on link 5(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
        79: "GPU has fallen off the bus.",
        92: "High single-bit ECC error rate detected",
        94: "Ch 00000008, Contained: CE User Channel (0x8). RST: No, D-RST: No",
        95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
        109: "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
        119: "Timeout after 6s of waiting for RPC response from GPU GSP! Expected function 76 "
        "(GSP_RM_CONTROL) (0x20802a02 0x8).",
        120: "GSP task exception: (reason 0x4, cause 0x0). Fault at 0x1a2b3c.",
        # NVLink5 (Blackwell) shapes from dmesg-xid/gpud-pr1160-... and nccl-2241-...
        144: "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 0x00000000 "
        "0x00000000 0x00000000)",
        145: "RLW_RXPIPE Nonfatal XC0 i0 Link 11 (0x00000004 0x00000000 0x00000000 0x00000000 "
        "0x00000000 0x00000000)",
        149: "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 "
        "0x00000000 0x00000000)",
    }
)
_BANNER = (
    f"Linux version {KERNEL_RELEASE} (buildd@lcy02-amd64-007) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04)"
    f" 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) {KERNEL_VERSION}"
    " (Ubuntu 5.15.0-105.115-generic 5.15.149)"
)
_NO_PROCESS_CODES = frozenset({79, 48, 63, 64, 74, 92, 95, 119, 120, 144, 145, 149})
SXID_TEXT = MappingProxyType(
    {
        11004: "Ingress invalid ACL",
        12020: "egress sequence ID error",
        12028: "egress non-posted PRIV error",
        19084: "AN1 Heartbeat Timeout Error",
        20009: "RX Short Error Rate",
        20034: "LTSSM Fault Up",
        22013: "Minion Link DLREQ interrupt",
        24007: "sourcetrack timeout error",
        28006: "MC TS crumbstore MCTO",
    }
)
"""Error strings of SXids seen in the field (NVIDIA's guide, tables of non-fatal/fatal SXids)."""
FATAL_SXIDS = frozenset({12020, 20034, 24007})


@dataclass(frozen=True, slots=True)
class DriverBuild:
    """Which kernel module a node runs and what its system loads beside it."""

    open_module: bool = False
    """NVIDIA's open kernel module (`NVIDIA UNIX Open Kernel Module for x86_64`)."""
    host_modules: bool = True
    """nvidia_modeset, nvidia_peermem and the InfiniBand stack load too (not in the VM)."""
    legacy_persistence: bool = False
    """No nvidia-persistenced: boot scripts run `nvidia-smi -pm 1`, which the driver warns
    about (the real VM's log)."""


def boot_lines(
    driver: str, gpus: list[GpuState], build: DriverBuild = DriverBuild()
) -> list[LogLine]:
    """What a node logs while booting with the NVIDIA driver loaded."""
    lines = [
        LogLine(0.0, LOG_NOTICE, _BANNER),
        LogLine(0.0, LOG_INFO, f"Command line: BOOT_IMAGE=/vmlinuz-{KERNEL_RELEASE} ro quiet"),
    ]
    if build.host_modules:
        lines.append(
            LogLine(4.218733, LOG_INFO, "mlx5_core 0000:18:00.0: firmware version: 28.39.1002")
        )
    lines.append(
        LogLine(9.331021, LOG_WARNING, "nvidia: loading out-of-tree module taints kernel.")
    )
    lines.extend(driver_load_lines(driver, 9.4, build))
    if build.host_modules:
        lines.append(
            LogLine(
                12.774410,
                LOG_INFO,
                "nvidia-peermem nv_mem_client_init: nvidia-peermem module loaded (NVIDIA_PEERMEM)",
            )
        )
    if build.legacy_persistence:
        lines.append(LogLine(12.9, LOG_WARNING, LEGACY_PERSISTENCE))
    return lines


LEGACY_PERSISTENCE = (
    "NVRM: Persistence mode is deprecated and will be removed in a future release. "
    "Please use nvidia-persistenced instead."
)


def driver_stamp(driver: str, open_module: bool) -> str:
    """The module's name, version and build stamp, as its NVRM lines print them."""
    if open_module:
        return (
            f"NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build  "
            f"({OPEN_MODULE_BUILDER})  {DRIVER_BUILD_DATE}"
        )
    return f"NVIDIA UNIX x86_64 Kernel Module  {driver}  {DRIVER_BUILD_DATE}"


def driver_load_lines(
    driver: str, uptime: float, build: DriverBuild = DriverBuild()
) -> list[LogLine]:
    """The lines `modprobe nvidia` (and boot) produce."""
    lines = [
        LogLine(
            uptime,
            LOG_INFO,
            "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
        ),
        LogLine(
            uptime + 0.02, LOG_INFO, f"NVRM: loading {driver_stamp(driver, build.open_module)}"
        ),
    ]
    if not build.host_modules:
        return lines
    return [
        *lines,
        LogLine(
            uptime + 0.31,
            LOG_INFO,
            "nvidia-modeset: Loading NVIDIA Kernel Mode Setting "
            f"Driver for UNIX platforms  {driver}  {DRIVER_BUILD_DATE}",
        ),
        LogLine(
            uptime + 0.52, LOG_INFO, "nvidia-uvm: Loaded the UVM driver, major device number 506."
        ),
    ]


def driver_unload_lines(uptime: float) -> list[LogLine]:
    return [
        LogLine(
            uptime, LOG_INFO, "nvidia-nvlink: Unregistered Nvlink Core, major device number 508"
        )
    ]


def xid_lines(
    code: int,
    gpu: GpuState,
    uptime: float,
    pid: int,
    process: str,
    *,
    form: str = "xid",
    device: str = "10de:2330",
) -> list[LogLine]:
    """The NVRM lines of one Xid event on `gpu`, in the scenario's `form` (Xid 79 only)."""
    if form != "xid":
        return _bus_off_lines(gpu, uptime, form, device)
    if code in _NO_PROCESS_CODES:
        who = "pid='<unknown>', name=<unknown>"
    else:
        who = f"pid={pid}, name={process}"
    text = _XID_TEXT.get(code, "An unspecified error occurred.")
    lines = [
        LogLine(uptime, LOG_WARNING, f"NVRM: GPU at PCI:{gpu.pci_short}: {gpu.uuid}"),
        LogLine(uptime, LOG_WARNING, f"NVRM: GPU Board Serial Number: {gpu.serial}"),
        LogLine(uptime, LOG_WARNING, f"NVRM: Xid (PCI:{gpu.pci_short}): {code}, {who}, {text}"),
    ]
    if code == 79:
        lines.append(
            LogLine(
                uptime + 0.000004,
                LOG_ERR,
                f"NVRM: GPU {gpu.pci_short}.0: GPU has fallen off the bus.",
            )
        )
    return lines


def _bus_off_lines(gpu: GpuState, uptime: float, form: str, device: str) -> list[LogLine]:
    if form == "xid-short":
        return [
            LogLine(
                uptime,
                LOG_WARNING,
                f"NVRM: Xid (PCI:{gpu.pci_short}): 79, GPU has fallen off the bus",
            )
        ]
    if form == "bus-off-short":
        return [
            LogLine(uptime, LOG_ERR, f"NVRM: GPU {gpu.pci_short}.0: GPU has fallen off the bus.")
        ]
    record = (
        f"NVRM: The NVIDIA GPU {gpu.pci_short}.0\n"
        f"NVRM: (PCI ID: {device}) installed in this system has\n"
        "NVRM: fallen off the bus and is not responding to commands."
    )
    return [
        LogLine(uptime, LOG_WARNING, f"NVRM: GPU at PCI:{gpu.pci_short}: {gpu.uuid}"),
        LogLine(uptime, LOG_WARNING, f"NVRM: GPU Board Serial Number: {gpu.serial}"),
        LogLine(uptime + 0.000002, LOG_ERR, record),
    ]


def action_change(
    forms: DriverForms, reported: dict[int, str], gpu: GpuState, action: str, at: float
) -> list[LogLine]:
    """The Xid 154 line when `action` raises the GPU's reported recovery action, else none;
    `reported` tracks each GPU's action through one boot's log."""
    before = reported.get(gpu.index, NONE)
    after = strongest([before, action])
    if after == before:
        return []
    reported[gpu.index] = after
    return [xid154_line(gpu, at, forms.xid154_text(before, after))]


def xid154_line(gpu: GpuState, uptime: float, text: str) -> LogLine:
    """Xid 154: the GPU's recovery action changed (`text` from DriverForms.xid154_text)."""
    return LogLine(uptime + 0.000011, LOG_WARNING, f"NVRM: Xid (PCI:{gpu.pci_short}): 154, {text}")


def sxid_lines(sxid: SxidFault, bus: int, uptime: float) -> list[LogLine]:
    """The three records an NVSwitch error logs: summary, severity/engine, raw data."""
    code, link, fatal = sxid.code, sxid.link, sxid.fatal
    head = f"nvidia-nvswitch{sxid.switch}: SXid (PCI:0000:{bus:02x}:00.0): {code}, "
    text = SXID_TEXT.get(code, "Unknown error")
    data = ", ".join(
        f"0x{word:08x}" for word in (0x00140004, 0x00100000, 0x00140004, 0, 0, 0, 0, 0)
    )
    return [
        LogLine(
            uptime,
            LOG_ERR,
            f"{head}{'Fatal' if fatal else 'Non-fatal'}, Link {link:02d} {text} (First)",
        ),
        LogLine(
            uptime,
            LOG_ERR,
            f"{head}Severity {1 if fatal else 0} Engine instance {link:02d} Sub-engine instance 00",
        ),
        LogLine(uptime, LOG_ERR, f"{head}Data {{{data}}}"),
    ]


INIT_FAILED_UPTIME = 11.2
"""When a boot's `RmInitAdapter failed!` is logged: just after the driver loaded (9.4 s)."""


def init_failed_lines(gpu: GpuState, uptime: float) -> list[LogLine]:
    """A GPU the driver could not initialise (one that fell off the bus and did not come back
    at a warm reboot, or a `gpu_init_failed` fault): the open driver's two lines, as in
    open-gpu-kernel-modules#876's log (tests/fixtures/samples/dmesg-xid/), and no Xid."""
    return [
        LogLine(
            uptime, LOG_ERR, f"NVRM: GPU {gpu.pci_short}.0: RmInitAdapter failed! (0x23:0x65:1426)"
        ),
        LogLine(
            uptime,
            LOG_ERR,
            f"NVRM: GPU {gpu.pci_short}.0: rm_init_adapter failed, device minor number {gpu.index}",
        ),
    ]


def aer_lines(
    gpu: GpuState, uptime: float, *, fatal: bool, device: str = "10de:2330"
) -> list[LogLine]:
    """An uncorrected PCIe error the AER driver read from `gpu`'s registers, reported by its
    root port, in the wording of kernels since 6.x (Uncorrectable, `AER: ` on every line;
    tests/fixtures/kernel-aer: the MS-02 journal and pop-os#751), and the nvidia driver's
    `can't recover`: it takes no part in AER recovery."""
    bus = f"{gpu.pci_short}.0"
    port = f"0000:{gpu.bus - 1:02x}:01.0"  # the GPU's upstream port (a PCIe switch's)
    severity = "Uncorrectable (Fatal)" if fatal else "Uncorrectable (Non-Fatal)"
    return [
        LogLine(
            uptime, LOG_ERR, f"pcieport {port}: AER: {severity} error message received from {bus}"
        ),
        LogLine(
            uptime,
            LOG_ERR,
            f"nvidia {bus}: AER: PCIe Bus Error: severity={severity}, type=Transaction Layer, "
            "(Requester ID)",
        ),
        LogLine(
            uptime,
            LOG_ERR,
            f"nvidia {bus}: AER:   device [{device}] error status/mask=00004000/00400000",
        ),
        LogLine(uptime, LOG_ERR, f"nvidia {bus}: AER:    [14] CmpltTO                (First)"),
        LogLine(uptime, LOG_ERR, f"nvidia {bus}: AER: can't recover (no error_detected callback)"),
    ]


def driver_version_file(driver: str, *, open_module: bool = False) -> str:
    """/proc/driver/nvidia/version while the nvidia module is loaded."""
    return f"NVRM version: {driver_stamp(driver, open_module)}\nGCC version:  {GCC_VERSION} \n"
