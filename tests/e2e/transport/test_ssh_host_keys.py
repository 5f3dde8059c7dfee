"""Host key policy of SSHTransport against real servers: known, unknown, changed, accept-new."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import HostKeyError
from fleetfix.transport.ssh import SSHTransport
from tests.support import spec_for
from tests.support.keys import generate_keypair, known_hosts_line, write_known_hosts


@pytest.fixture
async def transports() -> AsyncIterator[list[SSHTransport]]:
    """Make transports with `transports.append(...)`; all are closed at the end."""
    made: list[SSHTransport] = []
    try:
        yield made
    finally:
        for transport in made:
            await transport.aclose()


def _new(transports: list[SSHTransport], **options: Any) -> SSHTransport:
    transport = SSHTransport(**options)
    transports.append(transport)
    return transport


def _stale_known_hosts(server: Any, path: Path, algorithm: str = "ssh-ed25519") -> Path:
    """known_hosts holding a different key (as after a reinstall) for the server."""
    other = generate_keypair(path.parent / "other", "host", algorithm)
    return write_known_hosts(path, [known_hosts_line(server.host, server.port, other.public_line)])


def _server_key_data(server: Any) -> str:
    return str(server.host_key.public_line.split()[1])


async def test_known_host_key_is_accepted(ssh_server: Any, transports: list[SSHTransport]) -> None:
    conn = await _new(transports).connect(spec_for(ssh_server, "gpu001"))

    assert (await conn.run("echo trusted")).stdout == "trusted\n"


@pytest.mark.parametrize("accept_new", [False, True])
async def test_changed_host_key_is_refused_even_with_accept_new(
    ssh_server: Any, transports: list[SSHTransport], tmp_path: Path, accept_new: bool
) -> None:
    known_hosts = _stale_known_hosts(ssh_server, tmp_path / "known_hosts")
    before = known_hosts.read_text()
    spec = spec_for(ssh_server, "gpu001", known_hosts=str(known_hosts))

    with pytest.raises(HostKeyError) as caught:
        await _new(transports, accept_new_host_keys=accept_new).connect(spec)

    message = str(caught.value)
    assert (
        f"host key for gpu001 (127.0.0.1:{ssh_server.port}) does not match known_hosts" in message
    )
    assert str(known_hosts) in message
    assert "ssh-keygen -R" in message
    assert caught.value.host == "gpu001"
    assert known_hosts.read_text() == before


async def test_changed_host_key_type_is_a_mismatch(
    ssh_server: Any, transports: list[SSHTransport], tmp_path: Path
) -> None:
    # known_hosts only has an RSA key; the server only has ed25519: kex fails before validation.
    known_hosts = _stale_known_hosts(ssh_server, tmp_path / "known_hosts", "ssh-rsa")
    spec = spec_for(ssh_server, "gpu001", known_hosts=str(known_hosts))

    with pytest.raises(HostKeyError, match="does not match known_hosts"):
        await _new(transports, accept_new_host_keys=True).connect(spec)


async def test_unknown_host_key_is_refused_by_default(
    ssh_server: Any, transports: list[SSHTransport], tmp_path: Path
) -> None:
    known_hosts = write_known_hosts(tmp_path / "known_hosts", [])
    spec = spec_for(ssh_server, "gpu002", known_hosts=str(known_hosts))

    with pytest.raises(HostKeyError) as caught:
        await _new(transports).connect(spec)

    message = str(caught.value)
    assert f"host key for gpu002 (127.0.0.1:{ssh_server.port}) is not in known_hosts" in message
    assert "--accept-new-host-keys" in message
    assert known_hosts.read_text() == ""


async def test_unknown_host_key_is_accepted_and_recorded_with_accept_new(
    ssh_server: Any, transports: list[SSHTransport], tmp_path: Path
) -> None:
    known_hosts = tmp_path / "fresh" / ".ssh" / "known_hosts"  # nothing exists yet
    spec = spec_for(ssh_server, "gpu003", known_hosts=str(known_hosts))

    conn = await _new(transports, accept_new_host_keys=True).connect(spec)

    assert (await conn.run("echo first contact")).ok
    lines = known_hosts.read_text().splitlines()
    assert len(lines) == 1
    pattern, algorithm, data = lines[0].split()
    assert pattern == f"[127.0.0.1]:{ssh_server.port}"
    assert (algorithm, data) == ("ssh-ed25519", _server_key_data(ssh_server))
    # From now on the key is known: a strict transport trusts it.
    again = await _new(transports).connect(spec)
    assert (await again.run("echo known now")).stdout == "known now\n"


async def test_spec_level_accept_new_is_honoured(
    ssh_server: Any, transports: list[SSHTransport], tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    spec = spec_for(ssh_server, "gpu004", known_hosts=str(known_hosts), accept_new_host_keys=True)

    conn = await _new(transports).connect(spec)

    assert (await conn.run("true")).ok
    assert _server_key_data(ssh_server) in known_hosts.read_text()


async def test_concurrent_first_contacts_record_the_key_once(
    ssh_server: Any, transports: list[SSHTransport], tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    transport = _new(transports, accept_new_host_keys=True)
    specs = [spec_for(ssh_server, f"gpu{i:03}", known_hosts=str(known_hosts)) for i in range(20)]

    conns = await asyncio.gather(*(transport.connect(spec) for spec in specs))

    assert len(conns) == 20
    assert len(known_hosts.read_text().splitlines()) == 1


async def test_transport_known_hosts_is_used_when_the_spec_names_none(
    ssh_server: Any, transports: list[SSHTransport]
) -> None:
    spec = spec_for(ssh_server, "gpu005", known_hosts=None)
    transport = _new(transports, known_hosts=str(ssh_server.known_hosts_path))

    conn = await transport.connect(spec)

    assert (await conn.run("echo ok")).stdout == "ok\n"
