"""Variable precedence: all < parent < child < host, priorities, group_vars/host_vars, sources."""

from __future__ import annotations

from pathlib import Path

from fleetfix.inventory import load_inventory

from .support import load_text, write

LAYERED = """\
[all:vars]
who=all
parent_only=p
[cluster:children]
rack1
[cluster:vars]
who=cluster
parent_only=cluster
[rack1]
gpu01
gpu02 who=host
[rack1:vars]
who=rack1
"""


def test_child_beats_parent_and_host_beats_all(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, LAYERED)
    assert inventory.host_vars("gpu01") == {"who": "rack1", "parent_only": "cluster"}
    assert inventory.host_vars("gpu02")["who"] == "host"


def test_priority_then_name_order_siblings(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path,
        "[b_group]\ngpu01\n[b_group:vars]\nx=b\n"
        "[a_group]\ngpu01\n[a_group:vars]\nx=a\n"
        "[low]\ngpu02\n[low:vars]\nx=low\nansible_group_priority=1\n"
        "[high]\ngpu02\n[high:vars]\nx=high\nansible_group_priority=9\n",
    )
    # Same depth and priority: the later name wins; a higher priority wins whatever the name.
    assert inventory.host_vars("gpu01")["x"] == "b"
    assert inventory.host_vars("gpu02")["x"] == "high"
    assert inventory.group("high").priority == 9
    assert "ansible_group_priority" not in inventory.group("high").vars
    assert inventory.group_vars("high")["ansible_group_priority"] == 9


def test_deeper_group_beats_higher_priority(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path,
        "[outer:children]\ninner\n[inner]\ngpu01\n[inner:vars]\nx=inner\n"
        "[flat]\ngpu01\n[flat:vars]\nx=flat\nansible_group_priority=100\n",
    )
    assert inventory.host_vars("gpu01")["x"] == "inner"


def test_group_vars_files_beat_inventory_group_vars(tmp_path: Path) -> None:
    write(tmp_path, "group_vars/all.yml", "leaf: from-all-file\n")
    write(tmp_path, "group_vars/rack1.yml", "rack: from-rack-file\n")
    write(tmp_path, "host_vars/gpu01.yml", "rack: from-host-file\n")
    inventory = load_text(
        tmp_path, "[rack1]\ngpu01 rack=inline\ngpu02\n[rack1:vars]\nleaf=ini\nrack=ini\n"
    )
    # Ansible: group_vars/all (a file) is above every [g:vars] section of the inventory.
    assert inventory.host_vars("gpu02") == {"leaf": "from-all-file", "rack": "from-rack-file"}
    assert inventory.host_vars("gpu01")["rack"] == "from-host-file"


def test_dicts_are_replaced_not_merged(tmp_path: Path) -> None:
    write(tmp_path, "group_vars/rack1.yml", "limits: {shm: 80}\n")
    inventory = load_text(tmp_path, "[all:vars]\nlimits={'shm': 50, 'mem': 90}\n[rack1]\ngpu01\n")
    assert inventory.host_vars("gpu01")["limits"] == {"shm": 80}


def test_later_source_files_beat_earlier_ones_layer_by_layer(tmp_path: Path) -> None:
    first = write(tmp_path, "a/hosts.ini", "[outer:children]\nrack1\n[rack1]\ngpu01\n")
    second = write(tmp_path, "b/hosts.ini", "[outer]\n")
    write(tmp_path, "a/group_vars/rack1.yml", "x: a-rack1\n")
    write(tmp_path, "b/group_vars/outer.yml", "x: b-outer\n")
    inventory = load_inventory([first, second])
    # Ansible loops sources outside groups: source b's shallower group file still wins.
    assert inventory.host_vars("gpu01")["x"] == "b-outer"
    assert [directory.path for directory in inventory.vars_dirs] == [
        str(tmp_path / "a"),
        str(tmp_path / "b"),
    ]


def test_internal_names_are_left_out(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path, "[r]\ngpu01 inventory_hostname=x group_names=y playbook_dir=z keep=1\n"
    )
    assert inventory.host_vars("gpu01") == {"keep": 1}


def test_host_vars_returns_a_fresh_dict(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, "[r]\ngpu01 a=1\n")
    inventory.host_vars("gpu01")["a"] = 2
    assert inventory.host_vars("gpu01") == {"a": 1}
