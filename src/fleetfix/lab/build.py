"""Build the lab's initial state from a scenario: nodes, GPUs, faults, logs and node files.

Also owns the few node files the sandbox mounts (boot id, /proc/driver/nvidia/version, the
node's /dev/shm directory), because boot and driver transitions rewrite them.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from types import MappingProxyType

from fleetfix.lab import drivers, fabric, kmod, kmsg
from fleetfix.lab.boards import HGX_BUS_NUMBERS
from fleetfix.lab.layout import NodeSpec, fleet_layout
from fleetfix.lab.scenario import NodeFaults, Scenario
from fleetfix.lab.slurm_state import SlurmJob, SlurmNode, SlurmState
from fleetfix.lab.state import (
    Boot,
    EventState,
    Fault,
    FleetState,
    GpuProcess,
    GpuState,
    LogLine,
    NodePaths,
    NodeState,
    Service,
    stable_hex,
    stable_uuid,
)

VM_FIRST_SLOT = 6
"""A VM's first passed-through GPU sits at PCI 00:06.0 (the real Firecracker capture)."""
_MODULE_USERS = MappingProxyType(
    {
        "nvidia": ("nvidia_uvm", "nvidia_peermem", "nvidia_modeset"),
        "nvidia_modeset": ("nvidia_drm",),
    }
)


def build_fleet(scenario: Scenario, state_dir: Path, now: float) -> FleetState:
    """Fresh state for every node of `scenario`, with node files under `state_dir/nodes`."""
    slurm = SlurmState(partition=scenario.fleet.partition, epilog=scenario.timing.epilog)
    nodes: dict[str, NodeState] = {}
    for spec in fleet_layout(scenario.fleet, scenario.hardware_of):
        node = build_node(scenario, spec, NodePaths(state_dir / "nodes" / spec.name), now)
        nodes[spec.name] = node
        slurm.nodes[spec.name] = _slurm_node(scenario.faults_of(spec.name), spec.name, now, slurm)
        _tag_job_processes(node, slurm.nodes[spec.name].job_id)
    return FleetState(scenario=scenario, nodes=nodes, slurm=slurm, started=now)


def build_node(scenario: Scenario, spec: NodeSpec, paths: NodePaths, now: float) -> NodeState:
    injected = scenario.faults_of(spec.name)
    uptime = 86400.0 * (3 + spec.index % 23) + 3600.0 * (spec.index % 7) + 17.25
    gpus = [_gpu(spec, index, injected) for index in range(spec.gpus)]
    persistence = scenario.fleet.persistence_at_boot and not injected.persistence_off_at_boot
    node = NodeState(
        spec=spec,
        injected=injected,
        paths=paths,
        gpus=gpus,
        boots=[Boot(boot_id=str(uuid.uuid4()), started=now - uptime)],
        persistence_at_boot=persistence,
    )
    if node.env.passthrough:
        for gpu in gpus:
            gpu.bus, gpu.device = 0, VM_FIRST_SLOT + gpu.index
    node.faults = _faults(injected)
    node.modules = _modules(
        node.module_names, injected.modules_unloaded, injected.third_party_modules
    )
    node.services = _services(node, injected) if node.env.units else {}
    active = not injected.persistence_off and node.driver_loaded()
    for gpu in gpus:
        gpu.persistence = node.unit_active("nvidia-persistenced") or (
            not node.env.units and persistence and active
        )
    fabric.scenario_start(node, injected.fabric_manager)
    node.processes = [
        GpuProcess(
            p.name,
            p.gpu,
            p.used_mib,
            job_id=p.job_id,
            user=p.user,
            args=p.args,
            ignores_term=p.ignores_term,
        )
        for p in injected.gpu_processes
    ]
    node.events = [EventState(event) for event in injected.events]
    node.status = "unreachable" if injected.unreachable else "up"
    node.boot.lines = _initial_log(node, uptime)
    prepare_files(node, node.driver)
    wipe_shm(node)
    if injected.stale_shm is not None:
        node.stale_files = _stale_files(node, injected, now)
    return node


def _gpu(spec: NodeSpec, index: int, injected: NodeFaults) -> GpuState:
    digest = stable_hex("gpu", spec.name, index)
    gpu = GpuState(
        index=index,
        bus=HGX_BUS_NUMBERS[index],
        uuid="GPU-" + stable_uuid("gpu", spec.name, index),
        serial="16521" + str(int(digest[:12], 16))[-8:].rjust(8, "0"),
        persistence=True,
    )
    for ecc in injected.ecc:
        if ecc.gpu == index:
            gpu.volatile_sbe += ecc.volatile_sbe
            gpu.volatile_dbe += ecc.volatile_dbe
            gpu.aggregate_sbe += ecc.aggregate_sbe + ecc.volatile_sbe
            gpu.aggregate_dbe += ecc.aggregate_dbe + ecc.volatile_dbe
    for remap in injected.row_remap:
        if remap.gpu == index:
            gpu.remap_pending = gpu.remap_pending or remap.pending
            gpu.remap_failure = gpu.remap_failure or remap.failure
            gpu.remap_correctable += remap.correctable
            gpu.remap_uncorrectable += remap.uncorrectable
            gpu.remap_histogram = remap.histogram or gpu.remap_histogram
            gpu.unrepairable = gpu.unrepairable or remap.unrepairable
    for sram in injected.sram:
        if sram.gpu == index:
            gpu.sram_volatile += sram.volatile
            gpu.sram_aggregate += sram.aggregate
            gpu.sram_threshold = gpu.sram_threshold or sram.threshold_exceeded
            gpu.sram_source = sram.source
    return gpu


