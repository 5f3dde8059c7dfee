"""Emulated node-level tools: `reboot`/`shutdown -r`, `fuser` on GPU devices, `lspci`,
`nvidia-bug-report.sh`, `kill`, and `hostname` (only used where the sandbox cannot set it).

`fuser` answers for the GPU device files from lab state: CUDA processes (real placeholder
PIDs), plus nvidia-persistenced, nv-hostengine and nv-fabricmanager (or nvidia-imex) while
their units run. It writes as psmisc does: each PID alone to stdout (flushed at once), the rest
of its row, the -v table and the file names to stderr, interleaved in that order, and the
command as the kernel's 15-character comm (`nvidia-persiste`). `lspci` lists the board's GPUs,
NVSwitches and NICs (lab/boards.py).
"""

from __future__ import annotations

import fnmatch
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from fleetfix.lab import transitions
from fleetfix.lab.shims import quote
from fleetfix.lab.state import NodeState
from fleetfix.lab.tools import nvidia_smi
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines
from fleetfix.lab.tools.dmesg import dmesg

_DAEMONS = (
    ("nvidia-persistenced", "nvidia-persistenced", 1913),
    ("nvidia-dcgm", "nv-hostengine", 2207),
    ("nvidia-fabricmanager", "nv-fabricmanager", 2188),
    ("nvidia-imex", "nvidia-imex", 2301),
)
_NIC_BUSES = (0x18, 0x40, 0x4F, 0x5D, 0x9A, 0xC0, 0xCE, 0xDC)
_SIGNALS = MappingProxyType(
    {
        f"-{s.name[3:]}": int(s)
        for s in signal.Signals
        if s.name.startswith("SIG") and "_" not in s.name
    }
)


