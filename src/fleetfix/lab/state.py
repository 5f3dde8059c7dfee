"""Mutable state of every lab node and of the fleet, and the truth read from it.

These records change as remediation runs (a reset clears counters, a reboot a boot's worth of
state), so they are ordinary mutable dataclasses owned by the one server process; everything
the emulated tools print is derived from them, and `truth()` reports what is still broken.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetfix.lab import drivers
from fleetfix.lab.boards import Board, seen_board
from fleetfix.lab.environments import Environment, environment
from fleetfix.lab.layout import NodeSpec, bmc_address
from fleetfix.lab.scenario import (
    NVIDIA_MODULES,
    RECOVERY_LEVELS,
    VM_NVIDIA_MODULES,
    NodeEvent,
    NodeFaults,
    Scenario,
)
from fleetfix.lab.slurm_state import SlurmState, slurm_truth

FM_UNIT = "nvidia-fabricmanager"
IMEX_UNIT = "nvidia-imex"
COMPLETED = "Completed"
IN_PROGRESS = "In Progress"
NOT_STARTED = "Not Started"


def stable_hex(*parts: object) -> str:
    """A deterministic hex digest of `parts` (serials, UUIDs, GUIDs stay stable across runs)."""
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()


def stable_uuid(*parts: object) -> str:
    return str(uuid.UUID(stable_hex(*parts)[:32]))


@dataclass(slots=True)
class GpuState:
    """One GPU: identity plus the counters and flags remediation changes."""

    index: int
    bus: int
    uuid: str
    serial: str
    persistence: bool
    device: int = 0
    """PCI device number: 0 on a baseboard (a bus per GPU), 6.. in a VM (one bus, a slot each)."""
    volatile_sbe: int = 0
    volatile_dbe: int = 0
    aggregate_sbe: int = 0
    aggregate_dbe: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    remap_correctable: int = 0
    remap_uncorrectable: int = 0
    remap_histogram: tuple[int, int, int, int, int] | None = None
    unrepairable: bool = False
    sram_volatile: int = 0
    sram_aggregate: int = 0
    sram_threshold: bool = False
    sram_source: str = "l2"
    fabric_state: str = COMPLETED
    """Registration with the NVLink fabric (Hopper+ boards): Completed, In Progress, Not Started."""
    fabric_clean: bool = False
    """Reset (or initialised) since the Fabric Manager it registered with went away: it
    registers as soon as Fabric Manager starts. A GPU that is not waits In Progress."""

    @property
    def bus_id(self) -> str:
        """nvidia-smi's form: 00000000:1B:00.0."""
        return f"00000000:{self.bus:02X}:{self.device:02X}.0"

    @property
    def pci_short(self) -> str:
        """The kernel's form in NVRM lines: 0000:1b:00."""
        return f"0000:{self.bus:02x}:{self.device:02x}"


