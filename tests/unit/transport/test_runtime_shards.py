"""The default shard count follows the hosts a run works on (its --limit), not the size of
the inventory: a one-node fix in a 100-node inventory needs no worker processes."""

from __future__ import annotations

from pathlib import Path

from fleetfix.cli import build_parser
from fleetfix.events import EventBus
from fleetfix.inventory import load_inventory
from fleetfix.runtime import open_runtime
from fleetfix.transport.routing import RoutingTransport
from fleetfix.transport.shards import ShardedTransport, auto_workers


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
        sharded = isinstance(runtime.transport._for(spec), ShardedTransport)
        assert sharded == (auto_workers(100) > 0)
