"""The YAML inventory format: structure, typing, Ansible's tolerated oddities, positioned errors."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from fleetfix.errors import InventoryError
from fleetfix.inventory import UnsafeText

from .support import load_text

CLUSTER = """\
all:
  vars:
    site: dc1
  hosts:
    head01:
  children:
    racks:
      children:
        rack1:
          hosts:
            gpu[01:02]:
            "gpu03:2222": {gpus: 4}
          vars: {rack: r1}
    spare: {hosts: gpu09}
"""


def test_hosts_children_vars_and_shorthands(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, CLUSTER, "inv.yml")
    assert inventory.group("racks").children == ("rack1",)
    assert inventory.group("rack1").hosts == ("gpu01", "gpu02", "gpu03")
    assert inventory.host_vars("gpu03") == {
        "site": "dc1",
        "rack": "r1",
        "gpus": 4,
        "ansible_port": 2222,
    }
    assert inventory.group("spare").hosts == ("gpu09",)
    assert inventory.hosts_in("ungrouped") == ["head01"]
    assert inventory.group("all").children == ("ungrouped", "racks", "spare")


def test_yaml_typing_is_yaml_1_1(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path,
        "all:\n  hosts:\n    h:\n      a: yes\n      b: 017\n      c: 0o17\n      d: 1.5e3\n"
        "      e: 2024-05-01\n      f: ~\n      g: '07'\n",
        "inv.yml",
    )
    assert inventory.host("h").vars == {
        "a": True,
        "b": 15,
        "c": "0o17",
        "d": "1.5e3",
        "e": datetime.date(2024, 5, 1),
        "f": None,
        "g": "07",
    }


def test_unsafe_tag_marks_every_string_inside(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path, "all:\n  hosts:\n    h:\n      t: !unsafe {a: '{{ x }}', b: [c, 1]}\n", "inv.yml"
    )
    value = inventory.host("h").vars["t"]
    assert value == {"a": "{{ x }}", "b": ["c", 1]}
    assert isinstance(value["a"], UnsafeText)
    assert isinstance(value["b"][0], UnsafeText)


def test_what_ansible_skips_is_skipped_with_a_warning(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path,
        "all:\n  children:\n    r1:\n      hosts: {gpu01: }\n      extra: {a: 1}\n"
        "      note: text\nbroken: [1, 2]\n",
        "inv.yml",
    )
    assert "broken" not in inventory.groups
    assert inventory.group("r1").hosts == ("gpu01",)
    assert len(inventory.warnings) == 3
    assert any("Skipping unexpected key (extra)" in warning for warning in inventory.warnings)


def test_host_vars_go_to_a_group_of_the_same_name(tmp_path: Path) -> None:
    # Ansible's set_variable looks up groups first; reproduced so --list output matches.
    inventory = load_text(
        tmp_path,
        "all:\n  children:\n    storage:\n      hosts: {nfs01: }\n"
        "  hosts:\n    storage: {role: x}\n",
        "inv.yml",
    )
    assert inventory.group("storage").vars == {"role": "x"}
    assert inventory.host("storage").vars == {}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("all:\n  hosts:\n    - gpu01\n", 2, 'Invalid "hosts" entry for "all" group'),
        ("all:\n  vars: [1]\n", 2, 'Invalid "vars" entry'),
        ("all:\n  hosts:\n    gpu01: drained\n", 3, "expected dictionary"),
        ("all:\n  hosts:\n    gpu01:\n    15:\n", 4, "must be a string"),
        ("all:\n  hosts:\n    gpu[1:]:\n", 3, "must specify end value"),
        ("a:\n  children:\n    b:\n      children:\n        a:\n", 3, "recursive dependency"),
        ("plugin: constructed\n", 1, "Plugin configuration YAML file"),
        ("all:\n  hosts: {gpu01: {x: [1, }}\n", 2, "YAML parsing failed"),
        ("all:\n  hosts:\n    gpu01: {x: !vault abc}\n", 3, "vault-encrypted"),
        ("- a\n- b\n", 1, "should be a dictionary"),
    ],
)
def test_errors_point_at_the_offending_key(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    with pytest.raises(InventoryError) as raised:
        load_text(tmp_path, text, "inv.yml")
    assert message in raised.value.message
    assert raised.value.position is not None
    assert raised.value.position.file == str(tmp_path / "inv.yml")
    assert raised.value.position.line == line


def test_empty_yaml_file_is_an_empty_inventory(tmp_path: Path) -> None:
    # Ansible's YAML plugin refuses it, then its INI plugin reads zero lines: accepted.
    inventory = load_text(tmp_path, "# nothing yet\n", "inv.yml")
    assert inventory.host_names() == []
    assert inventory.group_names() == ["all", "ungrouped"]


def test_json_inventory_and_unsafe_marker(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path,
        '{"all": {"hosts": {"gpu01": {"k": {"__ansible_unsafe": "{{ x }}"}, "n": 1.0}}}}',
        "inv.json",
    )
    assert isinstance(inventory.host("gpu01").vars["k"], UnsafeText)
    assert inventory.host("gpu01").vars["n"] == 1.0


def test_json_vault_values_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="vault-encrypted"):
        load_text(tmp_path, '{"all": {"vars": {"k": {"__ansible_vault": "abc"}}}}', "inv.json")
