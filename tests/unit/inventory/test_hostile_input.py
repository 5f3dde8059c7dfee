"""Inventories and patterns that would eat memory or confuse a terminal: refused, with a place.

The cap is 1,000,000 hosts per inventory line or pattern term (every range in it multiplied,
counted before anything is expanded) and 1,000,000 hosts per inventory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetfix.errors import InventoryError, PatternError
from fleetfix.inventory import Inventory, builder, datafiles, load_inventory
from fleetfix.inventory.ranges import (
    MAX_HOSTS_PER_PATTERN,
    HostRangeError,
    check_range_size,
    expand_host_range,
    range_size,
)

from .support import load_text, write


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("gpu01", 1),
        ("gpu[01:16]", 16),
        ("r[1:4]-g[01:08]", 32),
        ("s[a:z]", 26),
        ("x[1:10:3]", 4),
        ("down[5:1]-rest[oops", 0),  # nothing to expand, so the rest is never read (Ansible)
        ("gpu[0:999999999999]", 1_000_000_000_000),
        ("gpu[0:9999][0:9999]", 100_000_000),
        ("big[0:99999999999999999999999999999]", 10**29),  # too long for len(range)
    ],
)
def test_range_size_counts_without_expanding(name: str, size: int) -> None:
    assert range_size(name) == size


def test_the_cap_is_exactly_one_million_per_pattern() -> None:
    check_range_size(f"gpu[1:{MAX_HOSTS_PER_PATTERN}]")
    check_range_size("r[1:1000]n[1:1000]")
    for name in (f"gpu[0:{MAX_HOSTS_PER_PATTERN}]", "r[0:1000]n[1:1000]"):
        with pytest.raises(HostRangeError, match="more than the limit of 1,000,000 hosts"):
            expand_host_range(name)


def test_too_many_ranges_in_one_name_are_refused() -> None:
    with pytest.raises(HostRangeError, match="33 ranges, more than 32"):
        expand_host_range("n" + "[1:1]" * 33)
    assert expand_host_range("n" + "[1:1]" * 32) == ["n" + "1" * 32]


@pytest.mark.parametrize(
    ("line", "count"),
    [("gpu[0:999999999999]", "1,000,000,000,000"), ("r[0:9999]n[0:9999]", "100,000,000")],
)
def test_ini_line_too_large_is_refused_at_its_line(tmp_path: Path, line: str, count: str) -> None:
    with pytest.raises(InventoryError) as raised:
        load_text(tmp_path, f"[gpu]\ngpu01\n{line} ansible_user=ops\n")
    assert str(raised.value.position) == f"{tmp_path / 'hosts.ini'}:3:1"
    assert f"stands for {count} hosts, more than the limit of 1,000,000" in raised.value.message


def test_yaml_host_too_large_is_refused_at_its_key(tmp_path: Path) -> None:
    text = 'all:\n  children:\n    gpu:\n      hosts:\n        "n[0:9999][0:9999]":\n'
    with pytest.raises(InventoryError, match="stands for 100,000,000 hosts") as raised:
        load_text(tmp_path, text, "hosts.yml")
    assert str(raised.value.position) == f"{tmp_path / 'hosts.yml'}:5:9"


def test_an_inventory_over_the_host_cap_is_refused_at_the_line_that_crosses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builder, "MAX_INVENTORY_HOSTS", 10)
    assert len(load_text(tmp_path, "[a]\na[1:6]\n[b]\na[1:6]\nb[1:4]\n").hosts) == 10
    with pytest.raises(InventoryError, match="more than 10 hosts") as raised:
        load_text(tmp_path, "[a]\na[1:6]\n[b]\nb[1:5]\n")
    assert (raised.value.position.line if raised.value.position else None) == 4
    with pytest.raises(InventoryError, match="more than 10 hosts"):
        load_inventory(",".join(f"h{n}" for n in range(11)))


@pytest.mark.parametrize("name", ["hosts.ini", "hosts.yml", "hosts"])
@pytest.mark.parametrize(
    ("character", "named"),
    [
        ("\x00", "NUL byte"),
        ("\x07", "control character U+0007"),
        ("\x1b", "escape character U+001B (ESC)"),
        ("\x9b", "control character U+009B"),
    ],
)
def test_control_characters_are_refused_at_their_place(
    tmp_path: Path, name: str, character: str, named: str
) -> None:
    yaml_like = name.endswith(".yml")
    text = "all:\n  hosts:\n    gpu01:\n" if yaml_like else "[gpu]\ngpu01\n"
    text += f"    gpu0{character}2:\n" if yaml_like else f"gpu0{character}2\n"
    with pytest.raises(InventoryError) as raised:
        load_text(tmp_path, text, name)
    column = 9 if yaml_like else 5
    assert str(raised.value.position) == f"{tmp_path / name}:{3 if not yaml_like else 4}:{column}"
    assert raised.value.message == f"{named} is not allowed in an inventory file"
    assert character not in (raised.value.source_line or "")


def test_next_line_is_a_line_break_in_yaml_but_refused_in_ini(tmp_path: Path) -> None:
    # YAML reads U+0085 as a line break; INI (str.splitlines) would too, unlike editors.
    assert load_text(tmp_path, "all:\n  hosts:\n    a:\x85    b:\n", "hosts.yml").host_names() == [
        "a",
        "b",
    ]
    with pytest.raises(InventoryError, match=re.escape("control character U+0085")):
        load_text(tmp_path, "[gpu]\na\x85b\n")


def test_a_nul_in_a_vars_file_names_that_file(tmp_path: Path) -> None:
    write(tmp_path, "group_vars/gpu.yml", "a: 1\nb: \x00\n")
    with pytest.raises(InventoryError, match="NUL byte") as raised:
        load_text(tmp_path, "[gpu]\ngpu01\n")
    assert str(raised.value.position) == f"{tmp_path / 'group_vars' / 'gpu.yml'}:2:4"


def test_undecodable_bytes_in_yaml_are_named(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_bytes(b"all:\n  hosts:\n    gpu\xff01:\n")
    with pytest.raises(InventoryError, match="byte 0xFF that is not UTF-8") as raised:
        load_inventory([path])
    assert str(raised.value.position) == f"{path}:3:8"


def test_ini_keeps_undecodable_bytes_as_ansible_does(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_bytes(b"[gpu]\ngpu01 owner=caf\xe9\n")
    assert load_inventory([path]).host_vars("gpu01") == {"owner": "caf\udce9"}


@pytest.mark.parametrize("name", ["hosts.yml", "hosts.json"])
def test_data_nested_too_deeply_is_refused(tmp_path: Path, name: str) -> None:
    deep = "[" * 150 + "]" * 150
    text = (
        f'{{"all": {{"hosts": {{"h1": null}}, "vars": {{"x": {deep}}}}}}}'
        if name.endswith(".json")
        else f"all:\n  hosts:\n    h1:\n  vars:\n    x: {deep}\n"
    )
    with pytest.raises(InventoryError, match=r"nested too deeply \(more than 100 levels\)"):
        load_text(tmp_path, text, name)
    fine = text.replace(deep, "[" * 90 + "]" * 90)
    assert load_text(tmp_path, fine, name).host_names() == ["h1"]


def test_aliases_expanding_past_the_limit_are_refused(tmp_path: Path) -> None:
    lines = ["    a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"    a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, 9)]
    text = "all:\n  hosts:\n    h1:\n  vars:\n" + "\n".join(lines) + "\n"
    with pytest.raises(InventoryError, match="expand this file to 490,329,059 values"):
        load_text(tmp_path, text, "hosts.yml")
    few = "all:\n  hosts:\n    h1:\n  vars:\n" + "\n".join(lines[:4]) + "\n"
    assert len(load_text(tmp_path, few, "hosts.yml").host_vars("h1")["a3"]) == 9


@pytest.fixture
def fleet(tmp_path: Path) -> Inventory:
    return load_text(tmp_path, "[rack1]\ngpu[001:004]\n")


def test_a_limit_too_large_is_refused_naming_the_limit(fleet: Inventory) -> None:
    with pytest.raises(PatternError) as raised:
        fleet.limit(["gpu001"], "gpu001,node[0:99999][0:99999]")
    assert "stands for 10,000,000,000 hosts" in raised.value.message
    assert raised.value.message.endswith("(in --limit 'gpu001,node[0:99999][0:99999]')")


def test_a_host_pattern_too_large_is_refused_naming_the_pattern(fleet: Inventory) -> None:
    with pytest.raises(PatternError, match=r"in host pattern 'node\[0:999999999999\]'"):
        fleet.select("node[0:999999999999]")
    # A group subscript is not a range: Ansible slices, nothing is expanded.
    assert fleet.select("rack1[0:999999999999]") == ["gpu001", "gpu002", "gpu003", "gpu004"]


def test_a_file_without_end_is_refused_after_the_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(datafiles, "MAX_FILE_BYTES", 1000)
    with pytest.raises(InventoryError, match="/dev/zero is larger than 0 MiB; refused"):
        load_inventory(["/dev/zero"])
    assert load_text(tmp_path, "[gpu]\n" + "#" * 990 + "\n").host_names() == []


def test_a_value_pyyaml_cannot_build_is_an_error_at_its_place(tmp_path: Path) -> None:
    text = "all:\n  hosts:\n    h1:\n  vars:\n    since: 2024-02-30\n"
    with pytest.raises(InventoryError, match="cannot read this value: day is out of range"):
        load_text(tmp_path, text, "hosts.yml")
    write(tmp_path, "group_vars/all.yml", "since: 2024-02-30\n")
    with pytest.raises(InventoryError) as raised:
        load_text(tmp_path, "[gpu]\ngpu01\n")
    assert str(raised.value.position) == f"{tmp_path / 'group_vars' / 'all.yml'}:1:8"


@pytest.mark.parametrize("limit", ["!!gpu001", "&!rack1", "gpu001,!&gpu002", "~gpu00[12]:gpu[1:2"])
def test_doubled_operators_and_dropped_brackets_are_refused(fleet: Inventory, limit: str) -> None:
    # `!!gpu001` would exclude a host named "!gpu001": nobody, so every host. Ansible's `:` split
    # drops a lone bracket silently, even after a regex term.
    with pytest.raises(PatternError, match=r"malformed term|unbalanced brackets"):
        fleet.limit(fleet.select("all"), limit)


def test_a_regex_with_brackets_still_reads(fleet: Inventory) -> None:
    assert fleet.select("~gpu00[12]$:gpu004") == ["gpu001", "gpu002", "gpu004"]
