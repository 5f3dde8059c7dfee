"""Emulated Slurm client tools: `scontrol show/update node`, `sinfo`, `squeue`, `scancel`
(`scontrol show job` and `sacct`: tools/slurm_jobs.py).

All nodes share one controller (FleetState.slurm), so a drain issued on any node is seen from
every node. `scontrol show node` follows the Slurm 24.05 layout in shared/samples/slurm/;
reasons carry `[user@timestamp]` as Slurm records them, and a drain reason stays until someone
resumes the node or overwrites it. On a node that cannot reach the controller
(`slurm: {unreadable: true}`) every call that needs slurmctld fails as the real clients do.

State words are Slurm's (src/common/slurm_protocol_defs.c, 24.05): scontrol prints the base
state and every flag (`IDLE+COMPLETING+DRAIN`, `IDLE+MAINTENANCE+RESERVED`), sinfo one word
(`drng`, `maint`, `drain$`, `resv`, `comp`). Reservations live in tools/slurm_resv.py.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Sequence
from types import MappingProxyType

from fleetfix.lab.kmsg import KERNEL_RELEASE, KERNEL_VERSION
from fleetfix.lab.slurm_state import SlurmJob, SlurmNode
from fleetfix.lab.state import FleetState
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines
from fleetfix.lab.tools.slurm_base import (
    CPUS,
    MEMORY_MB,
    compress_hostlist,
    expand_hostlist,
    stamp,
)
from fleetfix.lab.tools.slurm_jobs import show_job
from fleetfix.lab.tools.slurm_reboot import issue_due_reboots, reboot_command
from fleetfix.lab.tools.slurm_resv import reservation_command

NO_CONTROLLER = "Unable to contact slurm controller (connect failure)"
CONTROLLER_HOST = "head01"
_FORMAT_ITEM = re.compile(r"%(#|\.)?(-)?(\d+)?([A-Za-z])")


def node_flags(fleet: FleetState, name: str, now: float) -> list[str]:
    """The node's state flags in the order scontrol prints them."""
    slurm, record = fleet.slurm, fleet.slurm.nodes[name]
    reservation = slurm.reservation_of(name, now)
    flags = ["COMPLETING"] if slurm.completing(name) is not None else []
    if record.drain:
        flags.append("DRAIN")
    if reservation is not None:
        flags += ["MAINTENANCE", "RESERVED"] if reservation.maint else ["RESERVED"]
    if record.reboot is not None:
        flags.append(f"REBOOT_{record.reboot.upper()}")
    if fleet.nodes[name].status != "up":
        flags.append("NOT_RESPONDING")
    return flags


def state_long(fleet: FleetState, name: str, now: float) -> str:
    """scontrol's State=: base state plus flags, e.g. IDLE+DRAIN, IDLE+MAINTENANCE+RESERVED."""
    return "+".join([fleet.slurm.nodes[name].base, *node_flags(fleet, name, now)])


def state_sinfo(fleet: FleetState, name: str, short: bool, now: float) -> str:
    """sinfo's %t / %T word, as Slurm's node_state_string(_compact) picks it: idle, alloc,
    drain, drng (a drained node still running or completing a job), down, comp, maint,
    resv; `$` marks a maintenance reservation, `*` a node that does not respond."""
    flags = node_flags(fleet, name, now)
    record = fleet.slurm.nodes[name]
    allocated = record.base == "ALLOCATED"
    mark = "*" if "NOT_RESPONDING" in flags else _reboot_mark(flags)
    maint = "MAINTENANCE" in flags
    if maint and not (record.drain or allocated or record.base == "DOWN"):
        return "maint" + mark
    mark = "$" if maint else mark
    if record.base == "DOWN":
        return "down" + mark
    if record.drain:
        busy = allocated or "COMPLETING" in flags
        word = ("drng" if short else "draining") if busy else ("drain" if short else "drained")
        return word + mark
    if allocated:
        return ("alloc" if short else "allocated") + mark
    if "COMPLETING" in flags:
        return ("comp" if short else "completing") + mark
    if "RESERVED" in flags and not mark:
        return "resv" if short else "reserved"
    return "idle" + mark


