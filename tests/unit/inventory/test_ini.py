"""The INI reader: value typing, sections, forward references and errors with positions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import InventoryError
from fleetfix.inventory import UnsafeText
from fleetfix.inventory.ini import parse_value

from .support import load_text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8080", 8080),
        ("0", 0),
        ("00", 0),
        ("-3", -3),
        ("+5", 5),
        ("1_000", 1000),
        ("0x1f", 31),
        ("0o17", 15),
        ("1.5", 1.5),
        ("1e3", 1000.0),
        ("True", True),
        ("False", False),
        ("None", None),
        ("[1, 'a']", [1, "a"]),
        ("(1, 'x')", [1, "x"]),
        ("{3, 1, 2}", [1, 2, 3]),
        ("{'k': (1, 2)}", {"k": [1, 2]}),
        ("'07'", "07"),
        ('"quoted"', "quoted"),
        ("07", "07"),
        ("yes", "yes"),
        ("true", "true"),
        ("leaf-01", "leaf-01"),
        ("10.0.0.1", "10.0.0.1"),
        ("inf", "inf"),
        ("1+1", "1+1"),
        ("f(x)", "f(x)"),
        ("", ""),
        ("1+2j", "(1+2j)"),
        ("...", "..."),
        ("Nonesuch", "Nonesuch"),
        ("True-1j", "True-1j"),
        ("8080 # python comment", 8080),
        ("a=b", "a=b"),
    ],
)
def test_values_are_typed_like_ansible(text: str, expected: Any) -> None:
    value = parse_value(text)
    assert value == expected
    assert type(value) is type(expected)


def test_bytes_literals_become_untrusted_text() -> None:
    value = parse_value("b'raw'")
    assert isinstance(value, UnsafeText)
    assert value == "raw"


def test_invalid_escape_does_not_warn() -> None:
    # pytest turns warnings into errors: literal_eval's SyntaxWarning must stay silent.
    assert parse_value('"\\d"') == "\\d"


def test_literal_eval_failures_ansible_does_not_forgive_raise() -> None:
    with pytest.raises(ValueError, match="unhashable"):
        parse_value("{[1]: 2}")


def test_sections_hosts_vars_and_children(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path,
        "head01 role=ctl\n"
        "[fabric:children]\nleaf1  # forward reference\n"
        "[leaf1]\ngpu[01:02] ansible_user=ops\n"
        "[leaf1:vars]\nleaf = leaf-01\nmtu=9000\n",
    )
    assert inventory.group_names() == ["all", "ungrouped", "fabric", "leaf1"]
    assert inventory.group("fabric").children == ("leaf1",)
    assert inventory.group("leaf1").hosts == ("gpu01", "gpu02")
    assert inventory.group("leaf1").vars == {"leaf": "leaf-01", "mtu": 9000}
    assert inventory.host("gpu02").vars == {"ansible_user": "ops"}
    assert inventory.hosts_in("ungrouped") == ["head01"]
    assert inventory.groups_of("gpu01") == ["fabric", "leaf1"]


def test_pending_children_chain_resolves_in_any_order(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path,
        "[pod:children]\nspine\n[spine:children]\nleaf\n[leaf:children]\nrack\n[rack]\ngpu01\n",
    )
    assert inventory.groups_of("gpu01") == ["leaf", "pod", "rack", "spine"]
    assert [inventory.group(name).depth for name in ("pod", "spine", "leaf", "rack")] == [
        1,
        2,
        3,
        4,
    ]


def test_vars_section_may_come_before_its_group(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, "[rack1:vars]\nrack=r1\n[rack1]\ngpu01\n")
    assert inventory.host_vars("gpu01") == {"rack": "r1"}


def test_host_in_ungrouped_leaves_it_once_grouped(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, "gpu01\n[rack1]\ngpu01\n[all]\nmon01\n")
    assert inventory.hosts_in("ungrouped") == ["mon01"]
    assert inventory.group("rack1").hosts == ("gpu01",)


def test_first_port_wins_and_inline_port_overrides(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path, "[a]\ngpu01:2201\ngpu02\n[b]\ngpu01:2999\ngpu02:2202\ngpu03:22 ansible_port=2\n"
    )
    assert inventory.host_vars("gpu01")["ansible_port"] == 2201
    assert "ansible_port" not in inventory.host_vars("gpu02")
    assert inventory.host_vars("gpu03")["ansible_port"] == 2


def test_crlf_tabs_and_comments(tmp_path: Path) -> None:
    inventory = load_text(
        tmp_path, "; top\r\n[r]  # c\r\n\tgpu01\tx=1  # trailing\r\n# [not_a_group]\r\n"
    )
    assert inventory.group_names() == ["all", "ungrouped", "r"]
    assert inventory.host("gpu01").vars == {"x": 1}


def test_quoted_values_keep_spaces_and_hashes(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, "[r]\ngpu01 note=\"drained # by ops\" args='-o A=1'\n")
    assert inventory.host("gpu01").vars == {"note": "drained # by ops", "args": "-o A=1"}


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("[r]\ngpu01 drained\n", 2, 7, "Expected key=value host variable assignment"),
        ("[r]\n\ngpu01 a=1 'open\n", 3, 1, "No closing quotation"),
        ("[r:hostvars]\n", 1, 1, "unknown type: hostvars"),
        ("[r]\ngpu01\n[r x]\n", 3, 1, "Invalid section entry"),
        ("[p:children]\nc1\nc2\n[c1]\n", 3, 1, "includes undefined group 'c2'"),
        ("[z:vars]\nx=1\n", 1, 1, "not valid for undefined group 'z'"),
        ("[r]\ngpu[1:]\n", 2, 1, "must specify end value"),
        ("[r]\n  gpu01:\n", 2, 3, "ending in ':' is not allowed"),
        ("[a:children]\nb\n[b:children]\na\n", 4, 1, "recursive dependency loop"),
        ("[r]\ngpu01\n[r:vars]\nnoequals\n", 4, 1, "Expected key=value, got: noequals"),
        ("[r]\ngpu01\n[p:children]\nall\n", 4, 1, "Adding group 'all' as child"),
    ],
)
def test_errors_name_file_line_and_column(
    tmp_path: Path, text: str, line: int, column: int, message: str
) -> None:
    with pytest.raises(InventoryError) as raised:
        load_text(tmp_path, text)
    error = raised.value
    assert message in error.message
    assert error.position is not None
    assert error.position.file == str(tmp_path / "hosts.ini")
    assert (error.position.line, error.position.column) == (line, column)
    assert error.source_line == text.splitlines()[line - 1]


def test_error_renders_line_and_caret(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as raised:
        load_text(tmp_path, "[r]\ngpu01 ansible_host=10.0.0.1 drained\n")
    rendered = str(raised.value).splitlines()
    assert rendered[0].startswith(f"{tmp_path / 'hosts.ini'}:2:29: Expected key=value")
    assert rendered[1] == "    gpu01 ansible_host=10.0.0.1 drained"
    assert rendered[2] == "    " + " " * 28 + "^"


def test_host_named_like_builtin_group_fails_at_its_line(tmp_path: Path) -> None:
    # Ansible crashes on this one ("can't add group to itself"); fleetfix points at the line.
    with pytest.raises(InventoryError, match="cannot be placed in group 'ungrouped'") as raised:
        load_text(tmp_path, "[r]\ngpu01\n[all]\nungrouped\n")
    assert raised.value.position is not None
    assert raised.value.position.line == 4
