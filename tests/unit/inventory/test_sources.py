"""Inventory sources: several -i, directories, host lists, file kinds, and what is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetfix.errors import InventoryError
from fleetfix.inventory import load_inventory

from .support import write


def test_later_sources_add_to_earlier_ones(tmp_path: Path) -> None:
    first = write(tmp_path, "a.ini", "[rack1]\ngpu01 x=a\n[rack1:vars]\nleaf=a\n")
    second = write(
        tmp_path,
        "b.yml",
        "all:\n  children:\n    rack1:\n"
        "      hosts: {gpu01: {x: b}, gpu02: }\n      vars: {leaf: b}\n",
    )
    inventory = load_inventory([first, second])
    assert inventory.group("rack1").hosts == ("gpu01", "gpu02")
    assert inventory.host_vars("gpu01") == {"x": "b", "leaf": "b"}
    assert inventory.sources == (str(first), str(second))


def test_directory_source_reads_every_file_but_ignored_ones(tmp_path: Path) -> None:
    write(tmp_path, "inv/01-racks.ini", "[rack1]\ngpu01\n")
    write(tmp_path, "inv/02-extra", "[login]\nlogin01\n")
    write(tmp_path, "inv/sub/03.yml", "all:\n  hosts: {nfs01: }\n")
    for ignored in ("notes.txt", "README.md", "old.ini.bak", ".hidden", "x.retry", "a.cfg", "b~"):
        write(tmp_path, f"inv/{ignored}", "[ignored]\nnever01\n")
    write(tmp_path, "inv/group_vars/rack1.yml", "rack: r1\n")
    write(tmp_path, "inv/sub/group_vars/all.yml", "never: read\n")
    inventory = load_inventory([tmp_path / "inv"])
    assert sorted(inventory.hosts) == ["gpu01", "login01", "nfs01"]
    assert "ignored" not in inventory.groups
    assert inventory.host_vars("gpu01") == {"rack": "r1"}
    assert inventory.host_vars("nfs01") == {}


def test_a_single_path_is_one_source(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts", "[r]\ngpu01\n")
    assert load_inventory(str(path)).host_names() == ["gpu01"]
    assert load_inventory(path).sources == (str(path),)


def test_directory_symlink_loops_are_refused(tmp_path: Path) -> None:
    write(tmp_path, "inv/hosts", "[r]\ngpu01\n")
    (tmp_path / "inv" / "loop").symlink_to(tmp_path / "inv")
    with pytest.raises(InventoryError, match="links back"):
        load_inventory([tmp_path / "inv"])


def test_host_list_sources(tmp_path: Path) -> None:
    inventory = load_inventory(
        ["gpu77, gpu78:2222,,gpu77", write(tmp_path, "h.ini", "[r]\ngpu77\n")]
    )
    assert inventory.hosts_in("ungrouped") == ["gpu78"]
    assert inventory.host_vars("gpu78") == {"ansible_port": 2222}
    assert inventory.group("r").hosts == ("gpu77",)
    assert len(inventory.vars_dirs) == 1


def test_relative_sources_are_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "hosts", "[r]\ngpu01\n")
    write(tmp_path, "group_vars/r.yml", "x: 1\n")
    monkeypatch.chdir(tmp_path)
    inventory = load_inventory(["hosts"])
    assert inventory.host_vars("gpu01") == {"x": 1}
    assert inventory.vars_dirs[0].path == os.path.realpath(tmp_path)


def test_file_kind_follows_ansible_plugin_chain(tmp_path: Path) -> None:
    # A .yml file that is not a YAML inventory is still read as INI, as Ansible does.
    ini_in_yml = write(tmp_path, "a.yml", "[r]\ngpu01\n")
    yaml_without_extension = write(tmp_path, "b", "all:\n  hosts: {gpu02: }\n")
    single_host = write(tmp_path, "c.yaml", "gpu03\n")
    inventory = load_inventory([ini_in_yml, yaml_without_extension, single_host])
    assert inventory.host_names() == ["gpu02", "gpu03", "gpu01"]


def test_ini_extension_is_never_read_as_yaml(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="ending in ':' is not allowed"):
        load_inventory([write(tmp_path, "a.ini", "all:\n  hosts: {gpu01: }\n")])


def test_extensionless_ini_errors_are_reported_as_ini(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="Expected key=value") as raised:
        load_inventory([write(tmp_path, "hosts", "[r]\ngpu01 oops\n")])
    assert raised.value.position is not None
    assert raised.value.position.line == 2


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("inv.toml", "[all.hosts]\n", "TOML inventories are not supported"),
        ("inv.yml", "plugin: amazon.aws.aws_ec2\n", "does not run inventory plugins"),
        ("hosts", "$ANSIBLE_VAULT;1.1;AES256\n3132\n", "vault-encrypted"),
    ],
)
def test_unsupported_sources_are_refused(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    with pytest.raises(InventoryError, match=message) as raised:
        load_inventory([write(tmp_path, name, text)])
    assert raised.value.position is not None
    assert raised.value.position.line == 1


def test_inventory_scripts_are_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = write(tmp_path, "inventory.py", f"#!/bin/sh\ntouch {marker}\necho '{{}}'\n")
    script.chmod(0o755)
    with pytest.raises(InventoryError, match="never runs inventory sources"):
        load_inventory([script])
    assert not marker.exists()


def test_missing_sources_and_empty_directories(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="does not exist"):
        load_inventory([tmp_path / "nope.ini"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InventoryError, match="holds no inventory file"):
        load_inventory([tmp_path / "empty"])
    with pytest.raises(InventoryError, match="no inventory source"):
        load_inventory([])


def test_vars_directory_is_read_once_per_directory(tmp_path: Path) -> None:
    first = write(tmp_path, "a.ini", "[r]\ngpu01\n")
    second = write(tmp_path, "b.ini", "[r]\ngpu02\n")
    write(tmp_path, "group_vars/r", "x: 1\n")
    inventory = load_inventory([first, second])
    assert inventory.vars_dirs[0] is inventory.vars_dirs[1]
    assert inventory.vars_dirs[0].group_vars == {"r": {"x": 1}}


def test_vars_files_of_unknown_names_are_not_read(tmp_path: Path) -> None:
    write(tmp_path, "group_vars/ghost.yml", "- this would fail to load\n")
    write(tmp_path, "host_vars/ghost.yml", ": also broken [\n")
    inventory = load_inventory([write(tmp_path, "hosts", "[r]\ngpu01\n")])
    assert inventory.host_vars("gpu01") == {}


def test_vars_directory_file_choice_and_order(tmp_path: Path) -> None:
    write(tmp_path, "group_vars/r", "first: plain-name\n")
    write(tmp_path, "group_vars/r.yml", "first: never\n")
    write(tmp_path, "host_vars/gpu01/b.yml", "k: b\n")
    write(tmp_path, "host_vars/gpu01/a.json", '{"k": "a", "a": true}\n')
    write(tmp_path, "host_vars/gpu01/deeper/c.yaml", "k: c\n")
    write(tmp_path, "host_vars/gpu01/skip.txt", "k: never\n")
    inventory = load_inventory([write(tmp_path, "hosts", "[r]\ngpu01\n")])
    assert inventory.host_vars("gpu01") == {"first": "plain-name", "k": "c", "a": True}


def test_vars_file_errors_name_the_file(tmp_path: Path) -> None:
    broken = write(tmp_path, "group_vars/r.yml", "ok: 1\nbad: [1,\n")
    with pytest.raises(InventoryError, match="YAML parsing failed") as raised:
        load_inventory([write(tmp_path, "hosts", "[r]\ngpu01\n")])
    assert raised.value.position is not None
    assert (raised.value.position.file, raised.value.position.line) == (str(broken), 2)
