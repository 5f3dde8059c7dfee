"""What each board layout is: NVSwitches, Fabric Manager, fabric registration, IMEX, PCI ids.

One value per scenario `board:` name; everything board-specific that the emulated tools print
or enforce reads it from here. `classic` is the lab's original model (an HGX H100 whose
nvidia-fabricmanager holds the GPUs like DCGM does) and stays the default, so scenarios written
before boards existed behave exactly as before. The other layouts follow NVIDIA's Fabric Manager
user guide (docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide): Ampere NVSwitch boards
need Fabric Manager for a single-GPU reset, Hopper and later register their GPUs with the NVLink
fabric, and without Fabric Manager every NVLink peer must be reset in the same command.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType

from fleetfix.errors import LabError

HGX_BUS_NUMBERS = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)
"""PCI buses of the eight GPUs on an HGX baseboard (as in the real 8x H100 captures)."""


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What a GPU model's firmware and board say about it (nvidia-smi -q, -x, --query-gpu)."""

    vbios: str
    board_part: str
    gpu_part: str
    subsystem: str
    """PCI subsystem vendor:device as nvidia-smi prints it: 0x16C110DE."""
    inforom_image: str
    bar1_mib: int
    reserved_mib: int
    """FB memory the driver reserves (-q's FB Memory Usage Reserved)."""
    memory_clocks: tuple[int, ...]
    """Supported memory clocks in MHz, highest (the max and application clock) first."""
    remap_banks: int
    """Row-remapper banks (-q's Bank Remap Availability Histogram, Max on a healthy GPU)."""
    power_limit_w: int = 700
    min_power_w: int = 200


H100_IDENTITY = GpuIdentity(
    vbios="96.00.89.00.01",
    board_part="692-2G520-0200-000",
    gpu_part="2330-885-A1",
    subsystem="0x16C110DE",
    inforom_image="G520.0200.00.05",
    bar1_mib=131072,
    reserved_mib=475,
    memory_clocks=(2619,),
    remap_banks=2560,
)
"""The lab's original H100 SXM5 (550.90.07 captures); every board without its own uses it."""
H200_IDENTITY = GpuIdentity(
    vbios="96.00.A5.00.1A",
    board_part="692-2G520-0282-000",
    gpu_part="2335-895-A1",
    subsystem="0x18BF10DE",
    inforom_image="G520.0282.02.02",
    bar1_mib=262144,
    reserved_mib=616,
    memory_clocks=(3201, 2201),
    remap_banks=3072,
)
"""An H200 SXM 141GB, from the real 580.159.04 capture (tests/fixtures/samples/real-nodes)."""


@dataclass(frozen=True, slots=True)
class Board:
    """One baseboard layout and the GPUs on it."""

    name: str
    architecture: str
    gpu_model: str
    """The product name nvidia-smi prints when the scenario names no `gpu_model`."""
    gpu_device: str
    """PCI vendor:device of the GPUs (lspci -nn; nvidia-smi's Device Id)."""
    gpu_pci_name: str
    memory_mib: int
    nvlinks: int
    nvlink_speed: str
    peak_busbw: float
    """Single-node all_reduce bus bandwidth (GB/s) of a healthy node."""
    max_gpus: int = 8
    nvswitch: bool = True
    fabric_manager: bool = True
    """An nvidia-fabricmanager unit runs on the node."""
    fabric_registration: bool = True
    """Hopper and later: each GPU registers with the NVLink fabric (nvidia-smi's Fabric State)."""
    imex: bool = False
    sxid: bool = True
    """The NVSwitch driver reports SXid errors in the kernel log (not on fourth-gen switches)."""
    switch_buses: tuple[int, ...] = (0x05, 0x06, 0x07, 0x08)
    switch_device: str = "10de:22a3"
    classic: bool = False
    identity: GpuIdentity = H100_IDENTITY
    nics: int = 8
    """InfiniBand HCAs (mlx5_0..): ibstat's CAs and `topo -m`'s NIC columns."""
    cpus_per_numa: int = 56
    """`topo -m`'s CPU Affinity: GPUs 0-3 on NUMA node 0, 4-7 on node 1 (two sockets of
    56 cores with SMT: 0-55,112-167 and 56-111,168-223); `grace` boards differ."""
    grace: bool = False
    """Two Grace CPUs of 72 cores, no SMT, two GPUs each (GB200 compute tray): CPU Affinity
    0-71 / 72-143, and every NIC and GPU at NODE distance (the real GB200 topo -m)."""
    open_module: bool = False
    """The driver is NVIDIA's open kernel module (Blackwell supports no other)."""

    @property
    def device_id(self) -> str:
        """nvidia-smi's form: 0x233010DE."""
        vendor, device = self.gpu_device.split(":")
        return f"0x{device.upper()}{vendor.upper()}"

    @property
    def units(self) -> tuple[str, ...]:
        """The node's installed systemd units, in the order truth lists them."""
        fabric = ("nvidia-fabricmanager",) if self.fabric_manager else ()
        imex = ("nvidia-imex",) if self.imex else ()
        return ("nvidia-persistenced", *fabric, *imex, "nvidia-dcgm", "slurmd")


def _power(identity: GpuIdentity, watts: int) -> GpuIdentity:
    return replace(identity, power_limit_w=watts)


