"""group_vars/ and host_vars/ next to the playbook: Ansible's precedence against the
inventory's own, and a broken file refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.engine import with_playbook_vars
from fleetfix.errors import PlaybookError
from fleetfix.inventory import load_inventory
from fleetfix.inventory.model import Inventory
from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.loader import load_playbook, validate_playbook


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_playbook_vars_rank_just_above_the_inventorys_in_each_tier(tmp_path: Path) -> None:
    inventory_dir, playbook_dir = tmp_path / "inventory", tmp_path / "playbooks"
    _write(
        inventory_dir / "hosts.ini",
        "[gpu]\ngpu001 host_ini=inv\n[gpu:vars]\ngroup_ini=inv\ntier_all_vs_group=inv-group\n",
    )
    _write(inventory_dir / "group_vars/all.yml", "all_file: inv\n")
    _write(inventory_dir / "group_vars/gpu.yml", "group_file: inv\nhost_ini: group-file\n")
    _write(inventory_dir / "host_vars/gpu001.yml", "host_file: inv\n")
    _write(
        playbook_dir / "group_vars/all.yml",
        "all_file: pb\ngroup_ini: pb-all\ntier_all_vs_group: pb-all\ngroup_file: pb-all\n",
    )
    _write(playbook_dir / "group_vars/gpu.yml", "group_file: pb\nhost_ini: pb-group\n")
    _write(playbook_dir / "host_vars/gpu001.yml", "host_file: pb\nonly_pb: yes\n")
    inventory = load_inventory([inventory_dir / "hosts.ini"])
    wrapped = with_playbook_vars(inventory, str(playbook_dir))
    assert isinstance(wrapped, Inventory)
    merged = wrapped.host_vars("gpu001")
    assert merged["all_file"] == "pb"  # playbook group_vars/all over the inventory's
    assert merged["group_ini"] == "pb-all"  # ... and over [gpu:vars]
    assert merged["group_file"] == "pb"  # group_vars/<group> over any group_vars/all
    assert merged["host_ini"] == "inv"  # the inventory's host vars over every group file
    assert merged["host_file"] == "pb"
    assert merged["only_pb"] is True
    assert inventory.host_vars("gpu001")["all_file"] == "inv"  # the inventory is unchanged


def test_the_inventorys_own_directory_is_not_read_twice(tmp_path: Path) -> None:
    _write(tmp_path / "hosts.ini", "[gpu]\ngpu001\n")
    _write(tmp_path / "group_vars/gpu.yml", "x: 1\n")
    inventory = load_inventory([tmp_path / "hosts.ini"])
    assert with_playbook_vars(inventory, str(tmp_path)) is inventory


def test_a_broken_vars_file_next_to_the_playbook_is_refused_at_load(tmp_path: Path) -> None:
    _write(tmp_path / "site.yml", "- hosts: gpu\n  tasks:\n    - debug: msg=hi\n")
    _write(tmp_path / "group_vars/gpu/10-net.yml", "a: 1\n  b: [\n")
    _write(tmp_path / "host_vars/gpu001.yml", "- just\n- a list\n")
    _write(tmp_path / "host_vars/notes.txt", "ignored: [ as Ansible ignores it\n")
    catalog = StepCatalog(probes={}, actions={})
    errors = validate_playbook(tmp_path / "site.yml", catalog)
    assert [Path(e.position.file).name for e in errors if e.position] == [
        "10-net.yml",
        "gpu001.yml",
    ]
    assert "expected a mapping of variables" in errors[1].message
    with pytest.raises(PlaybookError):
        load_playbook(tmp_path / "site.yml", catalog)
