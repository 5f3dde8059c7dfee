"""Shard workers by default: none at the start, more only when the main process proves
saturated, up to a limit that follows the hosts a run works on (its --limit, not the size of
the inventory), the usable cores and a memory budget; `--shards N` starts N at once."""

from __future__ import annotations

from pathlib import Path

from fleetfix.cli import build_parser
from fleetfix.events import EventBus
from fleetfix.inventory import load_inventory
from fleetfix.runtime import open_runtime
from fleetfix.transport.routing import RoutingTransport
from fleetfix.transport.shard_policy import (
    SATURATED_WINDOWS,
    WORKER_MEMORY,
    Saturation,
    worker_limit,
)
from fleetfix.transport.shards import ShardedTransport


async def test_shards_follow_the_selected_hosts(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\ngpu[001:100]\n")
    inventory = load_inventory([str(hosts)])
    args = build_parser().parse_args(["run", "pb.yml", "-i", str(hosts), "--limit", "gpu001"])
    spec_host = "gpu001"
    async with open_runtime(args, inventory, EventBus(), hosts=1) as runtime:
        spec = runtime.spec_factory(spec_host, inventory.host_vars(spec_host))
        assert isinstance(runtime.transport, RoutingTransport)
        assert not isinstance(runtime.transport._for(spec), ShardedTransport)
    async with open_runtime(args, inventory, EventBus()) as runtime:  # the whole inventory
        spec = runtime.spec_factory(spec_host, inventory.host_vars(spec_host))
        assert isinstance(runtime.transport, RoutingTransport)
        transport = runtime.transport._for(spec)
        assert isinstance(transport, ShardedTransport) == (worker_limit(100) > 0)
        if isinstance(transport, ShardedTransport):
            assert transport._wanted == 0, "a default run started workers before saturation"


async def test_forced_shards_start_at_once(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\ngpu[001:100]\n")
    inventory = load_inventory([str(hosts)])
    args = build_parser().parse_args(["run", "pb.yml", "-i", str(hosts), "--shards", "2"])
    async with open_runtime(args, inventory, EventBus()) as runtime:
        spec = runtime.spec_factory("gpu001", inventory.host_vars("gpu001"))
        assert isinstance(runtime.transport, RoutingTransport)
        transport = runtime.transport._for(spec)
        assert isinstance(transport, ShardedTransport)
        assert (transport._wanted, transport._grow_to) == (2, 2)


def test_worker_limit_follows_cores_hosts_and_memory() -> None:
    plenty = 64 * WORKER_MEMORY
    assert worker_limit(1000, cpus=16, available=plenty) == 8  # MAX_AUTO_WORKERS
    assert worker_limit(1000, cpus=4, available=plenty) == 3  # the cores beyond the first
    assert worker_limit(1000, cpus=1, available=plenty) == 0  # one core: one process
    assert worker_limit(10, cpus=16, available=plenty) == 0  # too small a run
    assert worker_limit(1000, cpus=16, available=8 * WORKER_MEMORY) == 2  # a quarter of it


class _Clock:
    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def window(self, wall: float, cpu: float) -> None:
        self.wall += wall
        self.cpu += cpu


def _saturation() -> tuple[Saturation, _Clock]:
    clock = _Clock()
    saturation = Saturation(cpu=lambda: clock.cpu, clock=lambda: clock.wall)
    saturation.start()
    return saturation, clock


def test_saturation_needs_busy_windows_in_a_row_while_hosts_arrive() -> None:
    saturation, clock = _saturation()
    said = []
    for _ in range(SATURATED_WINDOWS):
        clock.window(1.0, 0.95)
        said.append(saturation.sample(1.0, arriving=True))

    assert said == [False] * (SATURATED_WINDOWS - 1) + [True]
    clock.window(1.0, 0.95)
    assert not saturation.sample(1.0, arriving=True), "the count restarts after a worker"


def test_an_idle_window_or_no_new_hosts_resets_the_count() -> None:
    saturation, clock = _saturation()
    readings = [(0.95, True), (0.30, True), (0.95, True), (0.95, False), (0.95, True)]
    said = []
    for cpu, arriving in readings:
        clock.window(1.0, cpu)
        said.append(saturation.sample(1.0, arriving=arriving))

    assert not any(said)


def test_a_late_event_loop_is_saturation_too() -> None:
    saturation, clock = _saturation()
    said = []
    for _ in range(SATURATED_WINDOWS):
        clock.window(1.5, 0.5)  # a 1 s sleep that took 1.5 s: the loop is behind
        said.append(saturation.sample(1.0, arriving=True))

    assert said[-1]