_H100 = Board(
    name="hgx-h100",
    architecture="Hopper",
    gpu_model="NVIDIA H100 80GB HBM3",
    gpu_device="10de:2330",
    gpu_pci_name="NVIDIA Corporation GH100 [H100 SXM5 80GB]",
    memory_mib=81559,
    nvlinks=18,
    nvlink_speed="26.562 GB/s",
    peak_busbw=482.0,
)
BOARDS = MappingProxyType(
    {
        "classic": Board(
            name="classic",
            architecture="Hopper",
            gpu_model=_H100.gpu_model,
            gpu_device=_H100.gpu_device,
            gpu_pci_name=_H100.gpu_pci_name,
            memory_mib=_H100.memory_mib,
            nvlinks=18,
            nvlink_speed=_H100.nvlink_speed,
            peak_busbw=_H100.peak_busbw,
            fabric_registration=False,
            classic=True,
        ),
        "hgx-a100": Board(
            name="hgx-a100",
            architecture="Ampere",
            gpu_model="NVIDIA A100-SXM4-80GB",
            gpu_device="10de:20b2",
            gpu_pci_name="NVIDIA Corporation GA100 [A100 SXM4 80GB]",
            memory_mib=81920,
            nvlinks=12,
            nvlink_speed="25 GB/s",
            peak_busbw=230.0,
            fabric_registration=False,
            switch_buses=(0x6D, 0x6E, 0x6F, 0x70, 0x71, 0x72),
            switch_device="10de:1af1",
        ),
        "hgx-h100": _H100,
        "hgx-h200": Board(
            name="hgx-h200",
            architecture="Hopper",
            gpu_model="NVIDIA H200",
            gpu_device="10de:2335",
            gpu_pci_name="NVIDIA Corporation GH100 [H200 SXM 141GB]",
            memory_mib=143771,
            nvlinks=18,
            nvlink_speed="26.562 GB/s",
            peak_busbw=482.0,
            identity=H200_IDENTITY,
        ),
        "hgx-b200": Board(
            name="hgx-b200",
            architecture="Blackwell",
            gpu_model="NVIDIA B200",
            gpu_device="10de:2901",
            gpu_pci_name="NVIDIA Corporation Device 2901",
            memory_mib=183359,
            nvlinks=18,
            nvlink_speed="53.125 GB/s",
            peak_busbw=820.0,
            sxid=False,
            switch_buses=(),
            identity=_power(H100_IDENTITY, 1000),
            open_module=True,
        ),
        "gb200-nvl": Board(
            name="gb200-nvl",
            architecture="Blackwell",
            gpu_model="NVIDIA GB200",
            gpu_device="10de:2941",
            gpu_pci_name="NVIDIA Corporation Device 2941",
            memory_mib=189471,
            nvlinks=18,
            nvlink_speed="53.125 GB/s",
            peak_busbw=760.0,
            max_gpus=4,
            fabric_manager=False,
            imex=True,
            sxid=False,
            switch_buses=(),
            identity=_power(H100_IDENTITY, 1200),
            nics=6,
            grace=True,
            open_module=True,
        ),
        "pcie": Board(
            name="pcie",
            architecture="Hopper",
            gpu_model="NVIDIA H100 PCIe",
            gpu_device="10de:2331",
            gpu_pci_name="NVIDIA Corporation GH100 [H100 PCIe]",
            memory_mib=81559,
            nvlinks=0,
            nvlink_speed="",
            peak_busbw=21.0,
            nvswitch=False,
            fabric_manager=False,
            fabric_registration=False,
            sxid=False,
            switch_buses=(),
        ),
        "h200-nvl": Board(
            name="h200-nvl",
            architecture="Hopper",
            gpu_model="NVIDIA H200 NVL",
            gpu_device="10de:233b",
            gpu_pci_name="NVIDIA Corporation GH100 [H200 NVL]",
            memory_mib=143771,
            nvlinks=0,
            nvlink_speed="",
            peak_busbw=21.0,
            max_gpus=1,
            nvswitch=False,
            fabric_manager=False,
            fabric_registration=False,
            sxid=False,
            switch_buses=(),
            identity=_power(H200_IDENTITY, 600),
            nics=1,
        ),
    }
)
"""Every board a scenario may name, by name."""


def board(name: str) -> Board:
    """The board called `name`.

    Raises:
        LabError: no such board.
    """
    found = BOARDS.get(name)
    if found is None:
        raise LabError(f"unknown board {name!r}", hint=f"boards: {', '.join(BOARDS)}")
    return found


@cache
def seen_board(name: str, passthrough: bool) -> Board:
    """Board `name` as a node's OS sees it: a GPU passed through alone to a VM shows no
    NVSwitch, NVLink, Fabric Manager, fabric registration or IMEX (the real H200 VM capture:
    empty `nvlink -s`, Fabric State N/A)."""
    found = BOARDS[name]
    if not passthrough:
        return found
    return replace(
        found,
        nvlinks=0,
        nvlink_speed="",
        nvswitch=False,
        fabric_manager=False,
        fabric_registration=False,
        imex=False,
        sxid=False,
        switch_buses=(),
        nics=0,
        classic=False,
    )
