"""Bad inventory input found all at once (issue 20): one run names every error of a file, each at
file:line:col, and the vars that feed safety gates (`gpus`, the topology domains) are checked
as the inventory loads. Through the CLI, as an operator meets them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetfix.cli import run_cli
from fleetfix.errors import InventoryError
from fleetfix.inventory import load_inventory
from fleetfix.inventory.gate_values import DOMAIN_VARS
from fleetfix.topology import DOMAIN_KINDS

from .support import write

FOUR_MISTAKES = """\
[rack1]
gpu001 gpus=eight rack=
gpu002 k='unterminated
[rack1:vars]
leaf
[rack 2]
gpu003
[rack3]
gpu004 gpus=0
gpu005 gpus=-1
gpu006 gpus=8 rack=r3
"""


def _inventory_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert run_cli(argv) == 1  # inventory errors exit 1, as before
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_every_error_of_an_ini_file_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "hosts.ini", FOUR_MISTAKES)
    err = _inventory_errors(["inventory", "-i", str(path), "--list"], capsys)
    places = re.findall(rf"{re.escape(str(path))}:(\d+):(\d+): ", err)
    assert places == [
        ("2", "8"),  # gpus=eight
        ("2", "19"),  # rack=
        ("3", "1"),  # the unterminated quote
        ("5", "1"),  # a var line without =
        ("6", "1"),  # a section name with a space
        ("9", "8"),  # gpus=0
        ("10", "8"),  # gpus=-1
    ]
    assert "gpus must be a positive whole number" in err and "'eight'" in err
    assert "rack must not be empty" in err
    assert "7 errors; nothing was run" in err
    assert "gpu003" not in err.replace("    gpu003", "")  # the bad section's lines: skipped


def test_every_error_of_a_yaml_file_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
all:
  children:
    rack1:
      vars:
        rack: ""
      hosts:
        gpu001: {gpus: eight}
        gpu[002:004]:
          gpus: 0
        gpu005:
          leaf:
    rack2:
      hosts: [gpu006]
"""
    path = write(tmp_path, "hosts.yml", text)
    err = _inventory_errors(["inventory", "-i", str(path), "--list"], capsys)
    places = re.findall(rf"{re.escape(str(path))}:(\d+):(\d+): ", err)
    assert places == [("5", "9"), ("7", "18"), ("9", "11"), ("11", "11"), ("13", "7")]
    assert err.count("gpus must be a positive whole number") == 2  # a range: told once
    assert "leaf must not be empty" in err and "rack must not be empty" in err
    assert "requires a dictionary" in err
    assert "5 errors; nothing was run" in err


def test_errors_of_every_file_and_vars_file_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "inv/a.ini", "[gpu]\ngpu001 gpus=many\n")
    write(tmp_path, "inv/b.ini", "[gpu:vars]\npdu=\n")
    write(tmp_path, "inv/host_vars/gpu001.yml", "nvlink_domain: ''\ngpus: 4\n")
    err = _inventory_errors(["inventory", "-i", str(tmp_path / "inv"), "--list"], capsys)
    assert f"{tmp_path / 'inv' / 'a.ini'}:2:8: gpus must be" in err
    assert f"{tmp_path / 'inv' / 'b.ini'}:2:1: pdu must not be empty" in err
    host_vars = tmp_path / "inv" / "host_vars" / "gpu001.yml"
    assert f"{host_vars}:1:1: nvlink_domain must not be empty" in err
    assert "3 errors; nothing was run" in err


def test_a_run_refuses_the_inventory_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "hosts.ini", "[gpu]\ngpu001 gpus=eight\ngpu002 spine=\n")
    write(tmp_path, "site.yml", "- hosts: all\n  tasks:\n    - shell: 'true'\n")
    argv = ["run", "site.yml", "-i", "hosts.ini", "--journal", "j.db", "--transport", "local"]
    err = _inventory_errors(argv, capsys)
    assert "hosts.ini:2:8: gpus must be" in err and "hosts.ini:3:8: spine must not be" in err
    assert not (tmp_path / "j.db").exists()
    assert _inventory_errors([*argv, "--list-hosts"], capsys).count("must") == 2


@pytest.mark.parametrize(
    "line",
    [
        "gpu001 gpus=8",
        "gpu001 gpus='8'",
        "gpu001 gpus='{{ expected_gpus }}'",
        "gpu001 rack=r1 leaf=0 rail=rail-3",
        "gpu001 gpus_note=eight note=",  # not a gate var
    ],
)
def test_good_gate_values_load(tmp_path: Path, line: str) -> None:
    inventory = load_inventory([write(tmp_path, "hosts.ini", f"[gpu]\n{line}\n")])
    assert inventory.host_names() == ["gpu001"]


@pytest.mark.parametrize("value", ["eight", "0", "-1", "8.0", "True", "[8]", "''", ""])
def test_bad_gpu_counts_are_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(InventoryError, match="gpus must be a positive whole number") as raised:
        load_inventory([write(tmp_path, "hosts.ini", f"[gpu]\ngpu001 gpus={value}\n")])
    assert str(raised.value.position) == f"{tmp_path / 'hosts.ini'}:2:8"


def test_the_checked_domains_are_the_topology_domains() -> None:
    assert DOMAIN_VARS == DOMAIN_KINDS
