"""Host patterns and --limit: Ansible's operators and order, subscripts, files, host ranges."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import PatternError
from fleetfix.inventory import Inventory
from fleetfix.inventory.patterns import order_terms, split_pattern, split_subscript

from .support import load_text, write

FLEET = """\
head01
[rack1]
gpu[001:004]
[rack2]
gpu[005:008]
[a100]
gpu002
gpu006
[leaf1:children]
rack1
rack2
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Inventory:
    return load_text(tmp_path, FLEET)


@pytest.mark.parametrize(
    ("pattern", "terms"),
    [
        ("a,b[1], c[2:3] , d", ["a", "b[1]", "c[2:3]", "d"]),
        ("a:&b:!c", ["a", "&b", "!c"]),
        ("gpu[001:016]", ["gpu[001:016]"]),
        ("gpu[1:4]:gpu[8:9]", ["gpu[1:4]", "gpu[8:9]"]),
        ("gpu01:22", ["gpu01:22"]),
        ("fe80::1", ["fe80::1"]),
        (" , ,", []),
    ],
)
def test_split_pattern(pattern: str, terms: list[str]) -> None:
    assert split_pattern(pattern) == terms


def test_operators_apply_unions_then_intersections_then_exclusions() -> None:
    assert order_terms(["!x", "a", "&b", "c"]) == ["a", "c", "&b", "!x"]
    assert order_terms(["!x"]) == ["all", "!x"]


@pytest.mark.parametrize(
    ("term", "split"),
    [
        ("g[0]", ("g", (0, None))),
        ("g[-1]", ("g", (-1, None))),
        ("g[1:3]", ("g", (1, 3))),
        ("g[2:]", ("g", (2, -1))),
        ("g[1-3]", ("g", (1, 3))),
        ("g", ("g", None)),
        ("g[a]", ("g[a]", None)),
    ],
)
def test_split_subscript(term: str, split: tuple[str, tuple[int, int | None] | None]) -> None:
    assert split_subscript(term) == split


@pytest.mark.parametrize(
    ("pattern", "hosts"),
    [
        # Ansible walks `all` level by level: a100 (a child of all) before rack1 (a grandchild).
        (
            "all",
            [
                "head01",
                "gpu002",
                "gpu006",
                "gpu001",
                "gpu003",
                "gpu004",
                "gpu005",
                "gpu007",
                "gpu008",
            ],
        ),
        (
            "rack2:rack1",
            ["gpu005", "gpu006", "gpu007", "gpu008", "gpu001", "gpu002", "gpu003", "gpu004"],
        ),
        ("leaf1:!rack1", ["gpu005", "gpu006", "gpu007", "gpu008"]),
        ("!leaf1:&a100", []),
        ("!rack1", ["head01", "gpu006", "gpu005", "gpu007", "gpu008"]),
        ("&a100", ["gpu002", "gpu006"]),
        ("!a100:rack2", ["gpu005", "gpu007", "gpu008"]),
        ("gpu00[!2-8]", ["gpu001"]),
        ("gpu00[13]", []),  # Ansible reads [13] as an index into a group "gpu00"
        ("gpu00?:&rack2", ["gpu005", "gpu006", "gpu007", "gpu008"]),
        ("~gpu00[5-9]$", ["gpu005", "gpu006", "gpu007", "gpu008"]),
        ("~head", ["head01"]),
        ("rack2[0]", ["gpu005"]),
        ("rack2[-1]", ["gpu008"]),
        ("rack2[1:2]", ["gpu006", "gpu007"]),
        ("rack2[2:]", ["gpu007", "gpu008"]),
        ("rack2[3:0]", ["gpu008"]),
        ("rack*[5]", ["gpu006"]),
        ("gpu003,gpu001,gpu003", ["gpu003", "gpu001"]),
        ("nomatch", []),
        ("nomatch[0]", []),
        ("ungrouped", ["head01"]),
    ],
)
def test_select_follows_ansible(fleet: Inventory, pattern: str, hosts: list[str]) -> None:
    assert fleet.select(pattern) == hosts


def test_host_name_shadows_group_of_the_same_name(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, "[rack1]\nrack2\n[rack2]\ngpu01\n")
    assert inventory.select("rack2") == ["rack2"]
    assert inventory.select("rack2*") == ["gpu01", "rack2"]


def test_out_of_range_index_is_an_error_as_in_ansible(fleet: Inventory) -> None:
    with pytest.raises(
        PatternError, match="No hosts matched the subscripted pattern 'rack1\\[9\\]'"
    ):
        fleet.select("rack1[9]")


