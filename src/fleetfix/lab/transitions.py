"""How remediation changes a node: GPU reset, driver unload/load, reboot, cold power cycle.

Each fault carries the weakest remediation that clears it (reset < reload < reboot <
power_cycle; never). A reset clears `reset` faults of the GPUs it reset; loading the driver
after it was unloaded clears `reset` and `reload` faults; a warm reboot clears all up to
`reboot` and every volatile thing; a boot after the power was removed (a BMC power cycle, or
off and on) clears `power_cycle` faults too.
"""

from __future__ import annotations

import uuid

from fleetfix.lab import drivers, fabric, kmsg
from fleetfix.lab.build import (
    boot_services,
    driver_build,
    init_failures,
    wipe_shm,
    write_boot_id,
    write_driver_files,
    write_proc_modules,
)
from fleetfix.lab.slurm_state import SlurmState
from fleetfix.lab.state import Boot, Fault, GpuState, LogLine, NodeState

_NEVER_RELOG_CODES = frozenset({79})


def uptime(node: NodeState, now: float) -> float:
    return max(now - node.boot.started, 0.0)


def log(node: NodeState, lines: list[LogLine]) -> None:
    node.boot.lines.extend(lines)


def recover(node: NodeState, level: str, gpus: set[int] | None = None) -> list[Fault]:
    """Drop the faults that `level` clears (only those on `gpus` when given); return them."""
    cleared = [
        fault
        for fault in node.faults
        if fault.cleared_by(level) and (gpus is None or fault.gpu in gpus)
    ]
    node.faults = [fault for fault in node.faults if fault not in cleared]
    return cleared


def _reinitialise(gpu: GpuState) -> None:
    """What any GPU re-initialisation does: volatile counters zeroed, pending remaps applied."""
    gpu.volatile_sbe = 0
    gpu.volatile_dbe = 0
    gpu.sram_volatile = 0
    gpu.remap_pending = False


def reset_gpus(node: NodeState, indexes: list[int]) -> None:
    recover(node, "reset", set(indexes))
    for index in indexes:
        _reinitialise(node.gpus[index])
    fabric.gpus_reset(node, indexes)


def set_service(node: NodeState, unit: str, active: bool) -> None:
    """A unit starts or stops, with what that does to the GPUs (lab/fabric.py)."""
    service = node.services[unit]
    was_active = service.active
    service.active = active
    fabric.service_changed(node, unit, active, was_active)


def unload_module(node: NodeState, name: str, now: float) -> None:
    node.modules[name] = False
    write_proc_modules(node)
    if name == "nvidia":
        for gpu in node.gpus:
            gpu.persistence = False
        log(node, kmsg.driver_unload_lines(uptime(node, now)))


def load_module(node: NodeState, name: str, now: float, driver: str) -> None:
    """Load one module (its dependencies must already be loaded)."""
    if node.modules.get(name):
        return
    node.modules[name] = True
    write_proc_modules(node)
    if name == "nvidia":
        recover(node, "reload")
        for gpu in node.gpus:
            _reinitialise(gpu)
        since_boot = uptime(node, now)
        log(node, kmsg.driver_load_lines(driver, since_boot, driver_build(node))[:2])
        log(node, init_failures(node, since_boot + 1.8))
        write_driver_files(node, driver)
        fabric.driver_loaded(node)


def finish_unload(node: NodeState, driver: str) -> None:
    write_driver_files(node, driver)


def begin_reboot(node: NodeState, now: float, reboot_time: float, level: str = "reboot") -> None:
    """The node goes down for `reboot_time`; `level` says what its next boot clears."""
    node.status = "rebooting"
    node.reboot_due = now + reboot_time
    node.boot_level = level
    node.processes = []


def power_off(node: NodeState) -> None:
    """The BMC cut the power: the node is down until it is powered on again."""
    node.status = "off"
    node.reboot_due = None
    node.processes = []


def finish_reboot(node: NodeState, now: float) -> None:
    """The node comes back: new boot id, fresh volatile state, hardware faults unchanged
    (those a cold power cycle clears go too when the power was removed)."""
    driver = node.driver
    recover(node, node.boot_level)
    if node.boot_level == "power_cycle":
        node.power_cycles += 1
    node.boot_level = "reboot"
    node.boots.append(Boot(boot_id=str(uuid.uuid4()), started=now))
    node.modules = dict.fromkeys(node.module_names, True)  # written by write_driver_files
    boot_services(node)
    for gpu in node.gpus:
        _reinitialise(gpu)
    fabric.driver_loaded(node)
    wipe_shm(node)
    write_boot_id(node)
    write_driver_files(node, driver)
    node.boot.lines = kmsg.boot_lines(driver, node.gpus, driver_build(node))
    node.boot.lines += init_failures(node, kmsg.INIT_FAILED_UPTIME)
    node.boot.lines += _recurring_lines(node)
    node.status = "up"
    node.reboot_due = None


def _recurring_lines(node: NodeState) -> list[LogLine]:
    """Faults a reboot cannot fix show up again in the new boot's log (with Xid 154 from 570);
    a GPU that fell off the bus does not: it fails to initialise instead (init_failures)."""
    lines: list[LogLine] = []
    forms = drivers.forms(node.driver)
    reported: dict[int, str] = {}
    for fault in node.faults:
        if fault.kind != "xid" or fault.gpu is None or fault.code is None:
            continue
        gpu = node.gpus[fault.gpu]
        if fault.code in _NEVER_RELOG_CODES:
            continue
        fault.boot = node.boot_number
        lines.extend(kmsg.xid_lines(fault.code, gpu, 95.5, 0, "python3"))
        if forms.recovery_action:
            lines.extend(kmsg.action_change(forms, reported, gpu, fault.driver_action(), 95.5))
    return lines


def slurm_node_rebooted(slurm: SlurmState, name: str) -> None:
    """Jobs on a rebooted node die; the node returns idle, keeping any drain and reason."""
    record = slurm.nodes[name]
    if record.job_id is not None:
        slurm.jobs.pop(record.job_id, None)
        record.job_id = None
    if record.base == "ALLOCATED":
        record.base = "IDLE"
