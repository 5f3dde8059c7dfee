"""Topology: domains from host vars, the fabric graph, the tree and blast radius."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import InventoryError
from fleetfix.topology.file import parse_ibnetdiscover
from fleetfix.topology.graph import NO_LEAF, NO_SPINE, Topology, natural_sorted

DATA = Path(__file__).parent / "data"


def two_tier(**extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """4 hosts per leaf, leaf-01/02 under spine-01, leaf-03 under spine-02, plus strays."""
    hosts: dict[str, dict[str, Any]] = {}
    for index in range(1, 13):
        leaf = (index - 1) // 4 + 1
        hosts[f"gpu{index:03d}"] = {
            "leaf": f"leaf-{leaf:02d}",
            "spine": "spine-01" if leaf < 3 else "spine-02",
            "rack": f"r{(index - 1) // 2 + 1}",
            "gpu_model": "H100",
            "ansible_host": f"127.0.0.{index}",
        }
    hosts.update(extra)
    return hosts


def test_domains_members_and_kinds() -> None:
    topo = Topology.from_hosts(two_tier(head01={"rack": "r1"}))
    assert topo.domains_of("gpu005") == {"rack": "r3", "leaf": "leaf-02", "spine": "spine-01"}
    assert topo.domains_of("head01") == {"rack": "r1"}
    assert topo.members("leaf", "leaf-02") == ["gpu005", "gpu006", "gpu007", "gpu008"]
    assert topo.members("rack", "r1") == ["gpu001", "gpu002", "head01"]
    assert topo.members("leaf", "leaf-99") == []
    assert topo.kinds() == ["rack", "leaf", "spine"]
    assert topo.domains("spine") == ["spine-01", "spine-02"]
    assert topo.gpu_models()["gpu001"] == "H100"
    assert "head01" not in topo.gpu_models()


def test_values_are_strings_and_empty_values_are_absent() -> None:
    topo = Topology.from_hosts({"n1": {"rack": 7, "leaf": "", "pdu": None, "rail": " r0 "}})
    assert topo.domains_of("n1") == {"rack": "7", "rail": "r0"}


def test_unknown_kind_and_host() -> None:
    topo = Topology.from_hosts(two_tier())
    with pytest.raises(ValueError, match="unknown domain kind 'switch'"):
        topo.members("switch", "x")
    with pytest.raises(KeyError):
        topo.domains_of("nope")


def test_tree_groups_spine_leaf_hosts_and_hosts_without_leaf() -> None:
    topo = Topology.from_hosts(two_tier(head01={"rack": "r1"}, mgmt1={"spine": "spine-02"}))
    tree = topo.tree()
    assert list(tree) == ["spine-01", "spine-02", NO_SPINE]
    assert list(tree["spine-01"]) == ["leaf-01", "leaf-02"]
    assert tree["spine-02"]["leaf-03"] == ["gpu009", "gpu010", "gpu011", "gpu012"]
    assert tree["spine-02"][NO_LEAF] == ["mgmt1"]
    assert tree[NO_SPINE] == {NO_LEAF: ["head01"]}


def test_natural_order() -> None:
    assert natural_sorted(["gpu10", "gpu2", "gpu1", "a"]) == ["a", "gpu1", "gpu2", "gpu10"]


def test_blast_radius_of_a_leaf_cuts_off_its_single_homed_hosts() -> None:
    topo = Topology.from_hosts(two_tier())
    radius = topo.blast_radius("leaf", "leaf-02")
    assert radius.hosts == ("gpu005", "gpu006", "gpu007", "gpu008")
    assert radius.cut_off == radius.hosts


def test_blast_radius_of_a_spine_in_a_tree_and_in_a_fat_tree(tmp_path: Path) -> None:
    tree = Topology.from_hosts(two_tier())
    spine = tree.blast_radius("spine", "spine-01")
    assert spine.switches == ("leaf-01", "leaf-02")
    assert len(spine.hosts) == 8
    # Without spine-01, leaf-01 and leaf-02 hosts lose the rest of the fleet.
    assert spine.cut_off == spine.hosts
    # Fat tree: every leaf also cabled to spine-02, so losing spine-01 cuts nobody off.
    links = "\n".join(f"  - {{a: leaf-0{n}, b: spine-02}}" for n in (1, 2, 3))
    links += "\n" + "\n".join(f"  - {{a: leaf-0{n}, b: spine-01}}" for n in (1, 2, 3))
    path = tmp_path / "fabric.yml"
    path.write_text(f"links:\n{links}\n")
    fat = Topology.from_hosts(two_tier(), path)
    radius = fat.blast_radius("spine", "spine-01")
    assert len(radius.hosts) == 12
    assert radius.cut_off == ()
    assert fat.uplinks("leaf-01") == ["spine-01", "spine-02"]


def test_blast_radius_of_power_and_rail_domains() -> None:
    hosts = {f"n{i}": {"pdu": "pdu-a" if i < 3 else "pdu-b", "rail": "rail-0"} for i in range(5)}
    topo = Topology.from_hosts(hosts)
    assert topo.blast_radius("pdu", "pdu-a").cut_off == ("n0", "n1", "n2")
    rail = topo.blast_radius("rail", "rail-0")
    assert len(rail.hosts) == 5
    assert rail.cut_off == ()
    assert topo.blast_radius("rack", "nowhere").hosts == ()


# -- YAML topology file ----------------------------------------------------------------------

FABRIC_YAML = """\
switches:
  - {name: spine-01, kind: spine}
  - {name: spine-02, kind: spine}
  - name: leaf-01
    kind: leaf
    model: MQM9790
  - {name: leaf-02, kind: leaf}
  - {name: leaf-09, kind: leaf}     # spare, no hosts yet
