"""`nvidia-smi -r [-i ...]`: which GPUs a reset may cover on each board, and what it does.

Every board follows nvidia-smi's manual (docs.nvidia.com/deploy/nvidia-smi, `-r`) and NVIDIA's
Fabric Manager user guide ("GPU/VM/System Reset Capabilities and Limitations"):

* a GPU a process uses, and every GPU while a monitoring service holds them (DCGM's
  nv-hostengine, and dcgm-exporter or nvsm where a scenario installs them), is in use
  ("In use by another client"); persistence mode is no obstacle (the guide's H100 reset
  procedure leaves nvidia-persistenced running), nor is a running Fabric Manager (with it,
  each GPU can be reset individually);
* NVSwitch boards with a local Fabric Manager (HGX A100, H100, H200, B200): while it runs each GPU
  can be reset individually; while it does not, "any GPUs with NVLink connections to a GPU being
  reset must also be reset in the same command" (on an HGX board: all of them, by omitting -i or
  listing them all), else the command fails naming the GPUs to add;
* PCIe boards (no NVLink) and GB200 compute trays (Fabric Manager runs on the NVLink switch
  trays): each GPU individually.

The classic board (the lab's original HGX H100 model) has no NVLink peer rule: any set of its
GPUs resets while nothing holds them. Until the boards existed its Fabric Manager and
persistence mode refused a reset too; that contradicted the manual, so they no longer do.

The wording of the NVLink refusal is the lab's: the manual says the command "will issue an error
identifying the additional GPUs", but no captured output of it was available.
"""

from __future__ import annotations

from fleetfix.lab import transitions
from fleetfix.lab.scenario import EXTRA_UNITS
from fleetfix.lab.state import FM_UNIT, GpuState, NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply, lines

Selected = list[tuple[int, GpuState]]
MONITORING_UNITS = ("nvidia-dcgm", *EXTRA_UNITS)
"""Units whose daemons keep every GPU open while they run."""
IN_USE = "In use by another client"
IN_USE_NOTE = (
    "{subject} currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
    "application, graphics application such as an X server, or a monitoring application such "
    "as another instance of nvidia-smi). Please first kill all processes using {device} and "
    "all compute applications running in the system."
)


def reset(ctx: ToolContext, selected: Selected, enumerated: Selected) -> ToolReply:
    """Reset `selected` (every enumerated GPU when -i was not given), or refuse."""
    node = ctx.node
    blocked = [(gpu, why) for _, gpu in selected if (why := _blocker(node, gpu)) is not None]
    if blocked:
        return _refused(blocked)
    missing = _missing_peers(node, selected, enumerated)
    if missing:
        return _peers_refused(selected, missing)
    transitions.reset_gpus(node, [gpu.index for _, gpu in selected])
    text = "".join(f"GPU {gpu.bus_id} was successfully reset.\n" for _, gpu in selected)
    return ToolReply(stdout=text, delay=ctx.fleet.scenario.timing.gpu_reset)


def _blocker(node: NodeState, gpu: GpuState) -> str | None:
    if node.gpu_lost(gpu.index) and any(
        f.recovery != "reset" for f in node.faults if f.kind == "xid" and f.gpu == gpu.index
    ):
        return "Unknown Error"
    holders = any(p.gpu == gpu.index for p in node.processes)
    holders = holders or any(node.unit_active(unit) for unit in MONITORING_UNITS)
    return IN_USE if holders else None


def _missing_peers(node: NodeState, selected: Selected, enumerated: Selected) -> Selected:
    """NVLink peers a reset must include but does not (none while Fabric Manager runs)."""
    board = node.board
    if board.classic or not board.nvswitch or not board.fabric_manager:
        return []
    if node.unit_active(FM_UNIT):
        return []
    chosen = {gpu.index for _, gpu in selected}
    return [(i, gpu) for i, gpu in enumerated if gpu.index not in chosen]


def _refused(blocked: list[tuple[GpuState, str]]) -> ToolReply:
    rows = [f"  GPU {gpu.bus_id}: {why}" for gpu, why in blocked]
    if len(blocked) == 1:
        note = IN_USE_NOTE.format(subject="1 device is", device="this device")
    else:
        note = IN_USE_NOTE.format(subject=f"{len(blocked)} devices are", device="these devices")
    text = lines("The following GPUs could not be reset:", *rows, "", note)
    return ToolReply(stdout=text, rc=255)


def _peers_refused(selected: Selected, missing: Selected) -> ToolReply:
    rows = [
        f"  GPU {gpu.bus_id}: NVLink peers must be reset in the same command" for _, gpu in selected
    ]
    peers = [f"  GPU {gpu.bus_id}" for _, gpu in missing]
    text = lines(
        "The following GPUs could not be reset:",
        *rows,
        "",
        "Fabric Manager is not running, so GPUs with NVLink connections cannot be reset "
        "individually. Include these GPUs in the reset command (or omit -i to reset all GPUs):",
        *peers,
    )
    return ToolReply(stdout=text, rc=255)
