"""make_transport: built-ins by name, options routed, typos caught with a suggestion."""

from __future__ import annotations

import pytest

from fleetfix.errors import UsageError
from fleetfix.transport.fabric import FabricTransport
from fleetfix.transport.local import LocalTransport
from fleetfix.transport.registry import BUILTIN_TRANSPORTS, make_transport, transport_names
from fleetfix.transport.ssh import SSHTransport


async def test_each_builtin_is_made_by_name() -> None:
    made = [make_transport(name) for name in transport_names()]
    try:
        assert [type(t) for t in made] == [SSHTransport, LocalTransport, FabricTransport]
        assert [t.name for t in made] == ["ssh", "local", "fabric"]
    finally:
        for transport in made:
            await transport.aclose()


def test_builtins_are_listed_in_one_tuple() -> None:
    assert transport_names() == [name for name, _module, _cls in BUILTIN_TRANSPORTS]


async def test_options_reach_the_transport() -> None:
    transport = make_transport(
        "ssh", max_handshakes=4, accept_new_host_keys=True, default_user="ops"
    )
    try:
        assert isinstance(transport, SSHTransport)
        assert transport.max_handshakes == 4
        assert transport.accept_new_host_keys
        assert transport.default_user == "ops"
    finally:
        await transport.aclose()


async def test_options_another_transport_takes_are_dropped() -> None:
    transport = make_transport("local", max_handshakes=4, default_user="ops", kill_grace=0.5)

    assert isinstance(transport, LocalTransport)
    assert transport.kill_grace == 0.5
    await transport.aclose()


def test_unknown_transport_suggests_a_close_match() -> None:
    with pytest.raises(UsageError, match="unknown transport 'shh'; did you mean 'ssh'"):
        make_transport("shh")


def test_unknown_transport_without_close_match_lists_the_known() -> None:
    with pytest.raises(UsageError, match="known: ssh, local, fabric"):
        make_transport("carrier-pigeon")


def test_option_no_transport_takes_is_a_typo() -> None:
    with pytest.raises(UsageError, match="'max_handshake'; did you mean 'max_handshakes'"):
        make_transport("ssh", max_handshake=4)