def _reboot_mark(flags: list[str]) -> str:
    """sinfo's suffix for a pending Slurm reboot: `@` requested, `^` issued."""
    if "REBOOT_ISSUED" in flags:
        return "^"
    return "@" if "REBOOT_REQUESTED" in flags else ""


def _node_record(fleet: FleetState, name: str, now: float) -> list[str]:
    record = fleet.slurm.nodes[name]
    node = fleet.nodes[name]
    busy = record.base == "ALLOCATED"
    alloc_tres = f"cpu={CPUS},mem={MEMORY_MB}M,gres/gpu={node.spec.gpus}" if busy else ""
    rows = [
        f"NodeName={name} Arch=x86_64 CoresPerSocket=56 ",
        f"   CPUAlloc={CPUS if busy else 0} CPUEfctv={CPUS} CPUTot={CPUS} "
        f"CPULoad={'112.40' if busy else '0.52'}",
        "   AvailableFeatures=h100,ib",
        "   ActiveFeatures=h100,ib",
        f"   Gres=gpu:h100:{node.spec.gpus}",
        f"   NodeAddr={name} NodeHostName={name} Version=24.05.0",
        f"   OS=Linux {KERNEL_RELEASE} {KERNEL_VERSION} ",
        f"   RealMemory={MEMORY_MB} AllocMem={MEMORY_MB if busy else 0} FreeMem=1981234 "
        "Sockets=2 Boards=1",
        f"   State={state_long(fleet, name, now)} ThreadsPerCore=2 TmpDisk=0 Weight=1 "
        "Owner=N/A MCS_label=N/A",
        f"   Partitions={fleet.slurm.partition} ",
        f"   BootTime={stamp(node.boot.started)} SlurmdStartTime={stamp(node.boot.started + 40)}",
        f"   LastBusyTime={stamp(fleet.started)} ResumeAfterTime=None",
        f"   CfgTRES=cpu={CPUS},mem={MEMORY_MB}M,billing={CPUS},gres/gpu={node.spec.gpus}",
        f"   AllocTRES={alloc_tres}",
        "   CurrentWatts=0 AveWatts=0",
        "   ",
    ]
    if record.reason:
        rows.append(f"   Reason={record.reason} [{record.reason_user}@{stamp(record.reason_time)}]")
    reservation = fleet.slurm.reservation_of(name, now)
    if reservation is not None:  # printed since Slurm 23.02
        rows.append(f"   ReservationName={reservation.name}")
    return rows


def _cut_off(ctx: ToolContext) -> bool:
    """This node cannot reach slurmctld."""
    return ctx.fleet.slurm.nodes[ctx.node.name].unreadable