@dataclass(slots=True)
class Fault:
    """An injected fault that stays until remediation at its recovery level (or never)."""

    kind: str
    recovery: str
    gpu: int | None = None
    code: int | None = None
    value: float | None = None
    boot: int = 1
    action: str | None = None
    """The recovery action the scenario gave the driver to report (None: from `recovery`)."""

    def cleared_by(self, level: str) -> bool:
        if self.recovery == "never":
            return False
        return RECOVERY_LEVELS.index(self.recovery) <= RECOVERY_LEVELS.index(level)

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "recovery": self.recovery}
        for key in ("gpu", "code", "value"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.kind == "gpu_missing_after_reboot":
            data["from_boot"] = self.boot + 1
        if self.kind == "sxid":
            data["switch"] = int(data.pop("value"))
        if self.action is not None:
            data["action"] = self.action
        return data

    def driver_action(self) -> str:
        """The recovery action the driver reports for this fault (drivers >= 570)."""
        if self.action is not None:
            return self.action
        if self.kind == "sxid":
            return drivers.RESET
        return drivers.default_action(self.code or 0, self.recovery)


@dataclass(frozen=True, slots=True)
class LogLine:
    """One kernel message: seconds since boot, syslog level, text."""

    uptime: float
    level: int
    text: str


@dataclass(slots=True)
class Boot:
    """One boot's kernel ring buffer (the journal keeps old boots, dmesg only the current one)."""

    boot_id: str
    started: float
    lines: list[LogLine] = field(default_factory=list)
    dmesg_from: int = 0


@dataclass(slots=True)
class Service:
    enabled: bool
    active: bool


@dataclass(slots=True)
class GpuProcess:
    """A process holding a GPU; `pid` is a real placeholder process the lab started."""

    name: str
    gpu: int
    used_mib: int
    job_id: int | None = None
    pid: int = 0
    user: str | None = None
    """Its owner as ps shows it (None: its job's user, else root)."""
    args: str = ""
    ignores_term: bool = False
    started: float = 0.0
    """When its placeholder started (ps lstart)."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One disruptive tool call the lab emulated (or a GPU process killed behind its back)."""

    tool: str
    argv: tuple[str, ...]
    user: str
    at: float
    boot: int
    rc: int | None
    """None while the call never answered (a hung tool)."""

    def to_data(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "argv": list(self.argv),
            "user": self.user,
            "at": self.at,
            "boot": self.boot,
            "rc": self.rc,
        }


@dataclass(slots=True)
class EventState:
    """A scenario event of one node, and what became of it."""

    event: NodeEvent
    fired_at: int | None = None
    """The node's command count when it fired (the request that found it due)."""
    outcome: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {
            "after_commands": self.event.after_commands,
            "change": type(self.event.change).__name__,
            "fired_at_command": self.fired_at,
            "outcome": self.outcome,
        }


@dataclass(frozen=True, slots=True)
class NodePaths:
    """A node's own files: its /dev/shm, boot id, /proc/driver, home and /var/lib/fleetfix."""

    root: Path

    @property
    def shm(self) -> Path:
        return self.root / "tmpfs"

    @property
    def boot_id(self) -> Path:
        return self.root / "boot_id"

    @property
    def proc_driver(self) -> Path:
        return self.root / "proc_driver"

    @property
    def proc_modules(self) -> Path:
        """The node's /proc/modules (bind-mounted over the machine's in its sandbox)."""
        return self.root / "proc_modules"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def var_lib_fleetfix(self) -> Path:
        """The node's /var/lib/fleetfix, where a controller's lease on it lives."""
        return self.root / "var_lib_fleetfix"


@dataclass(slots=True)
class NodeState:
    """Everything one node is right now."""

    spec: NodeSpec
    injected: NodeFaults
    paths: NodePaths
    gpus: list[GpuState]
    boots: list[Boot]
    faults: list[Fault] = field(default_factory=list)
    modules: dict[str, bool] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)
    processes: list[GpuProcess] = field(default_factory=list)
    stale_files: list[str] = field(default_factory=list)
    status: str = "up"
    reboot_due: float | None = None
    commands: int = 0
    """SSH exec requests received so far (all boots): what scenario events count."""
    events: list[EventState] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)
    persistence_at_boot: bool = True
    """Persistence mode at boot: nvidia-persistenced enabled, or (no systemd) the boot
    scripts' `nvidia-smi -pm 1`."""
    boot_level: str = "reboot"
    """What the boot under way clears: `reboot` (a warm reboot, a BMC hard reset) or
    `power_cycle` (the power was removed: a BMC power cycle, or off and on)."""
    power_cycles: int = 0
    """Boots that followed a loss of power (BMC `chassis power cycle`, or off then on)."""
    packages: dict[str, str] | None = None
    """The package database (name: version): lab/tools/packages.py makes it on first use."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def board(self) -> Board:
        """The node's board as its OS sees it (a VM's passed-through GPU has no NVLink)."""
        return seen_board(self.spec.board, self.env.passthrough)

    @property
    def env(self) -> Environment:
        return environment(self.spec.environment, self.spec.without)

    @property
    def bmc(self) -> str | None:
        """The address of the node's BMC; None when the scenario gave it none."""
        return bmc_address(self.spec.address) if self.injected.bmc.present else None

    @property
    def open_module(self) -> bool:
        """The driver is NVIDIA's open kernel module (the board or environment needs it)."""
        return self.board.open_module or self.env.open_module

    @property
    def driver(self) -> str:
        return self.spec.driver

    def unit_active(self, unit: str) -> bool | None:
        """Whether `unit` runs; None when the node has no such unit."""
        service = self.services.get(unit)
        return None if service is None else service.active

    def fabric_state(self, gpu: GpuState) -> str:
        """What nvidia-smi's Fabric State says for `gpu` on this board."""
        board = self.board
        if board.classic:
            return COMPLETED if self.unit_active(FM_UNIT) else NOT_STARTED
        return gpu.fabric_state if board.fabric_registration else "N/A"

    def recovery_action(self, gpu: int) -> str:
        """The GPU recovery action the driver reports (nvidia-smi, drivers >= 570)."""
        found = [f.driver_action() for f in self.faults if f.gpu == gpu and f.kind in _ACTIONS]
        if self.gpus[gpu].remap_pending:
            found.append(drivers.RESET)
        return drivers.strongest(found)

    @property
    def boot(self) -> Boot:
        return self.boots[-1]

    @property
    def boot_number(self) -> int:
        return len(self.boots)

    def faults_of(self, kind: str) -> list[Fault]:
        return [f for f in self.faults if f.kind == kind]

    def has_fault(self, kind: str, gpu: int | None = None) -> bool:
        return any(f.kind == kind and (gpu is None or f.gpu == gpu) for f in self.faults)

    def gpu_lost(self, gpu: int) -> bool:
        """Fell off the bus during this boot: enumerated, but every handle call fails."""
        return any(f.boot == self.boot_number for f in self._xid79(gpu))

    def gpu_on_bus(self, gpu: int) -> bool:
        """On the PCIe bus (lspci shows it): not missing, and re-enumerated if it had to be."""
        if self.has_fault("missing_gpu", gpu):
            return False
        return not any(
            f.boot < self.boot_number
            for f in self.faults_of("gpu_missing_after_reboot")
            if f.gpu == gpu
        )

    def gpu_visible(self, gpu: int) -> bool:
        """Enumerated by the driver: on the bus and initialised (see init_failed)."""
        return self.gpu_on_bus(gpu) and not self.init_failed(gpu)

    def init_failed(self, gpu: int) -> bool:
        """On the bus, but the driver failed to initialise it in this boot (RmInitAdapter):
        a `gpu_init_failed` fault, or an Xid 79 from an earlier boot that a reboot did not
        clear."""
        if self.has_fault("gpu_init_failed", gpu):
            return True
        return any(f.boot != self.boot_number for f in self._xid79(gpu))

    def _xid79(self, gpu: int) -> list[Fault]:
        return [f for f in self.faults if f.kind == "xid" and f.code == 79 and f.gpu == gpu]

    def visible_gpus(self) -> list[GpuState]:
        return [g for g in self.gpus if self.gpu_visible(g.index)]

    def links_down(self, gpu: int) -> set[int]:
        return {int(f.value or 0) for f in self.faults_of("nvlink_down") if f.gpu == gpu}

    def ib_ports_down(self) -> set[int]:
        return {int(f.value or 0) for f in self.faults_of("ib_port_down")}

    def driver_loaded(self) -> bool:
        return self.modules.get("nvidia", False)

    @property
    def module_names(self) -> tuple[str, ...]:
        """The modules this node has installed: the NVIDIA set, then its third-party ones."""
        nvidia = NVIDIA_MODULES if self.env.host_modules else VM_NVIDIA_MODULES
        return (*nvidia, *self.injected.third_party_modules)

    def existing_stale_files(self) -> list[str]:
        return [name for name in self.stale_files if (self.paths.shm / name).exists()]

    def truth(self, degraded_factor: float | None) -> dict[str, Any]:
        visible = self.visible_gpus()
        reported = drivers.forms(self.driver).recovery_action
        return {
            "address": self.spec.address,
            "rack": self.spec.rack,
            "leaf": self.spec.leaf,
            "board": self.spec.board,
            "environment": self.spec.environment,
            "without": list(self.spec.without),
            "driver": self.driver,
            "fabric": {
                "manager": _unit_word(self.unit_active(FM_UNIT)),
                "imex": _unit_word(self.unit_active(IMEX_UNIT)),
                "gpus": [self.fabric_state(g) for g in visible],
            },
            "recovery_actions": [self.recovery_action(g.index) for g in visible]
            if reported
            else None,
            "status": self.status,
            "boot_id": self.boot.boot_id,
            "boots": self.boot_number,
            "bmc": self.bmc,
            "power_cycles": self.power_cycles,
            "packages": dict(self.packages) if self.packages is not None else None,
            "faults": _node_faults(self, degraded_factor),
            "gpu_processes": [
                {
                    "pid": p.pid,
                    "name": p.name,
                    "gpu": p.gpu,
                    "job_id": p.job_id,
                    "used_mib": p.used_mib,
                }
                for p in self.processes
            ],
            "persistence": [g.persistence for g in self.visible_gpus()],
            "modules": [m for m in self.module_names if self.modules.get(m)],
            "services": {u: s.active for u, s in self.services.items()},
            "commands": self.commands,
            "events": [event.to_data() for event in self.events],
            "audit": [entry.to_data() for entry in self.audit],
            "lease": node_lease(self.paths),
        }


