"""Emulated `ibstat`, `ibstatus` and `perfquery`: the board's ConnectX-7 NDR InfiniBand HCAs
(8 on HGX).

Layout and tabs follow shared/samples/ibstat/gpud-ibstat-h100-cx7-ndr-some-down.txt; a port
injected as down reads `State: Down`, `Physical state: Polling` (no link partner).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleetfix.lab import ib_counters
from fleetfix.lab.scenario import IB_PORTS_PER_NODE
from fleetfix.lab.state import NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines

FIRMWARE = "28.39.1002"
SM_LID = 1


@dataclass(frozen=True, slots=True)
class Port:
    ca: str
    node_guid: str
    lid: int
    up: bool


def ports(node: NodeState) -> list[Port]:
    down = node.ib_ports_down()
    base = 0x946DAE0300000000 + node.spec.index * 0x100
    return [
        Port(
            ca=f"mlx5_{i}",
            node_guid=f"0x{base + i:016x}",
            lid=node.spec.index * IB_PORTS_PER_NODE + i + 2,
            up=i not in down,
        )
        for i in range(node.board.nics)
    ]


def _port_block(port: Port) -> list[str]:
    return [
        f"State: {'Active' if port.up else 'Down'}",
        f"Physical state: {'LinkUp' if port.up else 'Polling'}",
        f"Rate: {400 if port.up else 10}",
        f"Base lid: {port.lid if port.up else 65535}",
        "LMC: 0",
        f"SM lid: {SM_LID if port.up else 0}",
        "Capability mask: 0xa751e848",
        f"Port GUID: {port.node_guid}",
        "Link layer: InfiniBand",
    ]


def _ca_block(port: Port) -> list[str]:
    head = [
        f"CA '{port.ca}'",
        "\tCA type: MT4129",
        "\tNumber of ports: 1",
        f"\tFirmware version: {FIRMWARE}",
        "\tHardware version: 0",
        f"\tNode GUID: {port.node_guid}",
        f"\tSystem image GUID: {port.node_guid}",
        "\tPort 1:",
    ]
    return head + ["\t\t" + row for row in _port_block(port)]


def ibstat(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    node_ports = ports(ctx.node)
    names = [p.ca for p in node_ports]
    args = [a for a in argv if not a.startswith("-")]
    if "-l" in argv or "--list_of_cas" in argv:
        return ToolReply(stdout=lines(*names))
    if args and args[0] not in names:
        pid = 40000 + ctx.node.spec.index
        message = (
            f"ibpanic: [{pid}] main: stat of IB device '{args[0]}' failed: "
            "No such file or directory"
        )
        return ToolReply(stderr=lines(message), rc=255)
    chosen = [p for p in node_ports if not args or p.ca == args[0]]
    if len(args) > 1:
        if args[1] != "1":
            return ToolReply(
                stderr=lines(f"ibpanic: [0] main: {args[0]}: port {args[1]} not found"), rc=255
            )
        return ToolReply(stdout=lines(*_port_block(chosen[0])))
    return ToolReply(stdout=lines(*[row for p in chosen for row in _ca_block(p)]))


def ibstatus(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    blocks = []
    for port in ports(ctx.node):
        if argv and port.ca not in argv:
            continue
        guid = port.node_guid[2:]
        gid = "fe80:0000:0000:0000:" + ":".join(guid[i : i + 4] for i in range(0, 16, 4))
        state = "4: ACTIVE" if port.up else "1: DOWN"
        phys = "5: LinkUp" if port.up else "2: Polling"
        rate = "400 Gb/sec (4X NDR)" if port.up else "10 Gb/sec (4X SDR)"
        blocks.append(
            lines(
                f"Infiniband device '{port.ca}' port 1 status:",
                f"\tdefault gid:\t {gid}",
                f"\tbase lid:\t 0x{port.lid if port.up else 0xFFFF:x}",
                f"\tsm lid:\t\t 0x{SM_LID if port.up else 0:x}",
                f"\tstate:\t\t {state}",
                f"\tphys state:\t {phys}",
                f"\trate:\t\t {rate}",
                "\tlink_layer:\t InfiniBand",
                "",
            )
        )
    return ToolReply(stdout="".join(blocks))


# --- perfquery ------------------------------------------------------------------------------

_EXTENDED = (
    ("PortXmitData", "port_xmit_data"),
    ("PortRcvData", "port_rcv_data"),
    ("PortXmitPkts", "port_xmit_packets"),
    ("PortRcvPkts", "port_rcv_packets"),
    ("PortUnicastXmitPkts", "unicast_xmit_packets"),
    ("PortUnicastRcvPkts", "unicast_rcv_packets"),
    ("PortMulticastXmitPkts", "multicast_xmit_packets"),
    ("PortMulticastRcvPkts", "multicast_rcv_packets"),
)
_ERRORS = (
    ("SymbolErrorCounter", "symbol_error"),
    ("LinkErrorRecoveryCounter", "link_error_recovery"),
    ("LinkDownedCounter", "link_downed"),
    ("PortRcvErrors", "port_rcv_errors"),
    ("PortRcvRemotePhysicalErrors", "port_rcv_remote_physical_errors"),
    ("PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors"),
    ("PortXmitDiscards", "port_xmit_discards"),
    ("PortXmitConstraintErrors", "port_xmit_constraint_errors"),
    ("PortRcvConstraintErrors", "port_rcv_constraint_errors"),
)
_LINK_ERRORS = (
    ("LocalLinkIntegrityErrors", "local_link_integrity_errors"),
    ("ExcessiveBufferOverrunErrors", "excessive_buffer_overrun_errors"),
    ("VL15Dropped", "VL15_dropped"),
)
_PLAIN_TRAFFIC = (
    ("PortXmitData", "port_xmit_data"),
    ("PortRcvData", "port_rcv_data"),
    ("PortXmitPkts", "port_xmit_packets"),
    ("PortRcvPkts", "port_rcv_packets"),
)
_MAX32 = 0xFFFFFFFF


def _dotted(name: str, value: object) -> str:
    """perfquery's `Name:....value`, the value in column 34."""
    return f"{name}:".ljust(33, ".") + str(value)


