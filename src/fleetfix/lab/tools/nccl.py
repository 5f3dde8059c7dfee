"""Emulated nccl-tests (`all_reduce_perf` & co) and `mpirun` for multi-node runs.

Output follows nccl-tests' own printf formats as in shared/samples/nccl-tests/ (bitdeer and
coreweave captures). Bandwidth comes from a simple model: per-call latency plus size over the
peak bandwidth (the board's), scaled by the node's `slow_nccl` factor, its NVLink and IB
health, and for multi-node runs by a degraded leaf switch above any of the nodes. A GPU that
CUDA cannot use yet (lab/fabric.py: Fabric Manager, fabric registration, a fatal SXid) fails the
run; `nccl_wrong` fills the #wrong columns (printed with %g, as nccl-tests does, so large counts
come out as 1.57286e+06) and fails it at the end.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from fleetfix.lab import fabric
from fleetfix.lab.state import FleetState, NodeState
from fleetfix.lab.tools.base import Handler, ToolContext, ToolReply, fail, lines

PEAK_INTER_NODE = 468.0
LATENCY_US = MappingProxyType({True: 11.5, False: 24.0})
OPS = MappingProxyType(
    {
        "all_reduce_perf": ("sum", 2.0),
        "all_gather_perf": ("none", 1.0),
        "reduce_scatter_perf": ("sum", 1.0),
        "alltoall_perf": ("none", 1.0),
        "broadcast_perf": ("none", 0.0),
        "reduce_perf": ("sum", 0.0),
        "sendrecv_perf": ("sum", 0.0),
    }
)
"""Binary -> (redop column, bus factor): busbw = algbw * factor * (n-1)/n, or algbw if 0."""
_SIZE = re.compile(r"^(\d+)([KMGT]?)$", re.IGNORECASE)
_SIZE_UNITS = MappingProxyType({"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40})


@dataclass(frozen=True, slots=True)
class PerfArgs:
    min_bytes: int = 33554432
    max_bytes: int = 33554432
    factor: int = 2
    gpus: int = 1
    iters: int = 20
    warmup: int = 5


@dataclass(frozen=True, slots=True)
class Rank:
    host: str
    device: int
    bus: int
    pid: int
    model: str = "NVIDIA H100 80GB HBM3"


def parse_size(text: str) -> int | None:
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]


def parse_perf_args(argv: Sequence[str]) -> PerfArgs | str:
    values: dict[str, str] = {}
    items = list(argv)
    names = {
        "-b": "min",
        "--minbytes": "min",
        "-e": "max",
        "--maxbytes": "max",
        "-f": "factor",
        "--stepfactor": "factor",
        "-g": "gpus",
        "--ngpus": "gpus",
        "-n": "iters",
        "--iters": "iters",
        "-w": "warmup",
        "--warmup_iters": "warmup",
    }
    while items:
        arg = items.pop(0)
        key, eq, inline = arg.partition("=")
        value = inline if eq else (items.pop(0) if items else "")
        if key in names:
            values[names[key]] = value
        elif not key.startswith("-"):
            return f"invalid argument '{arg}'"
    return _perf_args(values)


def _perf_args(values: dict[str, str]) -> PerfArgs | str:
    low = parse_size(values.get("min", "32M"))
    high = parse_size(values.get("max", values.get("min", "32M")))
    numbers = {
        k: values.get(k, d)
        for k, d in (("factor", "2"), ("gpus", "1"), ("iters", "20"), ("warmup", "5"))
    }
    if low is None or high is None or not all(v.isdigit() for v in numbers.values()):
        return "invalid argument"
    return PerfArgs(
        low,
        max(high, low),
        max(int(numbers["factor"]), 2),
        max(int(numbers["gpus"]), 1),
        int(numbers["iters"]),
        int(numbers["warmup"]),
    )


def perf_tool(name: str) -> Handler:
    """A handler for one nccl-tests binary (`all_reduce_perf`, ...)."""

    def handler(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
        args = parse_perf_args(argv)
        if isinstance(args, str):
            return fail(f"{name}: {args}")
        return run_perf(ctx, name, args, [(ctx.node, args.gpus)])

    return handler


def run_perf(
    ctx: ToolContext, name: str, args: PerfArgs, placement: list[tuple[NodeState, int]]
) -> ToolReply:
    """Run one collective over `placement` (node, processes-or-GPUs on it)."""
    if any(node.has_fault("hung_nvidia_smi") for node, _ in placement):
        return ToolReply(hang=True)  # a hung GPU hangs every CUDA program, not just nvidia-smi
    failure = _failure(ctx, placement, args)
    ranks = _ranks(placement, args)
    head = _header(name, args, ranks)
    if failure is not None:
        return ToolReply(stdout=lines(*head) + failure, rc=1, delay=ctx.fleet.scenario.timing.nccl)
    bandwidth = _peak(ctx.fleet, placement)
    wrong = _wrong_elements(placement)
    rows = _rows(name, args, len(ranks), bandwidth, single=len(placement) == 1, wrong=wrong)
    body = [row for row, _, _ in rows]
    average = sum(bus for _, bus, _ in rows) / len(rows)
    errors = sum(bad for _, _, bad in rows)
    tail = [
        f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
        f"# Avg bus bandwidth    : {average:.6g} ",
        "#",
    ]
    text = lines(*head, *body, *tail, "")
    return ToolReply(stdout=text, rc=1 if errors else 0, delay=ctx.fleet.scenario.timing.nccl)


def _wrong_elements(placement: list[tuple[NodeState, int]]) -> int:
    """Wrong elements per check from `nccl_wrong` faults on GPUs the run uses."""
    total = 0
    for node, count in placement:
        used = {g.index for g in node.visible_gpus()[:count]}
        total += sum(int(f.value or 0) for f in node.faults_of("nccl_wrong") if f.gpu in used)
    return total


def _ranks(placement: list[tuple[NodeState, int]], args: PerfArgs) -> list[Rank]:
    ranks = []
    for node, count in placement:
        gpus = node.visible_gpus()
        for slot in range(count):
            gpu = gpus[slot] if slot < len(gpus) else None
            pid = 20000 + node.spec.index * 37 + (slot if len(placement) > 1 else 0)
            ranks.append(Rank(node.name, slot, gpu.bus if gpu else 0, pid, node.spec.gpu_model))
    return ranks


def _header(name: str, args: PerfArgs, ranks: list[Rank]) -> list[str]:
    gpus = (
        args.gpus if len({r.host for r in ranks}) == 1 and len({r.pid for r in ranks}) == 1 else 1
    )
    out = [
        f"# nThread 1 nGpus {gpus} minBytes {args.min_bytes} maxBytes {args.max_bytes} step: "
        f"{args.factor}(factor) warmup iters: {args.warmup} iters: {args.iters} agg iters: 1 "
        "validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for number, rank in enumerate(ranks):
        out.append(
            f"#  Rank {number:2d} Group  0 Pid {rank.pid:6d} on {rank.host:>10} device "
            f"{rank.device:2d} [0x{rank.bus:02x}] {rank.model}"
        )
    return [*out, "#", *_COLUMNS]


_COLUMNS = (
    "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place" + " " * 10,
    "#       size         count      type   redop    root"
    "     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)"
    + " " * 31
    + "(us)  (GB/s)  (GB/s)"
    + " " * 12
    + "(us)  (GB/s)  (GB/s)"
    + " " * 7,
)


def _failure(
    ctx: ToolContext, placement: list[tuple[NodeState, int]], args: PerfArgs
) -> str | None:
    for node, count in placement:
        pid = 20000 + node.spec.index * 37
        if not node.driver_loaded():
            return _cuda_failure(
                node.name, pid, "CUDA driver version is insufficient for CUDA runtime version"
            )
        if count > len(node.visible_gpus()) or args.gpus > len(node.visible_gpus()):
            return _cuda_failure(node.name, pid, "invalid device ordinal")
        if any(node.gpu_lost(g.index) for g in node.visible_gpus()[:count]):
            return _cuda_failure(node.name, pid, "unspecified launch failure")
        blockers = [fabric.cuda_blocker(node, g) for g in node.visible_gpus()[:count]]
        blocker = next((b for b in blockers if b is not None), None)
        if blocker is not None:
            return _cuda_failure(node.name, pid, blocker)
    return None


def _cuda_failure(host: str, pid: int, message: str) -> str:
    return lines(
        f"{host}: Test CUDA failure common.cu:891 '{message}'",
        f" .. {host} pid {pid}: Test failure common.cu:1131",
    )


def node_factor(node: NodeState) -> float:
    """How much of peak bandwidth this node can deliver."""
    factor = 1.0
    for fault in node.faults_of("slow_nccl"):
        factor *= fault.value or 1.0
    links = node.board.nvlinks
    if links:
        worst_links = max((len(node.links_down(g.index)) for g in node.gpus), default=0)
        factor *= (links - worst_links) / links
    return factor


def _peak(fleet: FleetState, placement: list[tuple[NodeState, int]]) -> float:
    nodes = [node for node, _ in placement]
    if len(nodes) == 1:
        return nodes[0].board.peak_busbw * node_factor(nodes[0])
    factor = min(node_factor(node) for node in nodes)
    for node in nodes:
        nics = node.board.nics
        factor = min(factor, (nics - len(node.ib_ports_down())) / nics)
        factor = min(factor, fleet.degraded_factor(node) or 1.0)
    return PEAK_INTER_NODE * factor


def _rows(
    name: str, args: PerfArgs, ranks: int, peak_busbw: float, *, single: bool, wrong: int = 0
) -> list[tuple[str, float, int]]:
    """(row, busbw, checks with wrong elements) per size; `wrong` caps at the element count."""
    redop, bus_factor = OPS[name]
    ratio = bus_factor * (ranks - 1) / ranks if bus_factor and ranks > 1 else 1.0
    peak_alg = peak_busbw / ratio if ratio else peak_busbw
    rows = []
    size = args.min_bytes
    while size <= args.max_bytes:
        micros = LATENCY_US[single] + size / (peak_alg * 1e3) if ranks > 1 else 2.0
        algbw = size / micros / 1e3
        busbw = algbw * ratio if ranks > 1 else 0.0
        bad = min(wrong, size // 4)
        rows.append((_row(size, redop, micros, algbw, busbw, wrong=bad), busbw, 2 if bad else 0))
        size *= args.factor
    return rows


def _time(micros: float) -> str:
    if micros >= 10000:
        return f"{micros:7.0f}"
    if micros >= 100:
        return f"{micros:7.1f}"
    return f"{micros:7.2f}"


def _row(size: int, redop: str, micros: float, algbw: float, busbw: float, *, wrong: int) -> str:
    count = size // 4
    half = f"  {_time(micros)}  {algbw:6.2f}  {busbw:6.2f}  {wrong:5g}"
    in_place = f"  {_time(micros * 0.997)}  {algbw / 0.997:6.2f}  {busbw / 0.997:6.2f}  {wrong:5g}"
    return f"{size:12d}  {count:12d}  {'float':>8}  {redop:>6}  {-1:6d}{half}{in_place}"


def mpirun(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    """`mpirun -np N -H a:8,b:8 [...] all_reduce_perf ARGS`: one rank per slot, one GPU each."""
    parsed = _parse_mpirun(list(argv))
    if isinstance(parsed, str):
        return fail(parsed)
    hosts, program, rest = parsed
    if program not in OPS:
        return fail(f"mpirun: the lab only emulates nccl-tests binaries, not '{program}'")
    args = parse_perf_args(rest)
    if isinstance(args, str):
        return fail(f"{program}: {args}")
    placement: list[tuple[NodeState, int]] = []
    for host, slots in hosts:
        node = ctx.fleet.node(host)
        if node is None or node.status != "up":
            return fail(_ORTE_DOWN.format(host=host))
        placement.append((node, slots))
    return run_perf(ctx, program, args, placement)


_ORTE_DOWN = (
    "--------------------------------------------------------------------------\n"
    "ORTE was unable to reliably start one or more daemons.\n"
    "This usually is caused by:\n\n"
    "* not finding the required libraries and/or binaries on\n"
    "  one or more nodes. Please check your PATH and LD_LIBRARY_PATH\n"
    "  settings, or configure OMPI with --enable-orterun-prefix-by-default\n\n"
    "* the remote daemon on {host} could not be reached (ssh: connect to host {host}).\n"
    "--------------------------------------------------------------------------"
)
_MPI_VALUED = frozenset(
    {
        "-x",
        "--mca",
        "-mca",
        "--bind-to",
        "--map-by",
        "-N",
        "--npernode",
        "--hostfile",
        "-hostfile",
        "--rankfile",
        "-wdir",
        "--wdir",
    }
)


def _parse_mpirun(args: list[str]) -> tuple[list[tuple[str, int]], str, list[str]] | str:
    hosts: list[tuple[str, int]] = []
    while args and args[0].startswith("-"):
        arg = args.pop(0)
        if arg in ("-H", "--host", "-host"):
            hosts = [_host_slots(item) for item in (args.pop(0) if args else "").split(",") if item]
        elif arg in ("-np", "-n", "--np", "-c"):
            args.pop(0) if args else None
        elif arg in ("--mca", "-mca"):
            del args[:2]
        elif arg in _MPI_VALUED:
            args.pop(0) if args else None
    if not args:
        return "mpirun: no executable was specified"
    if not hosts:
        return "mpirun: the lab needs the hosts on the command line (-H host1:8,host2:8)"
    return hosts, args[0].rsplit("/", 1)[-1], args[1:]


def _host_slots(item: str) -> tuple[str, int]:
    host, _, slots = item.partition(":")
    return host, int(slots) if slots.isdigit() else 1
