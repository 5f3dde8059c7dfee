"""The public API and the Inventory queries the engine and CLI rely on."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

import fleetfix.inventory as inventory_package
from fleetfix.inventory import Group, Host, Inventory, load_inventory

from .support import load_text, write


def test_public_api_is_pinned() -> None:
    assert inventory_package.__all__ == [
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
    assert list(inspect.signature(Inventory.select).parameters) == ["self", "pattern"]
    assert list(inspect.signature(Inventory.limit).parameters) == ["self", "hosts", "limit"]
    assert list(inspect.signature(inventory_package.render_graph).parameters) == [
        "inventory",
        "group",
        "with_vars",
    ]


def test_values_are_frozen() -> None:
    host = Host("gpu01")
    with pytest.raises(dataclasses.FrozenInstanceError):
        host.name = "gpu02"  # type: ignore[misc]
    assert not hasattr(Group("g"), "__dict__")


def test_queries(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path,
        "[pod:children]\nrack2\nrack1\n[rack1]\ngpu01\ngpu02\n[rack2]\ngpu03\ngpu01\n[solo]\nlogin01\n",
    )
    # Ansible's walk: groups under `all` (solo) before their grandchildren; pending children
    # join their parent when declared, so rack1 comes before rack2.
    assert inventory.host_names() == ["login01", "gpu01", "gpu02", "gpu03"]
    assert inventory.group_names() == ["all", "ungrouped", "pod", "rack1", "rack2", "solo"]
    assert inventory.group("pod").children == ("rack1", "rack2")
    assert inventory.hosts_in("pod") == ["gpu01", "gpu02", "gpu03"]
    assert inventory.groups_of("gpu01") == ["pod", "rack1", "rack2"]
    assert inventory.host("gpu01").groups == ("all", "pod", "rack1", "rack2")
    assert inventory.group("rack1").parents == ("pod",)
    assert repr(inventory) == "<Inventory 4 hosts, 6 groups>"
    with pytest.raises(KeyError):
        inventory.hosts_in("nope")
    with pytest.raises(KeyError):
        inventory.host_vars("nope")


def test_returned_lists_are_copies(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, "[r]\ngpu01\n")
    inventory.hosts_in("r").append("intruder")
    inventory.host_names().clear()
    assert inventory.hosts_in("r") == ["gpu01"]


def test_ten_thousand_host_inventory(tmp_path: Path) -> None:
    # Sizing check, not a timing test: the README's 10,000-host inventory loads and answers.
    lines = ["[fleet]", "gpu[00001:10000]"]
    for rack in range(1, 251):
        first = (rack - 1) * 40 + 1
        lines += [f"[rack{rack:03d}]", f"gpu[{first:05d}:{first + 39:05d}]"]
        lines += [f"[rack{rack:03d}:vars]", f"rack=rack{rack:03d}"]
    lines += ["[racks:children]", *(f"rack{rack:03d}" for rack in range(1, 251))]
    inventory = load_inventory([write(tmp_path, "big.ini", "\n".join(lines) + "\n")])
    assert len(inventory.host_names()) == 10_000
    assert inventory.host_vars("gpu09999") == {"rack": "rack250"}
    assert inventory.select("rack001:rack250:&gpu[00001:00045]") == [
        f"gpu{number:05d}" for number in range(1, 41)
    ]
    assert len(inventory.limit(inventory.select("racks"), "!rack1*")) == 10_000 - 40 * 100
