"""ansible.cfg and ANSIBLE_* variables: read as ansible-config reads them, applied with Ansible's
precedence (command line, environment, file, fleetfix's default)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleetfix.ansible_cfg import find_config_file, read_settings
from fleetfix.cli import build_parser, run_cli
from fleetfix.cli.ansible_options import resolve_ansible_options
from fleetfix.runtime import spec_defaults
from fleetfix.transport.spec import build_spec

ANSIBLE_CONFIG_TOOL = Path(sys.executable).parent / "ansible-config"
ANSIBLE_NAMES = {
    "forks": "DEFAULT_FORKS",
    "inventory": "DEFAULT_HOST_LIST",
    "remote_user": "DEFAULT_REMOTE_USER",
    "private_key_file": "DEFAULT_PRIVATE_KEY_FILE",
    "timeout": "DEFAULT_TIMEOUT",
    "host_key_checking": "HOST_KEY_CHECKING",
}
ALL_SIX = """\
[defaults]
forks = 7
inventory = hosts.ini, more/cluster.yml
remote_user = "ops"
private_key_file = ~/.ssh/fleet_key
timeout = 33
host_key_checking = no
"""


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private working directory, a HOME of its own and no ANSIBLE_* in the environment."""
    work = tmp_path / "work"
    (tmp_path / "home").mkdir()
    work.mkdir(mode=0o755)
    for name in [n for n in os.environ if n.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(work)
    return work


def ansible_sees(cwd: Path) -> dict[str, Any]:
    """ansible-config's resolved values that did not come from its defaults (and CONFIG_FILE)."""
    dump = subprocess.run(
        [str(ANSIBLE_CONFIG_TOOL), "dump", "--format", "json"],
        cwd=cwd,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        check=True,
    )
    entries = [e for e in json.loads(dump.stdout) if "name" in e]
    return {e["name"]: e["value"] for e in entries if e["origin"] != "default"}


def fleetfix_sees(cwd: Path) -> dict[str, Any]:
    settings = read_settings(os.environ, cwd)
    found = {}
    for key, name in ANSIBLE_NAMES.items():
        setting = settings.get(key)
        if setting is not None:
            value = setting.value
            found[name] = list(value) if isinstance(value, tuple) else value
    return found


@pytest.mark.parametrize(
    ("config", "env"),
    [
        pytest.param(ALL_SIX, {}, id="all-six-from-the-file"),
        pytest.param(
            ALL_SIX,
            {
                "ANSIBLE_FORKS": "9",
                "ANSIBLE_INVENTORY": "a.ini,b.ini",
                "ANSIBLE_REMOTE_USER": "envuser",
                "ANSIBLE_PRIVATE_KEY_FILE": "keys/id",
                "ANSIBLE_TIMEOUT": "5",
                "ANSIBLE_HOST_KEY_CHECKING": "off",
            },
            id="environment-beats-the-file",
        ),
        pytest.param(ALL_SIX, {"ANSIBLE_FORKS": "", "ANSIBLE_TIMEOUT": ""}, id="empty-env"),
        pytest.param("", {"ANSIBLE_HOST_KEY_CHECKING": "True"}, id="env-only"),
        pytest.param("[defaults]\nhost_key_checking = on\n", {}, id="bool-on"),
        pytest.param("[defaults]\nhost_key_checking = 0\n", {}, id="bool-0"),
        pytest.param("[defaults]\nhost_key_checking = F\n", {}, id="bool-F"),
        pytest.param("[defaults]\nhost_key_checking = yes\n", {}, id="bool-yes"),
        pytest.param("[defaults]\nforks = 7.0\ntimeout=12 ; why\n", {}, id="numbers-comment"),
        pytest.param(
            "# site\n[defaults]\nbogus = 1\nFORKS = 4\n[ssh_connection]\npipelining = True\n",
            {},
            id="unknown-keys-ignored",
        ),
        pytest.param("[defaults]\ninventory = /abs/inv,rel/../inv2\n", {}, id="paths"),
    ],
)
def test_fleetfix_reads_what_ansible_config_reads(
    place: Path, config: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if config:
        (place / "ansible.cfg").write_text(config)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    expected = {k: v for k, v in ansible_sees(place).items() if k in ANSIBLE_NAMES.values()}
    assert fleetfix_sees(place) == expected


def test_the_file_is_found_where_ansible_finds_it(
    place: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home_cfg = tmp_path / "home" / ".ansible.cfg"
    home_cfg.write_text("[defaults]\nforks = 2\n")
    (place / "ansible.cfg").write_text("[defaults]\nforks = 3\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "ansible.cfg").write_text("[defaults]\nforks = 4\n")

    def both() -> tuple[Path | None, Path]:
        ours = find_config_file(os.environ, place, system=tmp_path / "no-system.cfg")
        return ours, Path(ansible_sees(place)["CONFIG_FILE"])

    assert both() == (place / "ansible.cfg", place / "ansible.cfg")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(elsewhere))  # a directory: its ansible.cfg
    assert both() == (elsewhere / "ansible.cfg", elsewhere / "ansible.cfg")
    monkeypatch.delenv("ANSIBLE_CONFIG")
    place.chmod(0o777)  # anyone could have written ./ansible.cfg: not read
    try:
        assert both() == (home_cfg, home_cfg)
    finally:
        place.chmod(0o755)


def resolved(*argv: str) -> argparse.Namespace:
    args = build_parser().parse_args(["run", "pb.yml", *argv])
    resolve_ansible_options(args)
    return args


def connection(args: argparse.Namespace) -> tuple[Any, ...]:
    return (args.forks, args.user, args.private_key, args.connect_timeout, args.inventory)


def test_command_line_beats_environment_beats_file_beats_default(
    place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert connection(resolved("-i", "x.ini")) == (50, None, [], 20.0, ["x.ini"])
    assert not resolved("-i", "x.ini").accept_new_host_keys
    (place / "ansible.cfg").write_text(ALL_SIX)
    key = str(Path.home() / ".ssh" / "fleet_key")
    inventory = [str(place / "hosts.ini"), str(place / "more" / "cluster.yml")]
    assert connection(resolved()) == (7, "ops", [key], 33.0, inventory)
    assert resolved().accept_new_host_keys
    monkeypatch.setenv("ANSIBLE_FORKS", "9")
    monkeypatch.setenv("ANSIBLE_REMOTE_USER", "envuser")
    monkeypatch.setenv("ANSIBLE_TIMEOUT", "5")
    monkeypatch.setenv("ANSIBLE_INVENTORY", "env.ini")
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "yes")
    assert connection(resolved()) == (9, "envuser", [key], 5.0, [str(place / "env.ini")])
    assert not resolved().accept_new_host_keys
    given = resolved("-f", "3", "-u", "cli", "--private-key", "k", "-T", "2", "-i", "c.ini")
    assert connection(given) == (3, "cli", ["k"], 2.0, ["c.ini"])
    assert resolved("--accept-new-host-keys").accept_new_host_keys


def test_the_connection_spec_gets_user_key_and_timeout_from_the_file(place: Path) -> None:
    (place / "ansible.cfg").write_text(ALL_SIX)
    spec = build_spec("gpu001", {}, spec_defaults(resolved()))
    assert (spec.user, spec.connect_timeout, spec.accept_new_host_keys) == ("ops", 33.0, True)
    assert spec.private_keys == (str(Path.home() / ".ssh" / "fleet_key"),)
    # Inventory vars still beat ansible.cfg, as they beat -u in Ansible.
    assert build_spec("gpu001", {"ansible_user": "inv"}, spec_defaults(resolved())).user == "inv"


@pytest.mark.parametrize(
    ("config", "line", "words"),
    [
        ("[defaults]\nremote_user = ops\nforks = abc\n", 3, "forks = 'abc' is not a whole number"),
        ("[defaults]\nforks = 0\n", 2, "at least 1"),
        ("[defaults]\n\ntimeout = 1.5\n", 3, "timeout = '1.5'"),
        ("[defaults]\nhost_key_checking = maybe\n", 2, "host_key_checking = 'maybe' is not"),
        ("forks = 3\n", 1, "not an ansible.cfg Ansible can read"),
        ("[defaults]\nforks = 3\nforks = 4\n", 3, "not an ansible.cfg Ansible can read"),
    ],
)
def test_a_bad_value_is_refused_with_its_place(
    place: Path, config: str, line: int, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (place / "ansible.cfg").write_text(config)
    assert run_cli(["run", "pb.yml", "-i", "x.ini"]) == 1
    error = capsys.readouterr().err
    assert f"{place / 'ansible.cfg'}:{line}:" in error
    assert words in error


def test_a_bad_environment_value_is_a_bad_option(
    place: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANSIBLE_FORKS", "abc")
    assert run_cli(["run", "pb.yml", "-i", "x.ini"]) == 5
    assert "ANSIBLE_FORKS='abc' is not a whole number" in capsys.readouterr().err


def test_no_inventory_anywhere_is_a_bad_option(
    place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["run", "pb.yml"]) == 5
    assert "-i/--inventory (or `inventory` in ansible.cfg" in capsys.readouterr().err


LOCAL_PLAYBOOK = "- hosts: gpu\n  tasks:\n    - shell: touch ran-{{ inventory_hostname }}\n"


def test_a_run_takes_its_inventory_and_forks_from_ansible_cfg(
    place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (place / "inv").mkdir()
    (place / "inv" / "hosts.ini").write_text(
        "[gpu]\nnode1 ansible_connection=local\nnode2 ansible_connection=local\n"
    )
    (place / "ansible.cfg").write_text(
        "[defaults]\ninventory = inv/hosts.ini\nforks = 1\nremote_user = ops\n"
        "[ssh_connection]\npipelining = True\nssh_args = -o ControlMaster=auto\n"
    )
    (place / "pb.yml").write_text(LOCAL_PLAYBOOK)
    assert run_cli(["run", "pb.yml", "--list-hosts", "-v"]) == 0
    out, err = capsys.readouterr()
    assert "hosts (2):\n      node1\n      node2" in out
    assert f"Using {place / 'ansible.cfg'} as config file" in err
    assert "ansible.cfg:6: pipelining ignored" in err
    assert "ssh_args not applied" in err
    assert run_cli(["run", "pb.yml", "--yes", "--journal", str(place / "j.sqlite")]) == 0
    assert (place / "ran-node1").exists() and (place / "ran-node2").exists()
    assert resolved().forks == 1


def test_inventory_command_reads_ansible_cfg(
    place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (place / "hosts.ini").write_text("[gpu]\nnode1\n")
    (place / "ansible.cfg").write_text("[defaults]\ninventory = hosts.ini\n")
    assert run_cli(["inventory", "--list"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu"]["hosts"] == ["node1"]
