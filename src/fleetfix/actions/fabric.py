"""Which board a node is, and how NVIDIA lets its GPUs be reset: one rule per board.

The board is read from facts, never from an inventory label: the GPUs' architecture and
fabric state (`nvidia_smi`) and whether nvidia-fabricmanager / nvidia-imex are installed and
running (`services`). The rules follow two NVIDIA documents (docs/gpu-procedures.md quotes
them and says where fleetfix differs):

* nvidia-smi manual, `-r/--gpu-reset` (https://docs.nvidia.com/deploy/nvidia-smi/index.html):
  "Starting with the NVIDIA Ampere architecture, GPUs with NVLink connections can be
  individually reset. On Ampere NVSwitch systems, Fabric Manager is required to facilitate
  reset. On Hopper and later NVSwitch systems, the dependency on Fabric Manager to facilitate
  reset is removed. If Fabric Manager is not running, or if any of the GPUs being reset are
  based on an architecture preceding the NVIDIA Ampere architecture, any GPUs with NVLink
  connections to a GPU being reset must also be reset in the same command."
* Fabric Manager user guide, release 2.3
  (https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html):
  "GPU/VM/System Reset Capabilities and Limitations" (Ampere NVSwitch: FM running, GPUs can be
  individually reset; FM not running, reset all GPUs and NVSwitches), "NVSwitch and NVLink
  Initialization" (Hopper and later GPUs register with the fabric: state In Progress, then
  Completed, and CUDA waits for it; restarting Fabric Manager on HGX H100 takes a GPU reset
  in between: stop FM, `nvidia-smi -r`, start FM; "You can leave the nvidia-persistenced
  service running").

The rules, by board (topology from facts; FM = nvidia-fabricmanager):

* NVSwitch, Ampere (FM installed, no fabric state): FM running, reset the named GPUs; FM not
  running, start it first, then reset them.
* NVSwitch, Hopper and later (fabric state shown, FM installed): FM running, reset the named
  GPUs; FM not running, every GPU in one command, then start FM. Then wait for the fabric.
* NVLink domain (GB200 compute tray: fabric state, FM on the switch trays): the named GPUs,
  then wait for the fabric.
* PCIe (Ampere and later, no fabric state, no FM): the named GPUs.
* Before Ampere: every GPU in one command (fleetfix does not know the NVLink peers), the
  persistence daemon stopped too (fleetfix's old rule; the guide only speaks for Hopper).
* A board fleetfix cannot place (no architecture reported, or Hopper and later with a Fabric
  Manager but no fabric state): the named GPUs (the persistence daemon stopped too when the
  architecture is unknown); refused when an installed FM is not running (the Ampere and
  Hopper rules disagree there).

Fabric Manager is never stopped for a reset.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fleetfix.actions.base import PlannedCommand
from fleetfix.knowledge.remedy import FABRIC_MANAGER as FABRIC_MANAGER  # noqa: PLC0414
from fleetfix.knowledge.remedy import unit_presence
from fleetfix.probes.gpu_facts import NvidiaSmiFacts
from fleetfix.probes.services import ServicesFacts

IMEX = "nvidia-imex"
AMPERE_AND_LATER = ("ampere", "ada", "ada lovelace", "hopper", "blackwell", "rubin")
"""Architectures (nvidia-smi's Product Architecture, lower case) that reset GPUs individually."""
DEFAULT_FABRIC_WAIT = 120.0
"""Seconds to wait for the GPUs to register with the fabric after a reset or driver load."""


class Topology(enum.StrEnum):
    """How the node's GPUs are connected, as far as resets care."""

    NVSWITCH_AMPERE = "nvswitch-ampere"
    """HGX/DGX A100: NVSwitches trained by the local Fabric Manager; no fabric registration."""
    NVSWITCH = "nvswitch"
    """HGX/DGX H100, H200, B200 (Hopper and later): local Fabric Manager, GPUs register."""
    NVLINK_DOMAIN = "nvlink-domain"
    """GB200 NVL compute tray: GPUs register with a Fabric Manager on the NVLink switch trays."""
    PCIE = "pcie"
    """No NVSwitch (PCIe cards, Ampere and later): each GPU resets on its own."""
    PRE_AMPERE = "pre-ampere"
    """Volta and older: NVLink peers always reset together."""
    UNKNOWN = "unknown"
    """The architecture was not reported."""


@dataclass(frozen=True, slots=True)
class Board:
    """What the facts say about the node's board."""

    topology: Topology
    architecture: str | None
    fabric_manager: str
    """`running`, `stopped` (installed, not active) or `absent`."""
    registers: bool
    """The GPUs report a fabric state (Hopper and later on NVSwitch / NVLink domains)."""
    imex: bool
    """nvidia-imex is installed."""
    gpus: tuple[int, ...]
    """Every enumerated GPU's index."""

    @property
    def words(self) -> str:
        """The board as the notes and refusals say it."""
        arch = self.architecture or "architecture unknown"
        return f"{self.topology.value} board ({arch}), Fabric Manager {self.fabric_manager}"


def board_of(smi: NvidiaSmiFacts, services: ServicesFacts | None) -> Board:
    """The node's board from fresh `nvidia_smi` and `services` facts."""
    architecture = next((g.architecture for g in smi.gpus if g.architecture), None)
    registers = any(g.fabric is not None and g.fabric.state is not None for g in smi.gpus)
    fabric_manager = unit_state(services, FABRIC_MANAGER)
    topology = _topology(architecture, registers, fabric_manager)
    return Board(
        topology=topology,
        architecture=architecture,
        fabric_manager=fabric_manager,
        registers=registers,
        imex=unit_state(services, IMEX) != "absent",
        gpus=tuple(sorted(g.index for g in smi.gpus if g.index is not None)),
    )


def unit_state(services: ServicesFacts | None, unit: str) -> str:
    """`running`, `stopped` or `absent`: a unit systemd does not know, or that nobody could ask
    about, is absent (never guessed installed)."""
    if services is None:
        return "absent"
    return unit_presence(services.units, services.active, unit)


def _topology(architecture: str | None, registers: bool, fabric_manager: str) -> Topology:
    arch = (architecture or "").strip().lower()
    if registers:
        return Topology.NVSWITCH if fabric_manager != "absent" else Topology.NVLINK_DOMAIN
    if not arch:
        return Topology.UNKNOWN
    if arch not in AMPERE_AND_LATER:
        return Topology.PRE_AMPERE
    if arch == "ampere" and fabric_manager != "absent":
        return Topology.NVSWITCH_AMPERE
    if fabric_manager != "absent":
        # Hopper and later on an NVSwitch board register with the fabric: a Fabric Manager
        # but no fabric state is a board fleetfix cannot place.
        return Topology.UNKNOWN
    return Topology.PCIE


@dataclass(frozen=True, slots=True)
class ResetRule:
    """How to reset `targets` on a board: which GPUs go in the one `nvidia-smi -r`, and what
    happens around it."""

    gpus: tuple[int, ...] = ()
    start_fabric_manager_first: bool = False
    start_fabric_manager_after: bool = False
    wait_for_fabric: bool = False
    stop_persistenced: bool = False
    why: str = ""
    refused: str | None = None


_NAMED_THEN_WAIT = "reset the named GPUs, then wait for the fabric"


def reset_rule(board: Board, targets: Sequence[int]) -> ResetRule:
    """NVIDIA's rule for resetting `targets` on `board` (the module's table)."""
    named = tuple(sorted(set(targets)))
    everything = board.gpus or named
    topology, fm = board.topology, board.fabric_manager
    if topology is Topology.NVSWITCH_AMPERE:
        if fm == "running":
            return ResetRule(named, why="reset the named GPUs")
        return ResetRule(
            named,
            start_fabric_manager_first=True,
            why="start Fabric Manager first (Ampere needs it to reset), then the named GPUs",
        )
    if topology is Topology.NVSWITCH:
        if fm == "running":
            return ResetRule(named, wait_for_fabric=True, why=_NAMED_THEN_WAIT)
        return ResetRule(
            everything,
            start_fabric_manager_after=True,
            wait_for_fabric=True,
            why="every NVLink peer in one command, then start Fabric Manager; wait for the fabric",
        )
    if topology is Topology.NVLINK_DOMAIN:
        return ResetRule(named, wait_for_fabric=True, why=_NAMED_THEN_WAIT)
    if topology is Topology.PCIE:
        return ResetRule(named, why="reset the named GPUs")
    if topology is Topology.PRE_AMPERE:
        return ResetRule(
            everything,
            stop_persistenced=True,
            why="every GPU in one command (NVLink peers, before Ampere), persistenced stopped",
        )
    if fm == "stopped":
        return ResetRule(
            refused=f"cannot tell this board's reset rule ({board.words}): the Ampere and Hopper "
            f"rules differ without Fabric Manager; start {FABRIC_MANAGER} and try again"
        )
    unknown = board.architecture is None
    return ResetRule(
        named,
        stop_persistenced=unknown,
        why="reset the named GPUs"
        + (", persistence daemon stopped too (architecture not reported)" if unknown else ""),
    )


# --- the fabric after a reset or driver load ------------------------------------------------


_READY = "Completed"


def fabric_problems(smi: NvidiaSmiFacts) -> list[str]:
    """GPUs whose fabric state is reported and is not Completed/Success, with what was seen."""
    problems = []
    for gpu in smi.gpus:
        fabric = gpu.fabric
        if fabric is None or fabric.state is None:
            continue
        status_ok = fabric.status in (None, "Success")
        if fabric.state != _READY or not status_ok:
            status = fabric.status or "N/A"
            problems.append(f"GPU {gpu.key}: fabric {fabric.state} (status {status})")
    return problems


def fabric_wait(
    timeout: float, why: str = "wait for every GPU's fabric state Completed"
) -> PlannedCommand:
    """One remote command that polls nvidia-smi until every GPU's fabric state is Completed
    (status Success) or not reported (N/A: no NVSwitch, or Ampere), at most `timeout` seconds.
    It always exits 0 after printing what it saw: the action's verification judges the fabric
    from a fresh nvidia-smi reading and fails with the state it finds. A driver that has no
    fabric fields (before Hopper support) counts as nothing to wait for."""
    seconds = max(int(timeout), 1)
    ready = "Completed, Success"
    judge = (
        'awk -F\', *\' \'{s=$2; t=$3; gsub(/\\[|\\]/, "", s); gsub(/\\[|\\]/, "", t); '
        f'if (!(s == "N/A" || s == "Not Supported" || (s == "{_READY}" && t == "Success"))) '
        "bad++} END {exit (NR == 0 || bad) ? 1 : 0}'"
    )
    query = "nvidia-smi --query-gpu=index,fabric.state,fabric.status --format=csv,noheader"
    script = (
        f"deadline=$(($(date +%s) + {seconds})); "
        "while :; do "
        f"out=$({query} 2>&1); rc=$?; "
        'if [ $rc -ne 0 ] && printf \'%s\\n\' "$out" | grep -qi "not a valid field"; then '
        "echo 'this driver reports no fabric state'; exit 0; fi; "
        f"if [ $rc -eq 0 ] && printf '%s\\n' \"$out\" | {judge}; then "
        f"echo {shlex.quote('fabric: ' + ready + ' (or N/A) on every GPU')}; exit 0; fi; "
        'if [ "$(date +%s)" -ge "$deadline" ]; then '
        f"echo 'fabric not ready after {seconds}s:'; printf '%s\\n' \"$out\"; exit 0; fi; "
        "sleep 2; done"
    )
    return PlannedCommand(script, why, timeout=seconds + 60)


def start_unit(unit: str, why: str, *, always: bool = False) -> PlannedCommand:
    return PlannedCommand(f"systemctl start {shlex.quote(unit)}", why, always=always)


def gpu_list(indexes: Iterable[int]) -> str:
    """`0,1,2` for `nvidia-smi -i`."""
    return ",".join(str(i) for i in sorted(set(indexes)))