def _faults(injected: NodeFaults) -> list[Fault]:
    faults = [
        Fault("xid", x.recovery, gpu=x.gpu, code=x.code, action=x.action) for x in injected.xids
    ]
    faults += [
        Fault("sxid", "reset", gpu=x.gpu, code=x.code, value=x.switch)
        for x in injected.sxids
        if x.fatal
    ]
    wrong = injected.nccl_wrong
    if wrong is not None:
        faults.append(Fault("nccl_wrong", wrong.recovery, gpu=wrong.gpu, value=wrong.elements))
    if injected.hung_nvidia_smi:
        faults.append(Fault("hung_nvidia_smi", injected.hung_nvidia_smi))
    faults += [Fault("gpu_init_failed", f.recovery, gpu=f.gpu) for f in injected.init_failed]
    faults += [Fault("missing_gpu", "never", gpu=g) for g in injected.missing_gpus]
    faults += [
        Fault("gpu_missing_after_reboot", "never", gpu=g) for g in injected.missing_after_reboot
    ]
    faults += [Fault("nvlink_down", "never", gpu=n.gpu, value=n.link) for n in injected.nvlink_down]
    faults += [Fault("ib_port_down", "never", value=p) for p in injected.ib_ports_down]
    faults += [Fault("ib_symbol_errors", "never", value=f.port) for f in injected.ib_symbol_errors]
    if injected.slow_nccl is not None:
        faults.append(Fault("slow_nccl", injected.slow_nccl_recovery, value=injected.slow_nccl))
    if injected.unreachable:
        faults.append(Fault("unreachable", "never"))
    if injected.flaky_ssh is not None:
        faults.append(Fault("flaky_ssh", "never", value=injected.flaky_ssh))
    if injected.slow_ssh_ms:
        faults.append(Fault("slow_ssh", "never", value=injected.slow_ssh_ms))
    return faults


def _modules(
    names: tuple[str, ...], unloaded: tuple[str, ...], third_party: tuple[str, ...]
) -> dict[str, bool]:
    """Loaded modules; unloading a module also unloads everything that uses it (the
    third-party modules use `nvidia`)."""
    loaded = dict.fromkeys(names, True)
    pending = [name for name in unloaded if name in loaded]
    while pending:
        name = pending.pop()
        loaded[name] = False
        users = (*_MODULE_USERS.get(name, ()), *(third_party if name == "nvidia" else ()))
        pending.extend(user for user in users if loaded.get(user))
    return loaded


def _services(node: NodeState, injected: NodeFaults) -> dict[str, Service]:
    driver = node.driver_loaded()
    persist_enabled = node.persistence_at_boot
    persist_active = persist_enabled and not injected.persistence_off and driver
    services = {"nvidia-persistenced": Service(enabled=persist_enabled, active=persist_active)}
    for unit in node.board.units[1:]:
        needs_driver = unit in ("nvidia-fabricmanager", "nvidia-imex")
        services[unit] = Service(enabled=True, active=driver or not needs_driver)
    for unit in injected.extra_units:
        services[unit] = Service(enabled=True, active=True)
    return services


def boot_services(node: NodeState) -> None:
    """Services come back as enabled at boot (after the driver loaded); a node without
    systemd sets persistence mode as its boot scripts always do."""
    for service in node.services.values():
        service.active = service.enabled
    for gpu in node.gpus:
        gpu.persistence = node.unit_active("nvidia-persistenced") or (
            not node.env.units and node.persistence_at_boot
        )


def _initial_log(node: NodeState, uptime: float) -> list[LogLine]:
    lines = kmsg.boot_lines(node.driver, node.gpus, driver_build(node))
    lines += init_failures(node, kmsg.INIT_FAILED_UPTIME)
    forms = drivers.forms(node.driver)
    reported: dict[int, str] = {}
    events = sorted(
        (max(uptime - xid.ago, 60.0 + index), index) for index, xid in enumerate(node.injected.xids)
    )
    for when, index in events:
        xid = node.injected.xids[index]
        gpu = node.gpus[xid.gpu]
        pid = 10000 + int(stable_hex("pid", node.name, index)[:6], 16) % 2000000
        device = node.board.gpu_device
        lines.extend(
            kmsg.xid_lines(xid.code, gpu, when, pid, "python3", form=xid.form, device=device)
        )
        if forms.recovery_action:
            action = xid.action or drivers.default_action(xid.code, xid.recovery)
            lines.extend(kmsg.action_change(forms, reported, gpu, action, when))
    for aer in node.injected.pcie_aer:
        gpu = node.gpus[aer.gpu]
        device = node.board.gpu_device
        lines.extend(
            kmsg.aer_lines(gpu, max(uptime - aer.ago, 65.0), fatal=aer.fatal, device=device)
        )
    for index, sxid in enumerate(node.injected.sxids):
        when = max(uptime - sxid.ago, 70.0 + index)
        bus = node.board.switch_buses[sxid.switch]
        lines.extend(kmsg.sxid_lines(sxid, bus, when))
        if sxid.fatal and sxid.gpu is not None and forms.recovery_action:
            gpu = node.gpus[sxid.gpu]
            lines.extend(kmsg.action_change(forms, reported, gpu, drivers.RESET, when))
    return sorted(lines, key=lambda line: line.uptime)


