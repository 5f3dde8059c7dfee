"""`nvidia-smi topo -m` and `nvidia-smi nvlink -s / -e`: how a node's GPUs and NICs connect.

The forms follow real captures (tests/fixtures/samples/topo/, nvlink/, real-nodes/):

* `topo -m` is tab-separated: a header row (a tab, then every GPU and NIC name and the
  affinity columns), one row per GPU and per NIC, a blank line, the legend, and with NICs a
  blank line, `NIC Legend:`, a blank line, one `  NICn: mlx5_n` line each and a closing blank
  line. GPU rows end `CPU-list\\tNUMA\\t\\tN/A` (an empty cell before the GPU NUMA ID), NIC
  rows in four empty cells. From driver 580 the header row is wrapped in the ANSI underline
  escapes even into a pipe (`\\t\\x1b[4mGPU0\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID\\x1b[0m`:
  the real 580.159.04 H200 capture, and the 590.48.01, 595 and 610 captures of
  utkuozdemir/nvidia_gpu_exporter internal/captures); no earlier capture written to a pipe is
  known (copies from a terminal never show the escapes), so older drivers print it plain.
  The GPU NUMA ID column is missing before 535 (a 525.105.17 capture).
* Boards: NV# between NVLink peers (18 links: NV18), NODE/SYS between PCIe-only GPUs, each GPU
  PIX to its own NIC. A GB200 compute tray (two Grace CPUs, four GPUs, six NICs) shows every
  GPU and NIC at NODE distance and CPU affinity per Grace (a real GB200 NVL72 tray's topo -m,
  tests/fixtures/samples/topo/aiconfigurator-gb200-nvl72-tray-4gpu-6nic-ansi.txt).
* `nvlink -s` / `-e` print nothing at all (exit 0) for a GPU without NVLink (the real H200
  passed through to a VM; a single PCIe card).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fleetfix.lab.state import GpuState, NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply, lines

Enumerated = list[tuple[int, GpuState]]
Selector = Callable[[ToolContext, str | None], Enumerated | None]

INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
UNDERLINE = "\x1b[4m"
RESET = "\x1b[0m"
VM_CPUS = "0-15"
"""The real VM's 16 vCPUs, one NUMA node."""

_TOPO_LEGEND = (
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
    "(e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
    "within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges "
    "(without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)


def topo(ctx: ToolContext, argv: Sequence[str], gpus: Enumerated, select: Selector) -> ToolReply:
    if list(argv) not in (["-m"], ["--matrix"]):
        return ToolReply(stdout=INVALID, rc=2)
    return ToolReply(stdout=topo_matrix(ctx, [gpu for _, gpu in gpus]))


def topo_matrix(ctx: ToolContext, gpus: list[GpuState]) -> str:
    """`nvidia-smi topo -m` for the node's board and driver."""
    node = ctx.node
    nics = node.board.nics
    numa_id = ctx.forms.topo_gpu_numa
    names = [f"GPU{i}" for i in range(len(gpus))] + [f"NIC{i}" for i in range(nics)]
    columns = [*names, "CPU Affinity", "NUMA Affinity", *(["GPU NUMA ID"] if numa_id else [])]
    header = "\t".join(columns)
    out = ["\t" + (f"{UNDERLINE}{header}{RESET}" if ctx.forms.q580 else header)]
    for row, gpu in enumerate(gpus):
        cells = [
            _gpu_link(node, gpu, other) if col != row else " X " for col, other in enumerate(gpus)
        ]
        cells += [_gpu_nic(node, gpu.index, nic) for nic in range(nics)]
        cpus, numa = _affinity(node, gpu)
        cells += [cpus, numa, "", "N/A"] if numa_id else [cpus, numa]
        out.append(f"GPU{row}\t" + "\t".join(cells))
    for nic in range(nics):
        cells = [_gpu_nic(node, gpu.index, nic) for gpu in gpus]
        cells += [" X " if other == nic else _nic_nic(node, nic, other) for other in range(nics)]
        out.append(f"NIC{nic}\t" + "\t".join([*cells, *([""] * (4 if numa_id else 2))]))
    out += ["", *_TOPO_LEGEND]
    if nics:
        out += ["", "NIC Legend:", "", *[f"  NIC{i}: mlx5_{i}" for i in range(nics)], ""]
    return "\n".join(out) + "\n"


def _affinity(node: NodeState, gpu: GpuState) -> tuple[str, str]:
    if node.env.passthrough:
        return VM_CPUS, "0"
    if node.board.grace:  # two GPUs per Grace CPU of 72 cores
        socket = gpu.index // 2
        return f"{72 * socket}-{72 * socket + 71}", str(socket)
    socket = 0 if gpu.index < 4 else 1
    cores = node.board.cpus_per_numa
    first, smt = cores * socket, cores * (socket + 2)
    return f"{first}-{first + cores - 1},{smt}-{smt + cores - 1}", str(socket)


def _gpu_link(node: NodeState, a: GpuState, b: GpuState) -> str:
    links = node.board.nvlinks
    active = links - max(len(node.links_down(a.index)), len(node.links_down(b.index)))
    if active > 0:
        return f"NV{active}"
    return _nic_nic(node, a.index, b.index) if not links else "SYS"


def _gpu_nic(node: NodeState, gpu: int, nic: int) -> str:
    if node.board.grace:
        return "NODE"
    if gpu == nic:
        return "PIX"
    return "NODE" if gpu // 4 == nic // 4 else "SYS"


def _nic_nic(node: NodeState, a: int, b: int) -> str:
    return "NODE" if node.board.grace or a // 4 == b // 4 else "SYS"


def nvlink(ctx: ToolContext, argv: Sequence[str], gpus: Enumerated, select: Selector) -> ToolReply:
    items = list(argv)
    ident = None
    if "-i" in items:
        at = items.index("-i")
        ident = items[at + 1] if at + 1 < len(items) else None
        del items[at : at + 2]
    mode = items[0] if len(items) == 1 else ""
    if mode not in ("-s", "--status", "-e", "--errorcounters"):
        return ToolReply(stdout=INVALID, rc=2)
    selected = select(ctx, ident)
    if selected is None:
        return ToolReply(stdout="No devices were found\n", rc=6)
    board = ctx.node.board
    if not board.nvlinks:  # a GPU without NVLink prints nothing (the real VM capture)
        return ToolReply()
    errors = mode in ("-e", "--errorcounters")
    out: list[str] = []
    for index, gpu in selected:
        out.append(f"GPU {index}: {ctx.node.spec.gpu_model} (UUID: {gpu.uuid})")
        down = ctx.node.links_down(gpu.index)
        if errors:
            out.extend(_link_errors(down, board.nvlinks))
        else:
            out.extend(_link_status(down, board.nvlinks, board.nvlink_speed))
    return ToolReply(stdout=lines(*out))


def _link_status(down: set[int], links: int, speed: str) -> list[str]:
    return [f"\t Link {link}: {'<inactive>' if link in down else speed}" for link in range(links)]


def _link_errors(down: set[int], links: int) -> list[str]:
    out: list[str] = []
    for link in range(links):
        bad = link in down
        out += [
            f"\t Link {link}: Replay Errors: {3 if bad else 0}",
            f"\t Link {link}: Recovery Errors: {17 if bad else 0}",
            f"\t Link {link}: CRC Errors: {2351 if bad else 0}",
            "",
        ]
    return out
