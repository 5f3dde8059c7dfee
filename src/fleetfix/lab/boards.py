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

from dataclasses import dataclass
from types import MappingProxyType

from fleetfix.errors import LabError

HGX_BUS_NUMBERS = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)
"""PCI buses of the eight GPUs on an HGX baseboard (as in the real 8x H100 captures)."""


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