def init_failures(node: NodeState, uptime: float) -> list[LogLine]:
    """`RmInitAdapter failed!` for each GPU the driver fails to initialise in this boot (at
    boot, or when the nvidia module loads)."""
    failed = [g for g in node.gpus if node.gpu_on_bus(g.index) and node.init_failed(g.index)]
    return [line for gpu in failed for line in kmsg.init_failed_lines(gpu, uptime)]


def _slurm_node(injected: NodeFaults, name: str, now: float, slurm: SlurmState) -> SlurmNode:
    record = _slurm_state(injected, name, now, slurm)
    record.unreadable = injected.slurm.unreadable
    return record


def _slurm_state(injected: NodeFaults, name: str, now: float, slurm: SlurmState) -> SlurmNode:
    spec = injected.slurm
    if spec.state == "alloc":
        job_id = spec.job_id or slurm.next_job
        slurm.next_job = max(slurm.next_job, job_id) + 1
        user = spec.user or "alice"
        running = slurm.jobs.get(job_id)
        if running is not None:  # several nodes name one job: a job across them
            running.more_nodes = (*running.more_nodes, name)
        else:
            slurm.jobs[job_id] = SlurmJob(job_id, user, name, "train.sbatch", now - 5400.0)
        return SlurmNode(base="ALLOCATED", job_id=job_id)
    if spec.state == "drained":
        reason = spec.reason or "maintenance"
        return SlurmNode(
            drain=True, reason=reason, reason_user=spec.user or "root", reason_time=now - 7200.0
        )
    if spec.state == "down":
        return SlurmNode(
            base="DOWN",
            reason=spec.reason or "Not responding",
            reason_user=spec.user or "slurm",
            reason_time=now - 7200.0,
        )
    return SlurmNode()


def _tag_job_processes(node: NodeState, job_id: int | None) -> None:
    """The node's processes are its running job's, but for those the scenario puts in a job
    of their own (a finished job's left-overs)."""
    for process in node.processes:
        process.job_id = process.job_id or job_id


def prepare_files(node: NodeState, driver: str) -> None:
    """Create the node's directories and the files the sandbox mounts."""
    paths = node.paths
    for directory in (paths.shm, paths.proc_driver, paths.home, paths.var_lib_fleetfix):
        directory.mkdir(parents=True, exist_ok=True)
    write_boot_id(node)
    write_driver_files(node, driver)


def driver_build(node: NodeState) -> kmsg.DriverBuild:
    return kmsg.DriverBuild(
        open_module=node.open_module,
        host_modules=node.env.host_modules,
        legacy_persistence=not node.env.units and node.persistence_at_boot,
    )


def write_proc_modules(node: NodeState) -> None:
    """Rewrite in place: the sandbox bind-mounts this inode over /proc/modules."""
    with open(node.paths.proc_modules, "w", encoding="ascii") as handle:
        handle.write(kmod.proc_modules(node))


def write_boot_id(node: NodeState) -> None:
    """Rewrite in place: the sandbox bind-mounts this inode over /proc/.../boot_id."""
    with open(node.paths.boot_id, "w", encoding="ascii") as handle:
        handle.write(node.boot.boot_id + "\n")


def write_driver_files(node: NodeState, driver: str) -> None:
    """/proc/driver/nvidia exists only while the nvidia module is loaded; /proc/modules
    lists what is loaded (both change with every module load and unload)."""
    nvidia = node.paths.proc_driver / "nvidia"
    if node.driver_loaded():
        nvidia.mkdir(exist_ok=True)
        text = kmsg.driver_version_file(driver, open_module=node.open_module)
        (nvidia / "version").write_text(text, encoding="ascii")
    elif nvidia.exists():
        shutil.rmtree(nvidia)
    write_proc_modules(node)


def wipe_shm(node: NodeState) -> None:
    """A reboot empties /dev/shm (it is a tmpfs)."""
    for entry in node.paths.shm.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    node.stale_files = []


def _stale_files(node: NodeState, injected: NodeFaults, now: float) -> list[str]:
    spec = injected.stale_shm
    assert spec is not None
    names = []
    for index in range(spec.count):
        name = "nccl-" + stable_hex("shm", node.name, index)[:6]
        path = node.paths.shm / name
        with open(path, "wb") as handle:
            handle.truncate(spec.size)
        stamp = now - spec.age - 37.0 * index
        os.utime(path, (stamp, stamp))
        names.append(name)
    return names