links:
  - {a: leaf-01, b: spine-01}
  - {a: leaf-02, b: spine-01}
  - {a: leaf-09, b: spine-02}
  - {a: n1, b: leaf-01}
  - {a: n2, b: leaf-01}
  - {a: n3, b: leaf-02}
  - {a: n4, b: leaf-02}
"""


def test_topology_file_fills_in_leaf_and_spine(tmp_path: Path) -> None:
    path = tmp_path / "fabric.yml"
    path.write_text(FABRIC_YAML)
    hosts: dict[str, dict[str, Any]] = {f"n{i}": {} for i in range(1, 5)}
    hosts["n4"] = {"leaf": "leaf-01"}  # the inventory wins over the file
    topo = Topology.from_hosts(hosts, path)
    assert topo.domains_of("n1") == {"leaf": "leaf-01", "spine": "spine-01"}
    assert topo.domains_of("n3") == {"leaf": "leaf-02", "spine": "spine-01"}
    assert topo.domains_of("n4")["leaf"] == "leaf-01"
    assert topo.switches("spine") == ["spine-01", "spine-02"]
    tree = topo.tree()
    assert tree["spine-02"] == {"leaf-09": []}
    assert tree["spine-01"]["leaf-01"] == ["n1", "n2", "n4"]


def test_dual_homed_host_gets_no_derived_leaf(tmp_path: Path) -> None:
    path = tmp_path / "fabric.yml"
    path.write_text(FABRIC_YAML + "  - {a: n1, b: leaf-02}\n")
    topo = Topology.from_hosts({f"n{i}": {} for i in range(1, 5)}, path)
    assert "leaf" not in topo.domains_of("n1")
    # ...but losing either leaf still shows it in the blast radius, not cut off.
    radius = topo.blast_radius("leaf", "leaf-01")
    assert "n1" in radius.hosts
    assert "n1" not in radius.cut_off
    assert "n2" in radius.cut_off


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("switches: []\nlinkz: []\n", "unknown key 'linkz'", 2),
        ("switches:\n  - {name: s1, kind: core}\n", "must be one of leaf, spine", 2),
        ("switches:\n  - {kind: leaf}\n", "needs a `name`", 2),
        ("switches:\n  - {name: s1, kind: leaf}\n  - {name: s1, kind: leaf}\n", "twice", 3),
        ("links:\n  - {a: s1}\n", "a link is", 2),
        ("links:\n  - {a: s1, b: s1}\n", "to itself", 2),
        ("links: {a: b}\n", "must be a list", 1),
        ("- just\n- a list\n", "is a mapping", 1),
        ("switches: [\n", "invalid YAML", 2),
    ],
)
def test_bad_topology_files_point_at_the_line(
    tmp_path: Path, text: str, message: str, line: int
) -> None:
    path = tmp_path / "fabric.yml"
    path.write_text(text)
    with pytest.raises(InventoryError, match=message) as caught:
        Topology.from_hosts({}, path)
    assert caught.value.position is not None
    assert caught.value.position.line == line
    assert caught.value.position.file == str(path)


def test_unknown_key_suggests_the_close_one(tmp_path: Path) -> None:
    path = tmp_path / "fabric.yml"
    path.write_text("switchs: []\n")
    with pytest.raises(InventoryError) as caught:
        Topology.from_hosts({}, path)
    assert caught.value.hint == "did you mean 'switches'?"


def test_yaml_link_to_an_unknown_host_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "fabric.yml"
    path.write_text(
        "switches:\n  - {name: leaf-01, kind: leaf}\nlinks:\n  - {a: gpu999, b: leaf-01}\n"
    )
    with pytest.raises(InventoryError, match="gpu999 is neither a switch") as caught:
        Topology.from_hosts({"gpu001": {}}, path)
    assert caught.value.position is not None
    assert caught.value.position.line == 4


def test_a_name_cannot_be_both_leaf_and_spine(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="names sw1 as its spine"):
        Topology.from_hosts({"a": {"leaf": "sw1"}, "b": {"spine": "sw1"}})
    path = tmp_path / "fabric.yml"
    path.write_text("switches:\n  - {name: sw1, kind: spine}\n")
    with pytest.raises(InventoryError, match="sw1 is a spine elsewhere"):
        Topology.from_hosts({"a": {"leaf": "sw1"}}, path)


def test_unreadable_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="cannot read topology file"):
        Topology.from_hosts({}, tmp_path / "missing.yml")
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    assert Topology.from_hosts({"a": {}}, empty).switches() == []


# -- ibnetdiscover ---------------------------------------------------------------------------


def test_ibnetdiscover_dump_gives_switches_links_and_host_leaves() -> None:
    hosts: dict[str, dict[str, Any]] = {f"gpu00{i}": {} for i in range(1, 5)}
    topo = Topology.from_hosts(hosts, DATA / "ibnetdiscover-synthetic.txt")
    assert topo.switches("spine") == ["spine-01", "spine-02"]
    assert topo.switches("leaf") == ["leaf-01", "leaf-02"]
    assert topo.domains_of("gpu001") == {"leaf": "leaf-01"}  # two spines: no single spine
    assert topo.domains_of("gpu004") == {"leaf": "leaf-02"}
    assert topo.uplinks("leaf-02") == ["spine-01", "spine-02"]
    assert topo.members("leaf", "leaf-02") == ["gpu003", "gpu004"]  # ufm01 is not ours
    assert "ufm01" not in topo.hosts()
    assert topo.blast_radius("spine", "spine-01").cut_off == ()
    assert topo.blast_radius("leaf", "leaf-01").cut_off == ("gpu001", "gpu002")


def test_ibnetdiscover_switch_names_without_mf0() -> None:
    text = """\
