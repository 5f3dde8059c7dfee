"""A lab node's InfiniBand port counters: their values, and the sysfs tree that serves them.

Each HCA port (`mlx5_N` port 1, as ibstat shows them) has the 21 files a real ConnectX port has
under /sys/class/infiniband/mlx5_N/ports/1/counters (the names of the gpud #943 capture,
tests/fixtures/ib-counters). Error counters are 0 on a healthy port; traffic counters grow a
little at every read. A scenario's `ib_symbol_errors: {port, per_read}` makes that port's
`symbol_error` rise by `per_read` at every read of the node's counters, and stop at 65535 as
the real 16-bit counter does.

A read is one command that names /sys/class/infiniband (the server rewrites the node's tree
before the command runs, see `refresh`) or one `perfquery` call. The node keeps its read count
for the boot in its own directory (`ib_counter_reads`), so counters start again from 0 after a
reboot, as an HCA's do. The node's tree is its own directory, mounted over the machine's
/sys/class/infiniband in namespace mode (or the path rewritten in the command text where the
machine has none, and in fallback mode); a node without InfiniBand gets an empty tree, so a
machine's real HCAs never show through.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fleetfix.lab.state import NodePaths, NodeState

SYSFS = "/sys/class/infiniband"
SYMBOL_ERROR_MAX = 0xFFFF

COUNTER_FILES: tuple[str, ...] = (
    "unicast_rcv_packets",
    "port_xmit_data",
    "port_xmit_constraint_errors",
    "VL15_dropped",
    "port_rcv_errors",
    "port_xmit_wait",
    "link_error_recovery",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_packets",
    "unicast_xmit_packets",
    "excessive_buffer_overrun_errors",
    "port_rcv_data",
    "port_rcv_constraint_errors",
    "link_downed",
    "local_link_integrity_errors",
    "port_xmit_discards",
    "port_rcv_switch_relay_errors",
    "port_xmit_packets",
    "symbol_error",
)
"""A ConnectX port's counters directory, in the order `find` listed the real one."""

_PACKETS_PER_READ = 1_000_000
_WORDS_PER_PACKET = 1024  # data counters count 4-octet words: 4 KiB packets


@dataclass(frozen=True, slots=True)
class PortRead:
    """One port's counters at one read."""

    ca: str
    port: int
    counters: dict[str, int]


def directory(paths: NodePaths) -> Path:
    """The node's own /sys/class/infiniband."""
    return paths.root / "sys_class_infiniband"


def mentions(command: str) -> bool:
    """Whether a command may read the counters (it names the sysfs directory)."""
    return SYSFS in command


def read(node: NodeState) -> list[PortRead]:
    """Count one read of the node's counters and return every port's values after it."""
    reads = _count_read(node)
    planted = {fault.port: fault.per_read for fault in node.injected.ib_symbol_errors}
    ports = []
    for index in range(node.board.nics):
        values = dict.fromkeys(COUNTER_FILES, 0)
        packets = reads * _PACKETS_PER_READ + node.spec.index * 1000 + index
        for name in ("unicast_rcv_packets", "unicast_xmit_packets"):
            values[name] = packets
        for name in ("port_rcv_packets", "port_xmit_packets"):
            values[name] = packets
        values["port_rcv_data"] = values["port_xmit_data"] = packets * _WORDS_PER_PACKET
        if index in planted:
            values["symbol_error"] = min(planted[index] * reads, SYMBOL_ERROR_MAX)
        ports.append(PortRead(f"mlx5_{index}", 1, values))
    return ports


def refresh(node: NodeState) -> None:
    """Write the node's sysfs tree for the command about to run (one read): every port's
    counters when the node has InfiniBand, an empty directory when it has none."""
    root = directory(node.paths)
    root.mkdir(exist_ok=True)
    if not node.env.has_ib:
        return
    for port in read(node):
        counters = root / port.ca / "ports" / str(port.port) / "counters"
        counters.mkdir(parents=True, exist_ok=True)
        for name, value in port.counters.items():
            (counters / name).write_text(f"{value}\n", encoding="ascii")


def _count_read(node: NodeState) -> int:
    """This boot's reads so far, this one included (kept in the node's directory)."""
    state = node.paths.root / "ib_counter_reads"
    reads = 0
    try:
        saved = json.loads(state.read_text(encoding="ascii"))
        if saved.get("boot") == node.boot_number:
            reads = int(saved.get("reads", 0))
    except (OSError, ValueError):
        reads = 0
    reads += 1
    state.write_text(json.dumps({"boot": node.boot_number, "reads": reads}), encoding="ascii")
    return reads
