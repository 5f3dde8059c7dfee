"""Fabric Manager, NVLink fabric registration and IMEX on a node, and whether CUDA may start.

The rules follow NVIDIA's Fabric Manager user guide (docs.nvidia.com/datacenter/tesla/
fabric-manager-user-guide, "Initializing NVSwitch and NVLink", "High Availability Mode
Comparison"):

* Hopper and later GPUs register with the NVLink fabric; `nvidia-smi -q` shows the Fabric State
  In Progress until they have, then Completed, and CUDA initialisation starts only after that.
* Restarting Fabric Manager on HGX H100 and later takes a GPU reset in between (stop Fabric
  Manager, `nvidia-smi -r`, start it again): a GPU still registered with the instance that went
  away waits In Progress when Fabric Manager starts, and completes once it is reset while Fabric
  Manager runs. A GPU reset while Fabric Manager is stopped is Not Started until it starts.
* H100 ignores ABORT_CUDA_JOBS_ON_FM_EXIT: with Fabric Manager gone, new CUDA jobs fail to launch
  unless persistence mode is on, and after a GPU reset they fail even with it.
* HGX A100 has no autonomous link training: CUDA initialisation fails with
  cudaErrorSystemNotReady while Fabric Manager is not running.

The classic board keeps the lab's original model (no registration, CUDA never waits).
"""

from __future__ import annotations

from fleetfix.lab import drivers
from fleetfix.lab.state import (
    COMPLETED,
    FM_UNIT,
    IMEX_UNIT,
    IN_PROGRESS,
    NOT_STARTED,
    GpuState,
    NodeState,
)

SYSTEM_NOT_READY = "system not yet initialized"
"""CUDA's text for cudaErrorSystemNotReady (Fabric Manager has not initialised the system)."""
NVLINK_UNCORRECTABLE = "uncorrectable NVLink error detected during the execution"
"""CUDA's text for cudaErrorNvlinkUncorrectable (what a fatal SXid leaves on the GPU)."""


def service_changed(node: NodeState, unit: str, active: bool, was_active: bool) -> None:
    """Side effects of a unit starting or stopping (systemctl, `fuser -k`, boot)."""
    if unit == "nvidia-persistenced":
        for gpu in node.gpus:
            gpu.persistence = active
    if active == was_active:
        return
    if unit == FM_UNIT:
        if active:
            _fabric_manager_started(node)
        else:
            for gpu in node.gpus:
                gpu.fabric_clean = False
    if unit == IMEX_UNIT and active:
        node.faults = [f for f in node.faults if f.action != drivers.RECOVER_IMEX]


def _registers(node: NodeState) -> bool:
    return node.board.fabric_registration and node.board.fabric_manager


def _fabric_manager_started(node: NodeState) -> None:
    if not _registers(node):
        return
    for gpu in node.gpus:
        gpu.fabric_state = COMPLETED if gpu.fabric_clean else IN_PROGRESS
        gpu.fabric_clean = False


def gpus_reset(node: NodeState, indexes: list[int]) -> None:
    """A reset GPU re-registers at once if Fabric Manager runs, else when it starts."""
    if not _registers(node):
        return
    running = bool(node.unit_active(FM_UNIT))
    for index in indexes:
        gpu = node.gpus[index]
        gpu.fabric_state = COMPLETED if running else NOT_STARTED
        gpu.fabric_clean = not running


def driver_loaded(node: NodeState) -> None:
    """Freshly initialised GPUs (driver load, boot) register once Fabric Manager runs."""
    if not _registers(node):
        return
    for gpu in node.gpus:
        gpu.fabric_state = NOT_STARTED
        gpu.fabric_clean = True
    if node.unit_active(FM_UNIT):
        _fabric_manager_started(node)


def scenario_start(node: NodeState, fabric_manager: str) -> None:
    """The fabric as the scenario leaves it: `running`, `stopped` after boot, or `restarted`
    without a GPU reset (Hopper+ GPUs then wait In Progress)."""
    driver_loaded(node)
    if fabric_manager == "running" or FM_UNIT not in node.services:
        return
    service = node.services[FM_UNIT]
    service.active = False
    service_changed(node, FM_UNIT, False, True)
    if fabric_manager == "restarted" and node.driver_loaded():
        service.active = True
        service_changed(node, FM_UNIT, True, False)


def cuda_blocker(node: NodeState, gpu: GpuState) -> str | None:
    """Why a new CUDA program cannot start on `gpu` (CUDA's error text), or None."""
    if any(f.kind == "sxid" and f.gpu == gpu.index for f in node.faults):
        return NVLINK_UNCORRECTABLE
    board = node.board
    if board.classic or not board.nvswitch:
        return None
    running = node.unit_active(FM_UNIT)
    if board.fabric_manager and not board.fabric_registration:
        return None if running else SYSTEM_NOT_READY
    if gpu.fabric_state != COMPLETED:
        return SYSTEM_NOT_READY
    if board.fabric_manager and not running and not gpu.persistence:
        return SYSTEM_NOT_READY
    return None