switchguid=0x1(1)
Switch\t36 "S-0000000000000001"\t\t# "Quantum Mellanox Technologies" base port 0 lid 1 lmc 0
[1]\t"H-00000000000000a1"[1](a1) \t\t# "node01 HCA-1" lid 5 4xHDR
[36]\t"S-0000000000000002"[36]\t\t# "Quantum Mellanox Technologies" lid 2 4xHDR

switchguid=0x2(2)
Switch\t36 "S-0000000000000002"\t\t# "Quantum Mellanox Technologies" base port 0 lid 2 lmc 0
[36]\t"S-0000000000000001"[36]\t\t# "Quantum Mellanox Technologies" lid 1 4xHDR

Switch\t36 "S-0000000000000003"\t\t# "core-a" base port 0 lid 3 lmc 0
[1]\t"S-0000000000000002"[1]\t\t# "Quantum Mellanox Technologies" lid 2 4xHDR
"""
    fabric = parse_ibnetdiscover(text)
    kinds = {s.name: s.kind for s in fabric.switches}
    # Identical vendor descriptions name nothing: the GUID id is used; unique words are names.
    assert kinds == {"S-0000000000000001": "leaf", "S-0000000000000002": "spine", "core-a": "spine"}
    # node01 is named from the port comment though it has no Ca block of its own.
    ends = {frozenset((link.a, link.b)) for link in fabric.links}
    assert frozenset(("node01", "S-0000000000000001")) in ends
    assert frozenset(("core-a", "S-0000000000000002")) in ends
    assert fabric.strict is False


def test_garbage_that_is_not_ibnetdiscover(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="no `Switch` blocks"):
        parse_ibnetdiscover('Ca\t1 "H-01"\t\t# "gpu001 mlx5_0"\n')
    path = tmp_path / "fabric.txt"
    path.write_bytes(b"\xff\xfe not text")
    with pytest.raises(InventoryError, match="cannot read"):
        Topology.from_hosts({}, path)