@pytest.mark.parametrize("pattern", ["", "  ", ",", "!", "a,&", "~(unclosed"])
def test_malformed_patterns_raise(fleet: Inventory, pattern: str) -> None:
    with pytest.raises(PatternError):
        fleet.select(pattern)


def test_host_ranges_where_no_group_matches(fleet: Inventory) -> None:
    # Deliberate difference: Ansible reads gpu[002:004] as a subscript of a group "gpu".
    assert fleet.select("gpu[002:004]") == ["gpu002", "gpu003", "gpu004"]
    assert fleet.select("gpu[001:008:3]") == ["gpu001", "gpu004", "gpu007"]
    assert fleet.select("gpu[007:012]") == ["gpu007", "gpu008"]
    assert fleet.select("rack1:!gpu[002:003]") == ["gpu001", "gpu004"]
    assert fleet.select("&gpu[001:004]") == ["gpu002", "gpu001", "gpu003", "gpu004"]
    assert fleet.range_terms("gpu[002:004],rack2[0:1],!gpu[1:2]") == ["gpu[002:004]", "!gpu[1:2]"]


def test_group_subscripts_still_win_over_ranges(fleet: Inventory) -> None:
    assert fleet.select("rack2[0:1]") == ["gpu005", "gpu006"]
    assert fleet.range_terms("rack2[0:1]") == []


def test_letter_ranges_and_bad_ranges(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, "[r]\nnode-[a:f]\n")
    assert inventory.select("node-[b:d]") == ["node-b", "node-c", "node-d"]
    with pytest.raises(PatternError, match="equal-length"):
        inventory.select("node-[01:1]")


def test_limit_keeps_the_given_order(fleet: Inventory) -> None:
    hosts = fleet.select("rack2:rack1")
    assert fleet.limit(hosts, "a100:head01") == ["gpu006", "gpu002"]
    assert fleet.limit(fleet.select("all"), "a100:head01") == ["head01", "gpu002", "gpu006"]
    assert fleet.limit(hosts, "!rack2") == ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert fleet.limit(hosts, "gpu[003:005]") == ["gpu005", "gpu003", "gpu004"]


def test_limit_from_retry_file(fleet: Inventory, tmp_path: Path) -> None:
    retry = write(tmp_path, "xid79.retry", "gpu003\n\n  gpu007  \n!gpu007\n")
    assert fleet.limit(fleet.select("all"), f"@{retry}") == ["gpu003"]
    assert fleet.limit(fleet.select("all"), f"@{retry},head01") == ["head01", "gpu003"]


def test_limit_file_lines_are_single_terms(fleet: Inventory, tmp_path: Path) -> None:
    # One term, as Ansible reads it: a name no host has, which a --limit refuses (issue 20).
    retry = write(tmp_path, "one.retry", "gpu001,gpu002\n")
    with pytest.raises(PatternError, match=r"gpu001,gpu002 \(.*one\.retry:1\)"):
        fleet.limit(fleet.select("all"), f"@{retry}")


def test_empty_limit_file_selects_nothing(fleet: Inventory, tmp_path: Path) -> None:
    # Deliberate difference: Ansible would select every host for an empty retry file.
    empty = write(tmp_path, "empty.retry", "\n\n")
    assert fleet.limit(fleet.select("all"), f"@{empty}") == []


@pytest.mark.parametrize(
    ("name", "message"),
    [("missing.retry", "Unable to find limit file"), (".", "must be a file, not a directory")],
)
def test_unreadable_limit_files_raise(
    fleet: Inventory, tmp_path: Path, name: str, message: str
) -> None:
    with pytest.raises(PatternError, match=message):
        fleet.limit(fleet.select("all"), f"@{tmp_path / name}")


@pytest.mark.parametrize("limit", ["", " , "])
def test_empty_limit_raises_instead_of_selecting_everything(fleet: Inventory, limit: str) -> None:
    with pytest.raises(PatternError, match="empty --limit"):
        fleet.limit(fleet.select("all"), limit)


@pytest.mark.parametrize("typo", ["gpu[001:", "gpu[", "!!", "&", "rack1:&", "gpu]"])
def test_a_malformed_limit_never_widens_to_all_hosts(fleet: Inventory, typo: str) -> None:
    with pytest.raises(PatternError, match=r"unbalanced brackets|malformed term"):
        fleet.limit(fleet.select("all"), typo)
    with pytest.raises(PatternError):
        fleet.select(typo)


def test_exclusion_only_limits_still_mean_all_but(fleet: Inventory) -> None:
    everyone = fleet.select("all")
    first = everyone[0]
    assert fleet.limit(everyone, f"!{first}") == everyone[1:]
