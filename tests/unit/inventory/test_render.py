"""render_list / render_graph / render_host shapes and value conversion."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from fleetfix.errors import PatternError
from fleetfix.inventory import UnsafeText, render_graph, render_host, render_list, to_json_data

from .support import load_text

SMALL = """\
head01
[rack1]
gpu01 gpus=8
gpu02
[rack1:vars]
rack=r1
[fabric:children]
rack1
[empty]
"""


def test_list_shape(tmp_path: Path) -> None:
    document = render_list(load_text(tmp_path, SMALL))
    assert document == {
        "_meta": {
            "hostvars": {
                "gpu01": {"gpus": 8, "rack": "r1"},
                "gpu02": {"rack": "r1"},
            },
            "profile": "inventory_legacy",
        },
        "all": {"children": ["ungrouped", "fabric", "empty"]},
        "fabric": {"children": ["rack1"]},
        "rack1": {"hosts": ["gpu01", "gpu02"]},
        "ungrouped": {"hosts": ["head01"]},
    }


def test_graph_with_and_without_vars(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, SMALL)
    assert render_graph(inventory) == "\n".join(
        [
            "@all:",
            "  |--@ungrouped:",
            "  |  |--head01",
            "  |--@fabric:",
            "  |  |--@rack1:",
            "  |  |  |--gpu01",
            "  |  |  |--gpu02",
            "  |--@empty:",
        ]
    )
    assert render_graph(inventory, "rack1", with_vars=True) == "\n".join(
        [
            "@rack1:",
            "  |--gpu01",
            "  |  |--{gpus = 8}",
            "  |  |--{rack = r1}",
            "  |--gpu02",
            "  |  |--{rack = r1}",
            "  |--{rack = r1}",
        ]
    )


def test_graph_of_unknown_group_raises(tmp_path: Path) -> None:
    with pytest.raises(PatternError, match="must be valid group name"):
        render_graph(load_text(tmp_path, SMALL), "nope")


def test_host_takes_a_pattern_selecting_one_host(tmp_path: Path) -> None:
    inventory = load_text(tmp_path, SMALL)
    assert render_host(inventory, "gpu01") == {"gpus": 8, "rack": "r1"}
    assert render_host(inventory, "ungrouped") == {}
    with pytest.raises(PatternError, match="selects 2 hosts"):
        render_host(inventory, "rack1")
    with pytest.raises(PatternError, match="selects 0 hosts"):
        render_host(inventory, "nope")


def test_json_conversion_like_ansible() -> None:
    value = {
        "when": datetime.date(2024, 5, 1),
        "at": datetime.datetime(2024, 5, 1, 3, 0),
        "raw": UnsafeText("{{ x }}"),
        "seq": (1, UnsafeText("y")),
        "bytes": b"abc",
        "latin1": b"caf\xe9".decode("utf-8", "surrogateescape"),
        1: None,
    }
    assert to_json_data(value) == {
        "when": "2024-05-01",
        "at": "2024-05-01T03:00:00",
        "raw": {"__ansible_unsafe": "{{ x }}"},
        "seq": [1, {"__ansible_unsafe": "y"}],
        "bytes": {"__ansible_unsafe": "abc"},
        "latin1": "caf?",
        "1": None,
    }
    assert to_json_data(value, mark_unsafe=False)["raw"] == "{{ x }}"


def test_keys_become_json_strings() -> None:
    keys = {True: 1, None: 2, 1.5: 3, datetime.date(2024, 1, 1): 4, "k": 5}
    assert to_json_data(keys) == {"true": 1, "null": 2, "1.5": 3, "2024-01-01": 4, "k": 5}


def test_a_host_named_all_shadows_the_group_in_list(tmp_path: Path) -> None:
    # Ansible lists the hosts of the *pattern* all; a host called "all" is then all there is.
    document = render_list(load_text(tmp_path, "[r]\ngpu01 x=1\nall y=2\n"))
    assert document["_meta"]["hostvars"] == {"all": {"y": 2}}
    assert document["r"] == {"hosts": ["all"]}