_ACTIONS = frozenset({"xid", "sxid"})
LEASE_NUMBERS = frozenset({"pid", "since", "expires"})


def node_lease(paths: NodePaths) -> dict[str, Any] | None:
    """The controller lease on the node (`/var/lib/fleetfix/lease`: `run=.. controller=..
    pid=.. since=.. expires=..`, epoch seconds), None when no run holds one."""
    try:
        line = (paths.var_lib_fleetfix / "lease").read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    fields: dict[str, Any] = dict(word.partition("=")[::2] for word in line.split())
    for key in LEASE_NUMBERS & fields.keys():
        fields[key] = int(fields[key]) if fields[key].isdigit() else fields[key]
    return fields


def _unit_word(active: bool | None) -> str | None:
    return None if active is None else ("active" if active else "inactive")


def _node_faults(node: NodeState, degraded_factor: float | None) -> list[dict[str, Any]]:
    found = [fault.to_data() for fault in node.faults]
    found.extend(_gpu_faults(node))
    stale = node.existing_stale_files()
    if stale:
        found.append({"kind": "stale_shm", "count": len(stale), "files": stale})
    off = [g.index for g in node.visible_gpus() if not g.persistence]
    if off:
        found.append({"kind": "persistence_off", "gpus": off})
    unloaded = [m for m in node.module_names if not node.modules.get(m)]
    if unloaded:
        found.append({"kind": "modules_unloaded", "modules": unloaded})
    if degraded_factor is not None:
        found.append({"kind": "degraded_leaf", "leaf": node.spec.leaf, "recovery": "never"})
    return found


