"""A run's topology as plain data, journaled with the run (events.RunStarted.topology).

Each host's domains (rack, leaf, spine, ...) and its `gpu_model`: what the reports draw and
group by. `fleetfix report RUN` rebuilds the Topology from it when no inventory is given, so the
replayed report draws the tree the live run drew. Switch uplinks that only a topology file
declared (a leaf cabled to a second spine) are not kept: the tree places a leaf under the
spine its hosts name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fleetfix.topology.graph import Topology

GPU_MODEL = "gpu_model"


def host_places(topology: Topology | None, hosts: Iterable[str]) -> dict[str, dict[str, str]]:
    """host -> its domains and gpu_model, for the `hosts` the topology knows."""
    if topology is None:
        return {}
    places: dict[str, dict[str, str]] = {}
    for host in hosts:
        if host not in topology:
            continue
        place = topology.domains_of(host)
        model = topology.attribute(host, GPU_MODEL)
        if model not in (None, ""):
            place[GPU_MODEL] = str(model)
        places[host] = place
    return places


def from_places(places: Mapping[str, Mapping[str, str]]) -> Topology:
    """The Topology `host_places` describes (a host var per domain, as an inventory gives)."""
    return Topology.from_hosts(places)


__all__ = ["from_places", "host_places"]
