"""Inventory vars -> ConnectionSpec, and the OpenSSH options read from ssh args."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import InventoryError
from fleetfix.transport.base import DEFAULT_CONNECT_TIMEOUT
from fleetfix.transport.spec import (
    JumpHost,
    SpecDefaults,
    build_spec,
    parse_ssh_args,
    transport_for,
)

HOME = str(Path.home())


def test_bare_host_uses_its_name_and_the_defaults() -> None:
    spec = build_spec("gpu001", {})

    assert spec.name == "gpu001"
    assert spec.address == "gpu001"
    assert spec.port == 22
    assert spec.user is None
    assert spec.private_keys == ()
    assert spec.password is None
    assert spec.connect_timeout == DEFAULT_CONNECT_TIMEOUT
    assert spec.known_hosts is None
    assert not spec.accept_new_host_keys
    assert dict(spec.extra) == {}


def test_ansible_connection_vars_are_mapped() -> None:
    host_vars = {
        "ansible_host": "10.0.0.7",
        "ansible_port": 2222,
        "ansible_user": "ops",
        "ansible_ssh_private_key_file": "~/.ssh/fleet",
        "ansible_password": "s3cret",
        "ansible_timeout": 7,
    }

    spec = build_spec("gpu001", host_vars)

    assert (spec.address, spec.port, spec.user) == ("10.0.0.7", 2222, "ops")
    assert spec.private_keys == (f"{HOME}/.ssh/fleet",)
    assert spec.password == "s3cret"
    assert spec.connect_timeout == 7.0


def test_ansible_ssh_pass_and_string_port_are_accepted() -> None:
    spec = build_spec("gpu002", {"ansible_ssh_pass": "pw", "ansible_port": "2200"})

    assert (spec.password, spec.port) == ("pw", 2200)


def test_fleetfix_vars_win_over_ansible_vars() -> None:
    host_vars = {
        "ansible_host": "10.0.0.7",
        "fleetfix_host": "10.9.9.9",
        "ansible_port": 22,
        "fleetfix_port": 2022,
        "ansible_user": "ops",
        "fleetfix_user": "fleet",
        "ansible_ssh_private_key_file": "/keys/ansible",
        "fleetfix_private_key_file": "/keys/fleetfix",
        "ansible_ssh_common_args": "-o ProxyJump=old-bastion",
        "fleetfix_ssh_common_args": "-o ProxyJump=new-bastion",
        "ansible_timeout": 5,
        "fleetfix_timeout": 9,
    }

    spec = build_spec("gpu003", host_vars)

    assert (spec.address, spec.port, spec.user) == ("10.9.9.9", 2022, "fleet")
    assert spec.private_keys == ("/keys/fleetfix",)
    assert spec.ssh_common_args == "-o ProxyJump=new-bastion"
    assert spec.connect_timeout == 9.0


def test_inventory_vars_win_over_command_line_defaults() -> None:
    cli = SpecDefaults(user="cli-user", private_keys=("/keys/cli",), port=2201, connect_timeout=3.0)

    from_cli = build_spec("gpu004", {}, cli)
    from_vars = build_spec("gpu004", {"ansible_user": "ops", "ansible_port": 22}, cli)

    assert (from_cli.user, from_cli.private_keys, from_cli.port) == (
        "cli-user",
        ("/keys/cli",),
        2201,
    )
    assert from_cli.connect_timeout == 3.0
    assert (from_vars.user, from_vars.port) == ("ops", 22)
    assert from_vars.private_keys == ("/keys/cli",)


def test_common_and_extra_args_are_joined_and_read() -> None:
    host_vars = {
        "ansible_ssh_common_args": "-J admin@bastion:2222",
        "ansible_ssh_extra_args": "-o StrictHostKeyChecking=accept-new "
        "-o UserKnownHostsFile=~/.ssh/fleet_known_hosts",
    }

    spec = build_spec("gpu005", host_vars)

    assert spec.ssh_common_args.startswith("-J admin@bastion:2222 -o StrictHostKeyChecking")
    assert spec.accept_new_host_keys
    assert spec.known_hosts == f"{HOME}/.ssh/fleet_known_hosts"


@pytest.mark.parametrize(
    ("value", "accept_new"),
    [("no", True), ("accept-new", True), ("off", True), ("yes", False), ("ask", False)],
)
def test_strict_host_key_checking_maps_to_accept_new(value: str, accept_new: bool) -> None:
    cli = SpecDefaults(accept_new_host_keys=not accept_new)
    host_vars = {"ansible_ssh_common_args": f"-o StrictHostKeyChecking={value}"}

    assert build_spec("gpu006", host_vars, cli).accept_new_host_keys is accept_new


def test_fleetfix_accept_new_var_wins_over_ssh_args() -> None:
    host_vars = {
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no",
        "fleetfix_accept_new_host_keys": "false",
        "fleetfix_known_hosts": "/etc/fleet/known_hosts",
    }

    spec = build_spec("gpu007", host_vars)

    assert not spec.accept_new_host_keys
    assert spec.known_hosts == "/etc/fleet/known_hosts"


def test_ssh_args_can_carry_identity_port_and_timeout() -> None:
    host_vars = {"ansible_ssh_common_args": "-i /keys/a -p 2022 -o ConnectTimeout=4"}

    spec = build_spec("gpu008", host_vars)

    assert spec.private_keys == ("/keys/a",)
    assert spec.port == 2022
    assert spec.connect_timeout == 4.0


@pytest.mark.parametrize(
    ("connection", "transport"),
    [("local", "local"), ("paramiko", "fabric"), ("ssh", ""), ("smart", ""), ("LOCAL", "local")],
)
def test_connection_var_names_the_transport(connection: str, transport: str) -> None:
    spec = build_spec("gpu009", {"ansible_connection": connection})

    assert spec.extra.get("connection", "") == transport
    assert transport_for("gpu009", {"ansible_connection": connection}, "ssh") == (
        transport or "ssh"
    )


def test_fleetfix_connection_wins() -> None:
    host_vars = {"ansible_connection": "ssh", "fleetfix_connection": "local"}

    assert build_spec("ctl", host_vars).extra["connection"] == "local"


@pytest.mark.parametrize(
    ("host_vars", "message"),
    [
        ({"ansible_port": "ssh"}, "ansible_port='ssh' is not a port number"),
        ({"ansible_port": 70000}, "is not a port number"),
        ({"ansible_port": True}, "is not a port number"),
        ({"ansible_timeout": "soon"}, "ansible_timeout='soon' is not a number of seconds"),
        ({"ansible_timeout": 0}, "is not a positive number"),
        ({"ansible_user": ["a", "b"]}, "ansible_user=['a', 'b'] is not a string"),
        ({"fleetfix_accept_new_host_keys": "maybe"}, "is not a boolean"),
        ({"ansible_connection": "docker"}, "unsupported connection 'docker'"),
        ({"ansible_ssh_common_args": "-o 'ProxyCommand=nc"}, "cannot read ssh args"),
    ],
)
def test_bad_connection_vars_are_inventory_errors(host_vars: dict[str, Any], message: str) -> None:
    with pytest.raises(InventoryError, match="host gpu010: ") as caught:
        build_spec("gpu010", host_vars)

    assert message in str(caught.value)


def test_parse_ssh_args_reads_every_spelling() -> None:
    args = parse_ssh_args(
        "-o ProxyCommand='ssh -W %h:%p bastion' -oUser=ops -o 'Port 2200' "
        "-J a@j1,j2:2022 -C -q -iKEY -o IdentityFile=/k2 -o ServerAliveInterval=5"
    )

    assert args.proxy_command == "ssh -W %h:%p bastion"
    assert args.proxy_jump == ("a@j1", "j2:2022")
    assert args.user == "ops"
    assert args.port == 2200
    assert args.identity_files == ("KEY", "/k2")
    assert args.option("serveraliveinterval") == "5"
    assert args.option("ServerAliveInterval") == "5"


def test_first_value_of_an_option_wins_like_ssh() -> None:
    args = parse_ssh_args("-o ProxyJump=first -o ProxyJump=second")

    assert args.proxy_jump == ("first",)


def test_proxy_jump_none_and_proxy_command_none_mean_no_proxy() -> None:
    args = parse_ssh_args("-o ProxyJump=none -o ProxyCommand=none")

    assert args.proxy_jump == ()
    assert args.proxy_command is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bastion", JumpHost("bastion", 22, None)),
        ("ops@bastion:2222", JumpHost("bastion", 2222, "ops")),
        ("ssh://ops@bastion:2222", JumpHost("bastion", 2222, "ops")),
        ("[fd00::1]:2200", JumpHost("fd00::1", 2200, None)),
        ("fd00::1", JumpHost("fd00::1", 22, None)),
    ],
)
def test_jump_host_parsing(text: str, expected: JumpHost) -> None:
    assert JumpHost.parse(text) == expected


@pytest.mark.parametrize("text", ["", "ops@", "host:port"])
def test_malformed_jump_hosts_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="malformed"):
        JumpHost.parse(text)
