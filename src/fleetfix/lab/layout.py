"""Where every lab node sits: its name, loopback address, rack, leaf switch and spine.

Addresses are deterministic from the scenario so inventories can be generated and committed:
rack r (0-based), node k in that rack -> 127.(10 + r // 250).(r % 250 + 1).(k + 1). Each
node's BMC has an address of its own in a range no node uses: the node's with 100 added to the
second octet (127.10.1.3 -> 127.110.1.3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetfix.lab.scenario import (
    FleetShape,
    NodeFaults,
    NodeHardware,
    leaf_name,
    node_hardware,
    node_names,
    rack_name,
    spine_name,
)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node's identity and place in the topology."""

    name: str
    index: int
    address: str
    rack: str
    leaf: str
    spine: str
    gpus: int
    gpu_model: str
    board: str = "classic"
    driver: str = "550.90.07"
    environment: str = "bare-metal"
    without: tuple[str, ...] = ()


BMC_OCTET_OFFSET = 100


def bmc_address(node_address: str) -> str:
    """The address of a node's BMC: 127.10.1.3 -> 127.110.1.3."""
    first, second, rest = node_address.split(".", 2)
    return f"{first}.{int(second) + BMC_OCTET_OFFSET}.{rest}"


def fleet_layout(
    shape: FleetShape, hardware: Callable[[str], NodeHardware] | None = None
) -> tuple[NodeSpec, ...]:
    """Every node of the fleet, in name order; `hardware` gives a node's own board/driver."""
    own = hardware or (lambda name: node_hardware(shape, NodeFaults()))
    return tuple(
        _node(shape, index, name, own(name)) for index, name in enumerate(node_names(shape))
    )


def _node(shape: FleetShape, index: int, name: str, hardware: NodeHardware) -> NodeSpec:
    rack, slot = divmod(index, shape.nodes_per_rack)
    leaf = rack * shape.leaves // max(shape.racks, 1)
    leaf = min(leaf, shape.leaves - 1)
    spine = leaf * shape.spines // shape.leaves
    return NodeSpec(
        name=name,
        index=index,
        address=f"127.{10 + rack // 250}.{rack % 250 + 1}.{slot + 1}",
        rack=rack_name(rack),
        leaf=leaf_name(leaf),
        spine=spine_name(spine),
        gpus=hardware.gpus,
        gpu_model=hardware.gpu_model,
        board=hardware.board,
        driver=hardware.driver_version,
        environment=hardware.environment,
        without=hardware.without,
    )