def reboot(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    return ToolReply(effect="reboot")


def shutdown(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    if "-r" in argv or "--reboot" in argv:
        return ToolReply(
            stdout="Shutdown scheduled, use 'shutdown -c' to cancel.\n", effect="reboot"
        )
    return fail("shutdown: the lab only emulates reboots (shutdown -r now)")


def kill(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    """bash's own `kill`, run in the shim: the server only sees the call (for the audit).

    Node shells run with `enable -n kill` (BASH_ENV), so `kill` reaches this shim; the reply
    re-enables the builtin and runs it with the same arguments, errors and exit status."""
    return ToolReply(script="enable kill; kill " + " ".join(quote(a) for a in argv) + "; exit $?")


def hostname(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    return ToolReply(stdout=ctx.node.name + "\n")


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    command: str
    service: str | None = None

    @property
    def access(self) -> str:
        """fuser's ACCESS column: CUDA processes map the device, daemons hold it open."""
        return "F...." if self.service is not None else "F...m"


def devices(node: NodeState) -> list[str]:
    if not node.driver_loaded():
        return []
    gpus = [f"/dev/nvidia{i}" for i in range(len(node.visible_gpus()))]
    return [
        *gpus,
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]


def daemon_holders(node: NodeState) -> list[Holder]:
    """The NVIDIA daemons running on the node (each holds the GPU device files)."""
    return [
        Holder(pid + node.spec.index % 97, command, unit)
        for unit, command, pid in _DAEMONS
        if node.unit_active(unit)
    ]


def holders(node: NodeState, device: str) -> list[Holder]:
    found: list[Holder] = []
    if device not in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        found.extend(daemon_holders(node))
    index = device.removeprefix("/dev/nvidia")
    for process in node.processes:
        if not index.isdigit() or int(index) == _visible_index(node, process.gpu):
            found.append(Holder(process.pid, process.name))
    return found


def _visible_index(node: NodeState, gpu: int) -> int:
    visible = [g.index for g in node.visible_gpus()]
    return visible.index(gpu) if gpu in visible else -1


def fuser(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    """psmisc fuser (see the module docstring); rc 1 if nothing uses the files."""
    verbose = any(a in ("-v", "--verbose") for a in argv)
    kill = any(a in ("-k", "--kill") for a in argv)
    number = next((_SIGNALS[a] for a in argv if a in _SIGNALS), signal.SIGKILL)
    paths = _expand(ctx.node, [a for a in argv if not a.startswith("-")])
    if not paths:
        return fail("No process specification given")
    missing: list[Write] = []
    table: list[Write] = []
    for path in paths:
        if path.startswith("/dev/nvidia") and path not in devices(ctx.node):
            missing.append((2, f"Specified filename {path} does not exist.\n"))
            continue
        users = holders(ctx.node, path) if path.startswith("/dev/nvidia") else []
        if users:
            table.extend(_verbose(path, users) if verbose else _plain(path, users))
        if kill:
            _kill(ctx, users, number)
    header: list[Write] = [(2, _VERBOSE_HEADER + "\n")] if verbose and table else []
    return ToolReply(script=_written([*missing, *header, *table]), rc=0 if table else 1)


Write = tuple[int, str]
"""Text for file descriptor 1 or 2, in the order the tool writes it."""


def _written(writes: list[Write]) -> str:
    """Shell code writing each piece to its stream in order (both streams into one file, as
    `2>&1` does, keep psmisc's rows whole)."""
    merged: list[Write] = []
    for fd, text in writes:
        if merged and merged[-1][0] == fd:
            merged[-1] = (fd, merged[-1][1] + text)
        elif text:
            merged.append((fd, text))
    return "\n".join(f"printf %s {quote(text)}{' >&2' if fd == 2 else ''}" for fd, text in merged)


def _expand(node: NodeState, patterns: list[str]) -> list[str]:
    """The shell leaves `/dev/nvidia*` unexpanded on the lab host; expand it here."""
    out: list[str] = []
    for pattern in patterns:
        if "*" in pattern or "?" in pattern:
            out.extend([d for d in devices(node) if fnmatch.fnmatch(d, pattern)] or [pattern])
        else:
            out.append(pattern)
    return out


_VERBOSE_HEADER = "                     USER        PID ACCESS COMMAND"


def _verbose(path: str, users: list[Holder]) -> list[Write]:
    """Rows of `fuser -v`; a name too long for its 20-column field gets a line of its own."""
    label = f"{path}:"
    out: list[Write] = [(2, label + "\n")] if len(label) > NAME_FIELD else []
    for number, user in enumerate(users):
        shown = label if number == 0 and len(label) <= NAME_FIELD else ""
        out += [(2, f"{shown:<{NAME_FIELD}} {'root':<8} "), (1, f"{user.pid:6d}")]
        out.append((2, f" {user.access} {user.command[:COMM_LENGTH]}\n"))
    return out


def _plain(path: str, users: list[Holder]) -> list[Write]:
    """`fuser FILE`: the name, the PIDs (each with `m` when mapped), one line."""
    label = f"{path}:"
    out: list[Write] = [(2, label.ljust(NAME_FIELD))]
    for user in users:
        out += [(1, f"{user.pid:6d}"), (2, "m" if user.access.endswith("m") else "")]
    return [*out, (2, "\n")]


NAME_FIELD = 20
"""psmisc's column for the file name."""
COMM_LENGTH = 15
"""The kernel's command name (comm) is cut to 15 characters; fuser prints that."""


def _kill(ctx: ToolContext, users: list[Holder], number: int) -> None:
    for user in users:
        if user.service is not None:
            transitions.set_service(ctx.node, user.service, False)
        else:
            ctx.hooks.kill_process(ctx.node, user.pid, number)


def lspci(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    numeric = "-nn" in argv
    domain = "-D" in argv
    vendor = _option(argv, "-d")
    rows = []
    for bus, kind, name, ids, lost in _pci_devices(ctx.node):
        if vendor and not ids.startswith(vendor.rstrip(":").lower()):
            continue
        slot = f"{'0000:' if domain else ''}{bus:02x}:00.0"
        label = f"{kind} [{_CLASS_CODES[kind]}]" if numeric else kind
        idtext = f" [{ids}]" if numeric else ""
        rev = " (rev ff)" if lost else (" (rev a1)" if ids.startswith("10de") else "")
        rows.append(f"{slot} {label}: {name}{idtext}{rev}")
    return ToolReply(stdout=lines(*rows))


_CLASS_CODES = MappingProxyType(
    {"3D controller": "0302", "Bridge": "0680", "Infiniband controller": "0207"}
)


def _pci_devices(node: NodeState) -> list[tuple[int, str, str, str, bool]]:
    board = node.board
    switch = board.switch_device
    found = [
        (bus, "Bridge", f"NVIDIA Corporation Device {switch[5:]}", switch, False)
        for bus in board.switch_buses
    ]
    for gpu in node.gpus:
        if not node.gpu_on_bus(gpu.index):
            continue
        name = board.gpu_pci_name
        found.append((gpu.bus, "3D controller", name, board.gpu_device, node.gpu_lost(gpu.index)))
    for bus in _NIC_BUSES:
        found.append(
            (
                bus,
                "Infiniband controller",
                "Mellanox Technologies MT2910 Family [ConnectX-7]",
                "15b3:1021",
                False,
            )
        )
    return sorted(found)


def _option(argv: Sequence[str], name: str) -> str | None:
    items = list(argv)
    for index, arg in enumerate(items):
        if arg == name and index + 1 < len(items):
            return items[index + 1]
        if arg.startswith(name) and len(arg) > len(name):
            return arg[len(name) :]
    return None


def nvidia_bug_report(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    """Writes nvidia-bug-report.log.gz in the working directory, as the real script does."""
    smi = nvidia_smi.nvidia_smi(ctx, ["-q"])
    kernel = dmesg(ctx, ["-T"])
    rule = "_" * 70
    report = f"{rule}\n\nnvidia-smi -q\n\n{smi.stdout}{smi.stderr}\n"
    report += f"{rule}\n\ndmesg -T\n\n{kernel.stdout}"
    script = f"printf %s {quote(report)} | gzip -c > nvidia-bug-report.log.gz"
    banner = lines(
        "",
        "nvidia-bug-report.sh will now collect information about your",
        "system and create the file 'nvidia-bug-report.log.gz' in the current",
        "directory.  It may take several seconds to run.",
        "",
        "Running nvidia-bug-report.sh... complete.",
    )
    if smi.hang:
        return ToolReply(hang=True)
    return ToolReply(stdout=banner, script=script, delay=ctx.fleet.scenario.timing.nccl)
