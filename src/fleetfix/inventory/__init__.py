"""Ansible-compatible inventories: load INI/YAML sources, query hosts and groups, render them.

Typical use::

    inv = load_inventory(["cluster.ini"])
    inv.select("rack1:&gpu_a100:!gpu007")   # host pattern -> host names
    inv.limit(inv.select("all"), "@retry")  # --limit
    inv.host_vars("gpu001")                 # merged like `ansible-inventory --host`
    render_list(inv)                        # `ansible-inventory --list` document
"""

from fleetfix.inventory.model import Group, Host, Inventory, UnsafeText, VarsDirectory
from fleetfix.inventory.ranges import expand_host_range
from fleetfix.inventory.render import render_graph, render_host, render_list, to_json_data
from fleetfix.inventory.sources import load_inventory

__all__ = [
    "Group",
    "Host",
    "Inventory",
    "UnsafeText",
    "VarsDirectory",
    "expand_host_range",
    "load_inventory",
    "render_graph",
    "render_host",
    "render_list",
    "to_json_data",
]
