"""ProxyJump and ProxyCommand through a second real server (asyncssh tunnel, OpenSSH ssh -W)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import HostKeyError, UnreachableError
from fleetfix.transport.base import ConnectionSpec
from fleetfix.transport.ssh import SSHTransport
from tests.support import free_port, spec_for
from tests.support.asyncssh_server import AsyncSSHServer
from tests.support.keys import write_known_hosts
from tests.support.sshd import OpenSSHServer

pytestmark = pytest.mark.sshd


@pytest.fixture
async def transport() -> AsyncIterator[SSHTransport]:
    ssh = SSHTransport()
    try:
        yield ssh
    finally:
        await ssh.aclose()


def _behind(target: Any, jumps: list[Any], args: str, tmp_path: Path, name: str) -> ConnectionSpec:
    """A spec for `target` trusting every server's host key and holding every client key."""
    servers = [target, *jumps]
    known_hosts = write_known_hosts(
        tmp_path / "known_hosts_all",
        [line for s in servers for line in s.known_hosts_path.read_text().splitlines()],
    )
    keys = tuple(str(s.client_key_path) for s in servers)
    return spec_for(
        target, name, known_hosts=str(known_hosts), private_keys=keys, ssh_common_args=args
    )


def _hop(server: Any) -> str:
    return f"{server.user}@127.0.0.1:{server.port}"


async def test_proxy_jump_option_reaches_sshd_through_asyncssh(
    transport: SSHTransport,
    asyncssh_server: AsyncSSHServer,
    openssh_server: OpenSSHServer,
    tmp_path: Path,
) -> None:
    args = f"-o ProxyJump={_hop(asyncssh_server)}"
    spec = _behind(openssh_server, [asyncssh_server], args, tmp_path, "gpu001")

    conn = await transport.connect(spec)
    result = await conn.run("echo behind the bastion")

    assert result.stdout == "behind the bastion\n"
    assert asyncssh_server.forwarded == [("127.0.0.1", openssh_server.port)]


async def test_hosts_behind_one_jump_share_one_bastion_connection(
    transport: SSHTransport,
    asyncssh_server: AsyncSSHServer,
    openssh_server: OpenSSHServer,
    tmp_path: Path,
) -> None:
    args = f"-J {_hop(asyncssh_server)}"
    specs = [
        _behind(openssh_server, [asyncssh_server], args, tmp_path, f"gpu{i:03}") for i in range(5)
    ]

    results = [await (await transport.connect(spec)).run("echo ok") for spec in specs]

    assert all(r.stdout == "ok\n" for r in results)
    assert asyncssh_server.connections_total == 1
    assert len(asyncssh_server.forwarded) == 5


async def test_two_hops_reach_an_asyncssh_target_through_sshd(
    transport: SSHTransport,
    asyncssh_server: AsyncSSHServer,
    openssh_server: OpenSSHServer,
    tmp_path: Path,
) -> None:
    async with AsyncSSHServer(tmp_path / "second-jump") as second:
        args = f"-J {_hop(openssh_server)},{_hop(second)}"
        spec = _behind(asyncssh_server, [openssh_server, second], args, tmp_path, "gpu002")

        conn = await transport.connect(spec)
        result = await conn.run("echo two hops")

        assert result.stdout == "two hops\n"
        assert second.forwarded == [("127.0.0.1", asyncssh_server.port)]
        assert len(asyncssh_server.commands) == 1


async def test_unreachable_jump_host_names_the_jump(
    transport: SSHTransport, openssh_server: OpenSSHServer, tmp_path: Path
) -> None:
    dead_port = free_port()
    args = f"-o ProxyJump=127.0.0.1:{dead_port}"
    spec = _behind(openssh_server, [], args, tmp_path, "gpu003")

    with pytest.raises(UnreachableError) as caught:
        await transport.connect(spec)

    assert caught.value.host == "gpu003"
    assert f"via jump host 127.0.0.1:{dead_port}" in str(caught.value)
    assert "connection refused" in str(caught.value)


async def test_unknown_jump_host_key_is_a_host_key_error(
    transport: SSHTransport,
    asyncssh_server: AsyncSSHServer,
    openssh_server: OpenSSHServer,
    tmp_path: Path,
) -> None:
    # known_hosts trusts the target's port only, not the jump host.
    target_key = openssh_server.host_key.public_line.split()
    known_hosts = write_known_hosts(
        tmp_path / "known_hosts", [f"[127.0.0.1]:{openssh_server.port} {' '.join(target_key[:2])}"]
    )
    spec = spec_for(
        openssh_server,
        "gpu004",
        known_hosts=str(known_hosts),
        private_keys=(str(openssh_server.client_key_path), str(asyncssh_server.client_key_path)),
        ssh_common_args=f"-J {_hop(asyncssh_server)}",
    )

    with pytest.raises(HostKeyError, match=r"gpu004: via jump host .*is not in known_hosts"):
        await transport.connect(spec)
    assert asyncssh_server.forwarded == []


async def test_closed_target_behind_a_working_jump(
    transport: SSHTransport, asyncssh_server: AsyncSSHServer
) -> None:
    dead_port = free_port()
    spec = spec_for(
        asyncssh_server, "gpu005", port=dead_port, ssh_common_args=f"-J {_hop(asyncssh_server)}"
    )

    with pytest.raises(
        UnreachableError, match=f"gpu005: cannot open a tunnel to 127.0.0.1:{dead_port}"
    ):
        await transport.connect(spec)


async def test_proxy_command_runs_openssh_client_through_the_jump(
    transport: SSHTransport,
    asyncssh_server: AsyncSSHServer,
    openssh_server: OpenSSHServer,
    tmp_path: Path,
) -> None:
    ssh = shutil.which("ssh")
    assert ssh is not None, "the OpenSSH client comes with openssh-server"
    jump = asyncssh_server
    proxy = (
        f"{ssh} -F /dev/null -W %h:%p -p {jump.port} -i {jump.client_key_path} "
        f"-o UserKnownHostsFile={jump.known_hosts_path} -o StrictHostKeyChecking=yes "
        f"-o BatchMode=yes {jump.user}@127.0.0.1"
    )
    spec = _behind(openssh_server, [], f'-o ProxyCommand="{proxy}"', tmp_path, "gpu006")

    conn = await transport.connect(spec)
    result = await conn.run("echo via proxy command")

    assert result.stdout == "via proxy command\n"
    assert jump.forwarded == [("127.0.0.1", openssh_server.port)]
