"""The 10,000-node lab on one machine: SSH fronts each serve a slice of the nodes, every node
answers real SSH, a reboot works through a front that is not the first, and stopping the lab
leaves none of its processes behind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.lab.control import LabHandle, pid_alive
from tests.lab.support import eventually, processes_mentioning, run, running_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
NODES = 10_000
START_TIMEOUT = 600.0


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    state_dir = tmp_path_factory.mktemp("scale") / "lab"
    with running_lab("healthy-10000", state_dir, timeout=START_TIMEOUT) as handle:
        yield handle


def sample(lab: LabHandle) -> list[str]:
    """The first and last node of every front, and every 500th node."""
    names = list(lab.hosts)
    edges = [node for shard in lab.shards for node in (shard[0], shard[-1])]
    return sorted(set(edges + names[::500]), key=names.index)


def test_the_nodes_are_split_over_several_ssh_fronts(big: LabHandle) -> None:
    names = list(big.hosts)
    assert len(names) == NODES
    assert len(big.shards) >= 5
    assert [node for shard in big.shards for node in shard] == names
    assert all(len(shard) <= 2000 for shard in big.shards)
    assert len(set(big.pids)) == len(big.shards) + 1
    assert all(pid_alive(pid) for pid in big.pids)


async def test_every_front_answers_real_ssh(big: LabHandle) -> None:
    nodes = sample(big)
    limit = asyncio.Semaphore(20)

    async def probe(node: str) -> tuple[str, str, int]:
        async with limit:
            done = await run(big, node, "hostname; nvidia-smi -L", timeout=120)
        host, _, gpus = done.stdout.partition("\n")
        return host, gpus, gpus.count("GPU ") if done.rc == 0 else -1

    answers = await asyncio.gather(*(probe(node) for node in nodes))
    assert len(nodes) >= NODES // 500 + len(big.shards)
    for node, (host, gpus, count) in zip(nodes, answers, strict=True):
        assert (host, count) == (node, 8), gpus
    status = await big.astatus()
    assert status["counts"] == {"up": NODES}
    assert [p["nodes"] for p in status["processes"]] == [len(s) for s in big.shards]


async def test_reboot_through_a_later_front(big: LabHandle) -> None:
    shard = big.shards[2]
    node = shard[len(shard) // 2]
    before = (await run(big, node, "cat /proc/sys/kernel/random/boot_id")).stdout
    boots = (await big.astatus())["nodes"][node]["boots"]
    assert (await run(big, node, "reboot", timeout=30)).rc == 0

    async def back() -> bool:
        entry = (await big.astatus())["nodes"][node]
        return bool(entry["boots"] == boots + 1 and entry["status"] == "up")

    await eventually(back, timeout=120, what=f"{node} rebooted and up")
    after = await run(big, node, "cat /proc/sys/kernel/random/boot_id")
    assert after.rc == 0 and after.stdout.strip() not in ("", before.strip())
    truth = await big.atruth()
    assert set(truth["nodes"]) == set(big.hosts)
    assert truth["nodes"][node]["boots"] == boots + 1
    assert truth["nodes"][node]["boot_id"] == after.stdout.strip()
    assert not [name for name, entry in truth["nodes"].items() if entry["faults"]]
    assert sum(entry["boots"] for entry in truth["nodes"].values()) == NODES + 1


def test_stop_ends_every_lab_process(big: LabHandle) -> None:
    pids = big.pids
    big.stop()
    assert not [pid for pid in pids if pid_alive(pid)]
    assert not processes_mentioning(str(Path(big.state_dir)))
