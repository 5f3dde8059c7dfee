"""A probe parsed in a host shard's worker over real SSH is read with the step's parameters
(issue 18): the bound `expected_gpus` crosses the worker protocol with the request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.probes import probe_registry
from fleetfix.transport.shards import ShardedTransport, WorkerOptions, _WorkerConnection
from fleetfix.transport.ssh import SSHTransport
from tests.support import spec_for

H200 = Path(__file__).parents[2] / "fixtures" / "samples" / "real-nodes" / "h200-sxm-vm-580.159.04"


@pytest.fixture
async def sharded() -> AsyncIterator[ShardedTransport]:
    transport = ShardedTransport(SSHTransport(), WorkerOptions("ssh", {}), workers=1)
    try:
        yield transport
    finally:
        await transport.aclose()


async def test_the_worker_parses_with_the_bound_parameters(
    sharded: ShardedTransport, ssh_server: Any
) -> None:
    await sharded.connect(spec_for(ssh_server, "host0"))  # the main process's shard
    await sharded.started()
    conn = await sharded.connect(spec_for(ssh_server, "host1"))
    assert isinstance(conn, _WorkerConnection)  # it parses where the command ran
    probe = probe_registry().get("nvidia_smi").bind({"expected_gpus": 2})

    probed = await conn.run_probe(f"cat {H200 / 'probe-nvidia_smi.txt'}", probe, timeout=30)

    assert probed.parsed is not None and probed.parsed.error is None
    assert (probed.parsed.data["expected_gpus"], probed.parsed.data["count_ok"]) == (2, False)
