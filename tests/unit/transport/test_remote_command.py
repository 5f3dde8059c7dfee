"""The remote command wrapper, run through a real /bin/sh here: env, PID line, timeout, kill."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from fleetfix.errors import TransportError
from fleetfix.transport.base import ConnectionSpec
from fleetfix.transport.local import LocalConnection, LocalTransport
from fleetfix.transport.remote import (
    check_env,
    kill_command,
    killed_by_timeout,
    proxy_command,
    remote_command,
    split_pid_line,
)
from fleetfix.transport.ssh import preferred_host_key_algs
from tests.support import read_pid

SPEC = ConnectionSpec(name="gpu001", address="10.0.0.1", port=2222, user="ops")


@pytest.fixture
async def shell() -> AsyncIterator[LocalConnection]:
    """A local /bin/sh standing in for the remote user's shell."""
    transport = LocalTransport()
    try:
        yield await transport.connect(ConnectionSpec(name="sh", address="localhost"))
    finally:
        await transport.aclose()


async def test_env_values_survive_any_quoting(shell: LocalConnection) -> None:
    env = {"A": "it's", "B": '"$HOME" `id` $(id) \\n ; exit 3', "C": ""}
    wire = remote_command('printf "%s|%s|%s" "$A" "$B" "$C"', 30, env)

    result = await shell.run(wire)

    assert result.stdout == f"{env['A']}|{env['B']}|"
    assert result.rc == 0


async def test_pid_line_names_the_process_group_leader(shell: LocalConnection) -> None:
    # The command runs under `timeout`, whose PID the wrapper announced: it is $PPID inside.
    result = await shell.run(remote_command("echo $PPID; echo real error >&2", 30, {}))

    pid, stderr = split_pid_line(result.stderr)
    assert pid == int(result.stdout)
    assert stderr == "real error\n"


async def test_remote_timeout_kills_and_reports_124(shell: LocalConnection) -> None:
    result = await shell.run(remote_command("sleep 30", 1, {}), timeout=20)

    assert result.rc == 124
    assert killed_by_timeout(result.rc, result.duration, 1)
    assert result.duration < 10  # killed at 1s, not after the 30s sleep


async def test_hosts_without_timeout_still_run_the_command(
    shell: LocalConnection, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sh").symlink_to("/bin/sh")

    result = await shell.run(remote_command("echo ran", 30, {"PATH": str(bin_dir)}))

    assert (result.rc, result.stdout) == (0, "ran\n")


async def test_kill_command_ends_the_announced_group(
    shell: LocalConnection, tmp_path: Path
) -> None:
    pid_file = tmp_path / "leader.pid"
    wire = remote_command(f"echo $$ > {pid_file}; sleep 600 & wait", None, {})
    running = asyncio.ensure_future(shell.run(wire, timeout=60))
    pid = await read_pid(pid_file)

    killer = await shell.run(kill_command(pid))
    result = await asyncio.wait_for(running, 10)

    assert killer.rc == 0
    assert result.rc == -9


async def test_kill_command_of_a_gone_process_is_quiet(shell: LocalConnection) -> None:
    gone = await shell.run("echo $$")

    result = await shell.run(kill_command(int(gone.stdout)))

    assert (result.rc, result.stderr) == (0, "")


@pytest.mark.parametrize(
    ("stderr", "pid", "rest"),
    [
        ("fleetfix-pid:42\n", 42, ""),
        ("fleetfix-pid:42\nboom\n", 42, "boom\n"),
        ("rc noise\nfleetfix-pid:7\nboom\n", 7, "rc noise\nboom\n"),
        ("no marker\n", None, "no marker\n"),
        ("text fleetfix-pid:9\n", None, "text fleetfix-pid:9\n"),
        ("fleetfix-pid:x\n", None, ""),
    ],
)
def test_split_pid_line(stderr: str, pid: int | None, rest: str) -> None:
    assert split_pid_line(stderr) == (pid, rest)


def test_killed_by_timeout_needs_both_the_deadline_and_the_status() -> None:
    assert killed_by_timeout(124, 10.0, 10)
    assert killed_by_timeout(-9, 12.0, 10)
    assert not killed_by_timeout(124, 2.0, 10)
    assert not killed_by_timeout(1, 12.0, 10)
    assert not killed_by_timeout(124, 12.0, None)


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "", "A=B", "A;id"])
def test_env_names_a_shell_cannot_export_are_refused(name: str) -> None:
    with pytest.raises(TransportError, match="gpu001: invalid environment variable name"):
        check_env("gpu001", {name: "x"})


def test_valid_env_names_pass() -> None:
    assert check_env("gpu001", {"_A1": "x", "CUDA_VISIBLE_DEVICES": "0"}) == {
        "_A1": "x",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    assert check_env("gpu001", None) == {}


def test_proxy_command_tokens_are_filled_in() -> None:
    command = proxy_command("ssh -W %h:%p -l %r jump # %n 100%%", SPEC, None)

    assert command == "ssh -W 10.0.0.1:2222 -l ops jump # gpu001 100%"


def test_known_key_types_are_offered_first() -> None:
    rsa = asyncssh.generate_private_key("ssh-rsa")

    algorithms = preferred_host_key_algs({rsa})

    assert algorithms[: len(rsa.sig_algorithms)] == [a.decode() for a in rsa.sig_algorithms]
    assert "ssh-ed25519" in algorithms
    assert len(algorithms) == len(set(algorithms))


def test_wrapper_is_plain_posix_sh() -> None:
    wire = remote_command("true", 5, {"K": "v"})

    assert wire.startswith("export K=v; printf 'fleetfix-pid:%s\\n' \"$$\" >&2; ")
    assert "exec timeout -k 5 5 sh -c true" in wire