def _gpu_faults(node: NodeState) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for gpu in node.gpus:
        counts = (gpu.volatile_sbe, gpu.volatile_dbe, gpu.aggregate_sbe, gpu.aggregate_dbe)
        if any(counts):
            volatile = {"sbe": gpu.volatile_sbe, "dbe": gpu.volatile_dbe}
            aggregate = {"sbe": gpu.aggregate_sbe, "dbe": gpu.aggregate_dbe}
            found.append(
                {"kind": "ecc", "gpu": gpu.index, "volatile": volatile, "aggregate": aggregate}
            )
        if gpu.remap_pending:
            found.append({"kind": "row_remap_pending", "gpu": gpu.index, "recovery": "reset"})
        if gpu.remap_failure:
            found.append({"kind": "row_remap_failure", "gpu": gpu.index, "recovery": "never"})
        if gpu.unrepairable:
            found.append({"kind": "unrepairable_memory", "gpu": gpu.index, "recovery": "never"})
        if gpu.sram_volatile or gpu.sram_aggregate or gpu.sram_threshold:
            found.append(_sram_truth(gpu))
    return found


def _sram_truth(gpu: GpuState) -> dict[str, Any]:
    return {
        "kind": "sram",
        "gpu": gpu.index,
        "volatile": gpu.sram_volatile,
        "aggregate": gpu.sram_aggregate,
        "threshold_exceeded": gpu.sram_threshold,
        "recovery": "never" if gpu.sram_threshold else "reset",
    }


@dataclass(slots=True)
class FleetState:
    """The whole lab: nodes by name and by address, the Slurm controller, the scenario."""

    scenario: Scenario
    nodes: dict[str, NodeState]
    slurm: SlurmState
    started: float
    by_address: dict[str, NodeState] = field(default_factory=dict)
    by_bmc: dict[str, NodeState] = field(default_factory=dict)
    """Nodes by their BMC's address (lab/bmc.py)."""

    def __post_init__(self) -> None:
        self.by_address = {node.spec.address: node for node in self.nodes.values()}
        self.by_bmc = {node.bmc: node for node in self.nodes.values() if node.bmc is not None}

    def node(self, name_or_address: str) -> NodeState | None:
        return self.nodes.get(name_or_address) or self.by_address.get(name_or_address)

    def degraded_factor(self, node: NodeState) -> float | None:
        return self.scenario.degraded_leaves.get(node.spec.leaf)

    def truth(self, now: float | None = None) -> dict[str, Any]:
        """What is broken where, and Slurm's view, as of `now` (default: the clock)."""
        now = time.time() if now is None else now
        self.slurm.settle(now)
        nodes = {}
        for name, node in self.nodes.items():
            entry = node.truth(self.degraded_factor(node))
            entry["slurm"] = slurm_truth(self.slurm, name, now)
            nodes[name] = entry
        return {
            "scenario": self.scenario.name,
            "degraded_leaves": dict(self.scenario.degraded_leaves),
            "nodes": nodes,
            "reservations": [r.to_data() for r in self.slurm.reservations.values()],
        }