def _extended_block(lid: int, values: dict[str, int]) -> list[str]:
    """`perfquery -x`, laid out as tests/fixtures/ib-counters/perfquery-x-*.txt."""
    rows = [
        f"# Port extended counters: Lid {lid} port 1 (CapMask: 0x5A00 CapMask2: 0x0000002)",
        _dotted("PortSelect", 1),
        _dotted("CounterSelect", "0x0000"),
    ]
    rows += [_dotted(name, values[key]) for name, key in _EXTENDED]
    rows.append(_dotted("CounterSelect2", "0x00000000"))
    rows += [_dotted(name, values[key]) for name, key in _ERRORS + _LINK_ERRORS]
    rows += [_dotted("PortXmitWait", values["port_xmit_wait"]), _dotted("QP1Dropped", 0)]
    return rows


def _plain_block(lid: int, values: dict[str, int]) -> list[str]:
    """Plain `perfquery` (PortCounters: 32-bit traffic counters that stop at their maximum)."""
    rows = [
        f"# Port counters: Lid {lid} port 1 (CapMask: 0x5A00)",
        _dotted("PortSelect", 1),
        _dotted("CounterSelect", "0x0000"),
    ]
    rows += [_dotted(name, values[key]) for name, key in _ERRORS]
    rows.append(_dotted("CounterSelect2", "0x00"))
    rows += [_dotted(name, values[key]) for name, key in _LINK_ERRORS]
    rows += [_dotted(name, min(values[key], _MAX32)) for name, key in _PLAIN_TRAFFIC]
    rows.append(_dotted("PortXmitWait", values["port_xmit_wait"]))
    return rows


def perfquery(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    """`perfquery [-x] [-C CA] [-P PORT]`: the local port's counters (one read of the node's
    counters, lab/ib_counters.py). A LID or GUID argument (another node's port) is refused."""
    args = list(argv)
    extended = "-x" in args or "--extended" in args
    ca = _option(args, ("-C", "--Ca")) or "mlx5_0"
    port = _option(args, ("-P", "--Port")) or "1"
    rest = [a for a in args if not a.startswith("-") and a not in (ca, port)]
    known = {p.ca: p for p in ports(ctx.node)}
    if rest:
        return fail("perfquery: the lab answers for the local port only (no LID or GUID)", rc=1)
    if ca not in known or port != "1":
        return fail(
            f"ibwarn: [{40000 + ctx.node.spec.index}] mad_rpc_open_port: "
            f"can't open UMAD port ({ca}:{port})\n"
            f"perfquery: iberror: failed: Failed to open '{ca}' port '{port}'",
            rc=255,
        )
    values = next(r.counters for r in ib_counters.read(ctx.node) if r.ca == ca)
    lid = known[ca].lid
    rows = _extended_block(lid, values) if extended else _plain_block(lid, values)
    return ToolReply(stdout=lines(*rows))


def _option(args: list[str], names: tuple[str, ...]) -> str | None:
    for index, arg in enumerate(args):
        if arg in names and index + 1 < len(args):
            return args[index + 1]
    return None
