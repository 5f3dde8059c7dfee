"""Host shards over real SSH: connections in worker processes, probes parsed there, Ctrl-C
kills the command on the host, a dead worker is an unreachable host, not a hang."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import UnreachableError
from fleetfix.probes import probe_registry
from fleetfix.probes.base import to_data
from fleetfix.results import excerpt
from fleetfix.transport.shard_policy import Saturation
from fleetfix.transport.shards import ShardedTransport, WorkerOptions
from fleetfix.transport.ssh import SSHTransport
from tests.support import eventually, process_alive, read_pid, spec_for

SAMPLES = Path(__file__).parents[2] / "fixtures" / "samples"
XML_SAMPLE = next(iter(sorted((SAMPLES / "nvidia-smi-xml").glob("*.xml"))))


@pytest.fixture
async def sharded() -> AsyncIterator[ShardedTransport]:
    transport = ShardedTransport(SSHTransport(), WorkerOptions("ssh", {}), workers=1)
    try:
        yield transport
    finally:
        await transport.aclose()


async def _on_worker(transport: ShardedTransport, server: Any) -> Any:
    """The second host: the first goes to the main process without waiting for the worker,
    the next (once the worker has started) to the idle worker."""
    first = await transport.connect(spec_for(server, "host0"))
    await transport.started()
    second = await transport.connect(spec_for(server, "host1"))
    assert type(first).__name__ == "_LocalShardConnection"
    assert type(second).__name__ == "_WorkerConnection"
    return second


async def test_hosts_are_placed_by_load_main_process_weighted_half(ssh_server: Any) -> None:
    transport = ShardedTransport(SSHTransport(), WorkerOptions("ssh", {}), workers=2)
    try:
        await transport.connect(spec_for(ssh_server, "host0"))
        await transport.started()
        for number in range(1, 10):
            await transport.connect(spec_for(ssh_server, f"host{number}"))

        assert [w.connections for w in transport.workers] == [4, 4]
    finally:
        await transport.aclose()


async def test_worker_runs_commands_and_parses_probes_where_they_ran(
    sharded: ShardedTransport, ssh_server: Any
) -> None:
    conn = await _on_worker(sharded, ssh_server)
    probe = probe_registry().get("nvidia_smi")

    plain = await conn.run("echo out; echo err >&2; exit 3")
    probed = await conn.run_probe(f"cat {XML_SAMPLE}", probe, timeout=30)

    assert (plain.rc, plain.stdout, plain.stderr) == (3, "out\n", "err\n")
    assert probed.ok and probed.parsed is not None and probed.parsed.error is None
    text = XML_SAMPLE.read_text()
    expected = probe.parse(text)
    assert probed.parsed.facts == expected
    assert probed.parsed.data == to_data(expected)
    # Parsed, the output crosses as the journal's excerpt, with its true length.
    assert probed.stdout == excerpt(text) and f"[{len(text)} chars" in probed.stdout
    assert sharded.workers[0].connections >= 1


async def test_garbage_is_a_parse_error_from_the_worker(
    sharded: ShardedTransport, ssh_server: Any
) -> None:
    conn = await _on_worker(sharded, ssh_server)

    probed = await conn.run_probe("echo not xml at all", probe_registry().get("nvidia_smi"))

    assert probed.parsed is not None and probed.parsed.facts is None
    assert probed.parsed.error is not None and "nvidia_smi" in probed.parsed.error


async def test_cancel_kills_the_command_on_the_host(
    sharded: ShardedTransport, ssh_server: Any, tmp_path: Path
) -> None:
    conn = await _on_worker(sharded, ssh_server)
    pid_file = tmp_path / "pid"
    running = asyncio.ensure_future(conn.run(f"echo $$ > {pid_file}; exec sleep 60", timeout=120))
    pid = await read_pid(pid_file)

    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    assert await eventually(lambda: not process_alive(pid), 20)


async def test_a_dead_worker_is_an_unreachable_host_not_a_hang(
    sharded: ShardedTransport, ssh_server: Any, tmp_path: Path
) -> None:
    conn = await _on_worker(sharded, ssh_server)
    pid_file = tmp_path / "pid"
    running = asyncio.ensure_future(conn.run(f"echo $$ > {pid_file}; exec sleep 60", timeout=120))
    await read_pid(pid_file)

    os.kill(sharded.workers[0].process.pid, signal.SIGKILL)

    with pytest.raises(UnreachableError, match=r"shard worker 0 .* died"):
        await asyncio.wait_for(running, 30)
    with pytest.raises(UnreachableError, match="died"):
        await conn.run("true")


async def test_aclose_ends_every_worker(ssh_server: Any) -> None:
    transport = ShardedTransport(SSHTransport(), WorkerOptions("ssh", {}), workers=2)
    await _on_worker(transport, ssh_server)
    processes = [w.process for w in transport.workers]

    await transport.aclose()

    assert [p.returncode for p in processes] == [0, 0]


async def test_unreachable_host_on_a_worker_keeps_its_message(
    sharded: ShardedTransport, ssh_server: Any
) -> None:
    await _on_worker(sharded, ssh_server)
    worker = sharded.workers[0]

    with pytest.raises(UnreachableError) as caught:
        await worker.connect(spec_for(ssh_server, "gpu404", user="fleetfix-no-such-user"))

    assert caught.value.host == "gpu404"
    assert "authentication failed" in caught.value.message


class _AlwaysSaturated(Saturation):
    """A reading that says the main process is the bottleneck in every window."""

    def sample(self, window: float, arriving: bool) -> bool:
        return arriving


async def test_no_worker_delays_the_first_connection(ssh_server: Any) -> None:
    transport = ShardedTransport(SSHTransport(), WorkerOptions("ssh", {}), workers=1)
    try:
        first = await transport.connect(spec_for(ssh_server, "host0"))

        assert type(first).__name__ == "_LocalShardConnection"
        assert transport.workers == [], "the first host waited for the worker to start"
        assert (await first.run("echo here")).stdout == "here\n"
    finally:
        await transport.aclose()


async def test_a_saturated_controller_grows_a_worker_that_takes_new_hosts(
    ssh_server: Any,
) -> None:
    transport = ShardedTransport(
        SSHTransport(),
        WorkerOptions("ssh", {}),
        grow_to=1,
        saturation=_AlwaysSaturated(),
        window=0.05,
    )
    try:
        number = 0
        while not transport.workers:  # hosts keep arriving until the worker is up
            await transport.connect(spec_for(ssh_server, f"host{number}"))
            number += 1
            await asyncio.sleep(0.05)
        later = await transport.connect(spec_for(ssh_server, "late"))

        assert type(later).__name__ == "_WorkerConnection"
        assert (await later.run("echo there")).stdout == "there\n"
        assert len(transport.workers) == 1, "grew past grow_to"
    finally:
        await transport.aclose()