def scontrol(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    args = list(argv)
    oneliner = any(a in ("-o", "--oneliner") for a in args)
    args = [a for a in args if a not in ("-o", "--oneliner", "-d", "--details")]
    if _cut_off(ctx) and args[:1] != ["version"]:
        return _scontrol_cut_off(args)
    ctx.fleet.slurm.settle(ctx.now)
    issue_due_reboots(ctx)
    if len(args) >= 2 and args[0] == "show" and args[1] in ("node", "nodes", "NodeName"):
        return _show_nodes(ctx, args[2:], oneliner)
    if len(args) >= 2 and args[0] == "show" and args[1].split("=")[0] in ("job", "jobs", "jobid"):
        target = [args[1].split("=", 1)[1]] if "=" in args[1] else args[2:]
        return show_job(ctx, target, oneliner)
    reservations = reservation_command(ctx, args, oneliner)
    if reservations is not None:
        return reservations
    if args and args[0] == "update":
        return _update(ctx, args[1:])
    if args and args[0] == "reboot":
        return reboot_command(ctx, args[1:])
    if args and args[0] in ("ping", "version"):
        return ToolReply(
            stdout="slurm 24.05.0\n"
            if args[0] == "version"
            else f"Slurmctld(primary) at {CONTROLLER_HOST} is UP\n"
        )
    return fail(f"invalid keyword: {' '.join(args) or '(none)'}")


def _scontrol_cut_off(args: list[str]) -> ToolReply:
    if args[:1] == ["ping"]:
        return ToolReply(stdout=f"Slurmctld(primary) at {CONTROLLER_HOST} is DOWN\n", rc=1)
    if args[:1] == ["update"]:
        return fail(f"slurm_update error: {NO_CONTROLLER}")
    if args[:1] == ["create"]:
        return fail(f"Error creating the reservation: {NO_CONTROLLER}")
    if args[:1] == ["delete"]:
        return fail(f"delete_reservation {' '.join(args[1:2])}: {NO_CONTROLLER}")
    if args[1:2] and args[1].lower().startswith("res"):
        return fail(f"slurm_load_reservations error: {NO_CONTROLLER}")
    return fail(f"slurm_load_node error: {NO_CONTROLLER}")


def _show_nodes(ctx: ToolContext, names: list[str], oneliner: bool) -> ToolReply:
    wanted = [n for arg in names for n in expand_hostlist(arg)] or list(ctx.fleet.nodes)
    missing = [n for n in wanted if n not in ctx.fleet.nodes]
    if missing:
        return fail(f"Node {missing[0]} not found")
    records = []
    for name in wanted:
        rows = _node_record(ctx.fleet, name, ctx.now)
        if oneliner:
            records.append(" ".join(row.strip() for row in rows if row.strip()) + "\n")
        else:
            records.append(lines(*rows, ""))
    return ToolReply(stdout="".join(records))


def _update(ctx: ToolContext, args: list[str]) -> ToolReply:
    fields: dict[str, str] = {}
    for token in args:
        key, eq, value = token.partition("=")
        if not eq:
            return fail(f"Invalid input: {token}\nRequest aborted")
        fields[key.lower()] = value
    names = expand_hostlist(fields.get("nodename", ""))
    if not names or any(n not in ctx.fleet.nodes for n in names):
        return fail("slurm_update error: Invalid node name specified")
    state = fields.get("state", "").upper()
    for name in names:
        problem = _apply_state(ctx, ctx.fleet.slurm.nodes[name], state, fields.get("reason"))
        if problem:
            return fail(problem)
    return ToolReply()


def _apply_state(ctx: ToolContext, record: SlurmNode, state: str, reason: str | None) -> str | None:
    if state in ("DRAIN", "DOWN"):
        if not reason:
            return "You must specify a reason when DOWNING or DRAINING a node. Request denied"
        record.drain = record.drain or state == "DRAIN"
        record.base = "DOWN" if state == "DOWN" else record.base
        record.reason, record.reason_user, record.reason_time = reason, ctx.user, ctx.now
        return None
    if state in ("RESUME", "UNDRAIN"):
        if not record.drain and record.base != "DOWN":
            return "slurm_update error: Invalid node state specified"
        record.drain = False
        if state == "RESUME" and record.base == "DOWN":
            record.base = "IDLE"
        record.reason = record.reason_user = None
        record.reason_time = None
        return None
    if reason is not None and not state:
        record.reason, record.reason_user, record.reason_time = reason, ctx.user, ctx.now
        return None
    return "slurm_update error: Invalid node state specified"


def _sinfo_value(fleet: FleetState, names: list[str], spec: str, now: float) -> str:
    name = names[0]
    record = fleet.slurm.nodes[name]
    used = CPUS if record.base == "ALLOCATED" else 0
    values: dict[str, Callable[[], str]] = {
        "N": lambda: compress_hostlist(names),
        "n": lambda: name,
        "T": lambda: state_sinfo(fleet, name, short=False, now=now),
        "t": lambda: state_sinfo(fleet, name, short=True, now=now),
        "E": lambda: record.reason or "none",
        "H": lambda: stamp(record.reason_time) if record.reason else "Unknown",
        "u": lambda: record.reason_user or "Unknown",
        "P": lambda: fleet.slurm.partition + "*",
        "R": lambda: fleet.slurm.partition,
        "D": lambda: str(len(names)),
        "c": lambda: str(CPUS),
        "C": lambda: f"{used}/{CPUS - used}/0/{CPUS}",
        "G": lambda: f"gpu:h100:{fleet.nodes[name].spec.gpus}",
        "a": lambda: "up",
        "l": lambda: "infinite",
        "m": lambda: str(MEMORY_MB),
        "e": lambda: "1981234",
        "O": lambda: "0.52",
        "f": lambda: "h100,ib",
    }
    getter = values.get(spec)
    return getter() if getter else ""


def _format_row(
    fleet: FleetState, names: list[str], fmt: str, header: bool, now: float = 0.0
) -> str:
    def one(match: re.Match[str]) -> str:
        flag, _minus, width, spec = match.groups()
        text = (
            _SINFO_HEADERS.get(spec, spec.upper())
            if header
            else _sinfo_value(fleet, names, spec, now)
        )
        if width is None:
            return text
        return text[: int(width)].rjust(int(width)) if flag == "." else text.ljust(int(width))

    return _FORMAT_ITEM.sub(one, fmt)


_SINFO_HEADERS = MappingProxyType(
    {
        "N": "NODELIST",
        "n": "HOSTNAMES",
        "T": "STATE",
        "t": "STATE",
        "E": "REASON",
        "H": "TIMESTAMP",
        "u": "USER",
        "P": "PARTITION",
        "R": "PARTITION",
        "D": "NODES",
        "c": "CPUS",
        "C": "CPUS(A/I/O/T)",
        "G": "GRES",
        "a": "AVAIL",
        "l": "TIMELIMIT",
        "m": "MEMORY",
        "e": "FREE_MEM",
        "O": "CPU_LOAD",
        "f": "AVAIL_FEATURES",
    }
)


def sinfo(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    options = _sinfo_options(list(argv))
    if isinstance(options, str):
        return fail(options)
    if _cut_off(ctx):
        return fail(f"slurm_load_partitions: {NO_CONTROLLER}")
    ctx.fleet.slurm.settle(ctx.now)
    per_node, header, fmt, nodes = options
    names = [n for n in ctx.fleet.nodes if nodes is None or n in nodes]
    if per_node:
        groups = [[name] for name in names]
        fmt = fmt or "%#N %.6D %#P %6t"
    else:
        fmt = fmt or "%9P %.5a %.10l %.6D %.6t %N"
        groups = _group(ctx.fleet, names, fmt, ctx.now)
    fmt = fmt.replace("%#N", f"%{max([len(n) for n in names] + [8])}N").replace("%#P", "%.9P")
    rows = [_format_row(ctx.fleet, [], fmt, header=True)] if header else []
    rows += [_format_row(ctx.fleet, group, fmt, False, ctx.now) for group in groups]
    return ToolReply(stdout=lines(*rows))


def _group(fleet: FleetState, names: list[str], fmt: str, now: float) -> list[list[str]]:
    key_fmt = fmt.replace("%N", "").replace("%D", "")
    groups: dict[str, list[str]] = {}
    for name in names:
        key = _format_row(fleet, [name], key_fmt, False, now)
        groups.setdefault(key, []).append(name)
    return list(groups.values())


def _sinfo_options(args: list[str]) -> tuple[bool, bool, str | None, set[str] | None] | str:
    per_node, header, fmt, nodes = False, True, None, None
    while args:
        arg = args.pop(0)
        name, eq, inline = arg.partition("=")
        if arg in ("-N", "--Node"):
            per_node = True
        elif arg in ("-h", "--noheader"):
            header = False
        elif arg in ("-R", "--list-reasons"):
            fmt = "%20E %9u %19H %N"
        elif arg in ("-l", "--long", "-r", "--responding", "-a", "--all"):
            continue
        elif name in ("-o", "--format", "-n", "--nodes", "-p", "--partition", "-t", "--states"):
            value = inline if eq else (args.pop(0) if args else "")
            if name in ("-o", "--format"):
                fmt = value
            elif name in ("-n", "--nodes"):
                nodes = set(expand_hostlist(value))
        else:
            return f"sinfo: unrecognized option '{arg}'\nTry \"sinfo --help\" for more information"
    return per_node, header, fmt, nodes


def squeue(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    if _cut_off(ctx):
        return fail(f"slurm_load_jobs error: {NO_CONTROLLER}")
    ctx.fleet.slurm.settle(ctx.now)
    args = list(argv)
    header = not any(a in ("-h", "--noheader") for a in args)
    nodes = _option(args, ("-w", "--nodelist"))
    fmt = _option(args, ("-o", "--format")) or "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
    wanted = set(expand_hostlist(nodes)) if nodes else None
    jobs = [j for j in ctx.fleet.slurm.jobs.values() if wanted is None or wanted & set(j.nodes)]
    rows = [_job_row(fmt, None, ctx.now)] if header else []
    rows += [_job_row(fmt, job, ctx.now) for job in jobs]
    return ToolReply(stdout=lines(*rows))


def _option(args: list[str], names: tuple[str, ...]) -> str | None:
    for index, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        if key in names:
            return value if eq else (args[index + 1] if index + 1 < len(args) else "")
    return None


def _job_row(fmt: str, job: SlurmJob | None, now: float) -> str:
    headers = {
        "i": "JOBID",
        "A": "JOBID",
        "P": "PARTITION",
        "j": "NAME",
        "u": "USER",
        "t": "ST",
        "T": "STATE",
        "M": "TIME",
        "D": "NODES",
        "R": "NODELIST(REASON)",
        "N": "NODELIST",
    }

    def one(match: re.Match[str]) -> str:
        flag, _minus, width, spec = match.groups()
        if job is not None:
            elapsed = int(now - job.started)
            values = {
                "i": str(job.job_id),
                "A": str(job.job_id),
                "P": "gpu",
                "j": job.name,
                "u": job.user,
                "t": "R" if job.epilog_until is None else "CG",
                "T": "RUNNING" if job.epilog_until is None else "COMPLETING",
                "M": f"{elapsed // 3600}:{elapsed % 3600 // 60:02d}:{elapsed % 60:02d}",
                "D": str(len(job.nodes)),
                "R": compress_hostlist(list(job.nodes)),
                "N": compress_hostlist(list(job.nodes)),
            }
            text = values.get(spec, "")
        else:
            text = headers.get(spec, spec.upper())
        if width is None:
            return text
        return text[: int(width)].rjust(int(width)) if flag == "." else text.ljust(int(width))

    return _FORMAT_ITEM.sub(one, fmt)


def scancel(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    ids = [a for a in argv if not a.startswith("-")]
    if not ids:
        return fail("scancel: error: No job identification provided")
    if _cut_off(ctx):
        return fail(
            "".join(
                f"scancel: error: Kill job error on job id {text}: {NO_CONTROLLER}\n"
                for text in ids
            )
        )
    ctx.fleet.slurm.settle(ctx.now)
    for text in ids:
        job = ctx.fleet.slurm.jobs.get(int(text)) if text.isdigit() else None
        if job is not None and job.epilog_until is not None:
            continue  # already ending: scancel says nothing, like Slurm
        if job is None:
            return fail(
                f"scancel: error: Kill job error on job id {text}: Invalid job id specified"
            )
        end_job(ctx, job.job_id)
    return ToolReply()


def end_job(ctx: ToolContext, job_id: int) -> None:
    """The job's processes die and its node goes back to idle (keeping any drain). With an
    epilog (timing.epilog) the node is COMPLETING until it has run: the job stays in squeue
    as CG and still holds the node; `SlurmState.settle` ends it."""
    slurm = ctx.fleet.slurm
    job = slurm.jobs[job_id]
    if job.epilog_until is not None:
        return  # already ending (scancel, then its processes died)
    for name in job.nodes:  # a job across nodes ends on all of them, as Slurm ends it
        node = ctx.fleet.nodes[name]
        for process in [p for p in node.processes if p.job_id == job_id]:
            ctx.hooks.kill_process(node, process.pid, signal.SIGKILL)
        record = slurm.nodes[name]
        if record.base == "ALLOCATED":
            record.base = "IDLE"
    if slurm.epilog > 0 and job.epilog_until is None:
        job.epilog_until = ctx.now + slurm.epilog
        return
    del slurm.jobs[job_id]
    for name in job.nodes:
        if slurm.nodes[name].job_id == job_id:
            slurm.nodes[name].job_id = None
