"""The fleet's topology: hosts, switches and failure domains, networkx behind a small API.

Domains come from reserved host vars (`rack`, `leaf`, `spine`, `pod`, `nvlink_domain`, `rail`,
`pdu`); the fabric graph has a node per host and per switch, with host-leaf edges, leaf-spine
edges (from hosts that name both) and every link of the optional topology file. The inventory
wins: the file only fills in a host's leaf (when it is cabled to exactly one leaf) and spine
(when that leaf has exactly one spine), never overrides a host var.

A run builds its topology before its first command, so the graph is plain dicts; networkx (a
tenth of a second to import) is imported when a switch's blast radius is first asked for.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetfix.errors import InventoryError

if TYPE_CHECKING:
    import networkx as nx

    from fleetfix.topology.file import Fabric, Link

DOMAIN_KINDS: tuple[str, ...] = ("rack", "leaf", "spine", "pod", "nvlink_domain", "rail", "pdu")
SWITCH_KINDS: tuple[str, ...] = ("leaf", "spine")
NO_LEAF = "(no leaf)"
NO_SPINE = "(no spine)"
# Domains whose failure takes every member out at once (power, cooling, NVLink backplane).
WHOLE_DOMAIN_KINDS: frozenset[str] = frozenset({"rack", "pod", "nvlink_domain", "pdu"})

_DIGITS = re.compile(r"(\d+)")
NodeKey = tuple[str, str]  # ("host", name) or ("switch", name): a host may share a switch's name


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts gpu2 before gpu10 (and never compares int with str)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGITS.split(name) if p)


def natural_sorted(names: Iterable[str]) -> list[str]:
    return sorted(names, key=natural_key)


@dataclass(frozen=True, slots=True)
class BlastRadius:
    """What a failure of one domain touches.

    `hosts`: every host whose service depends on it. `cut_off`: the hosts it takes out
    entirely: for a switch, hosts whose every way up went through it (they keep no switch, or
    lose reach to another switch); for a rack, pod, PDU or NVLink domain, all members; for a
    rail, none (they are degraded).
    `switches`: switches directly below it (a spine's leaves).
    """

    kind: str
    name: str
    hosts: tuple[str, ...]
    cut_off: tuple[str, ...]
    switches: tuple[str, ...] = ()


@dataclass(slots=True)
class FabricGraph:
    """Hosts and switches (each node's attributes, `kind` first) and the cables between them,
    as networkx.Graph keeps them: dicts in insertion order."""

    nodes: dict[NodeKey, dict[str, Any]] = field(default_factory=dict)
    adjacent: dict[NodeKey, dict[NodeKey, None]] = field(default_factory=dict)

    def __contains__(self, node: object) -> bool:
        return node in self.nodes

    def add_node(self, node: NodeKey, **attrs: Any) -> None:
        self.nodes.setdefault(node, {}).update(attrs)
        self.adjacent.setdefault(node, {})

    def add_edge(self, a: NodeKey, b: NodeKey) -> None:
        for end in (a, b):
            if end not in self.nodes:
                self.add_node(end)
        self.adjacent[a][b] = None
        self.adjacent[b][a] = None

    def neighbors(self, node: NodeKey) -> Iterable[NodeKey]:
        return self.adjacent[node]

    def kind(self, node: NodeKey) -> Any:
        return self.nodes[node].get("kind")

    def to_networkx(self) -> nx.Graph:
        import networkx as nx  # noqa: PLC0415 (a tenth of a second: only when asked for)

        graph = nx.Graph()
        graph.add_nodes_from(self.nodes.items())
        graph.add_edges_from((a, b) for a, ends in self.adjacent.items() for b in ends)
        return graph


class Topology:
    """Hosts, switches and domains of one fleet. Build it with `Topology.from_hosts`."""

    def __init__(self, graph: FabricGraph, domains: Mapping[str, Mapping[str, str]]) -> None:
        self._graph = graph
        self._domains = {host: dict(kinds) for host, kinds in domains.items()}

    def __contains__(self, host: object) -> bool:
        """Whether `host` is one of this topology's hosts."""
        return host in self._domains

    @cached_property
    def _sorted_hosts(self) -> tuple[str, ...]:
        # Sorted when first asked for, not when built: a run builds its topology before its
        # first command and needs no order of all its hosts then.
        return tuple(natural_sorted(self._domains))

    @cached_property
    def _members(self) -> dict[tuple[str, str], list[str]]:
        members: dict[tuple[str, str], list[str]] = {}
        for host in self._sorted_hosts:
            for kind, name in self._domains[host].items():
                members.setdefault((kind, name), []).append(host)
        return members

    @classmethod
    def from_hosts(
        cls, host_vars: Mapping[str, Mapping[str, Any]], topology_file: Path | None = None
    ) -> Topology:
        """Build from each host's vars and an optional topology file (YAML or ibnetdiscover).

        Raises:
            InventoryError: the topology file is malformed, names an unknown host (YAML form),
                or uses a switch name as both a leaf and a spine.
        """
        fabric = None
        if topology_file:
            from fleetfix.topology.file import load_topology_file  # noqa: PLC0415 (on request)

            fabric = load_topology_file(topology_file)
        declared = {host: _declared_domains(v) for host, v in host_vars.items()}
        graph = _fabric_graph(declared, fabric)
        return cls(graph, _derived_domains(graph, declared))

    # -- domains --------------------------------------------------------------------------

    def hosts(self) -> list[str]:
        """Every host, naturally sorted."""
        return list(self._sorted_hosts)

    def domains_of(self, host: str) -> dict[str, str]:
        """The host's domains by kind, e.g. {"rack": "r07", "leaf": "leaf-07"}.

        Raises:
            KeyError: the host is not in this topology.
        """
        return dict(self._domains[host])

    def members(self, kind: str, name: str) -> list[str]:
        """Hosts in domain (kind, name), naturally sorted; empty when no host is there."""
        _check_kind(kind)
        return list(self._members.get((kind, name), ()))

    def kinds(self) -> list[str]:
        """The domain kinds some host has, in DOMAIN_KINDS order."""
        present = {kind for kind, _ in self._members}
        return [kind for kind in DOMAIN_KINDS if kind in present]

    def domains(self, kind: str) -> list[str]:
        """Names of the domains of `kind` that hold at least one host."""
        _check_kind(kind)
        return natural_sorted(name for k, name in self._members if k == kind)

    def attribute(self, host: str, name: str) -> Any:
        """A host var kept on the graph (e.g. `gpu_model`), or None."""
        return self._graph.nodes[("host", host)].get(name)

    def gpu_models(self) -> dict[str, str]:
        """Each host's `gpu_model` host var, for hosts that have one."""
        models = {h: self.attribute(h, "gpu_model") for h in self.hosts()}
        return {h: str(m) for h, m in models.items() if m not in (None, "")}

    # -- fabric ---------------------------------------------------------------------------

    def switches(self, kind: str | None = None) -> list[str]:
        """Switch names (of one kind when given)."""
        return natural_sorted(
            name
            for role, name in self._graph.nodes
            if role == "switch" and kind in (None, self._graph.kind((role, name)))
        )

    def uplinks(self, leaf: str) -> list[str]:
        """The spines a leaf is cabled to."""
        return self._neighbours(("switch", leaf), "spine")

    def tree(self) -> dict[str, dict[str, list[str]]]:
        """spine -> leaf -> hosts; hosts without a leaf sit under "(no leaf)".

        A leaf sits under the spine most of its hosts name, else its first uplink, else
        "(no spine)"; leaves without hosts (from the topology file) are listed too.
        """
        leaf_spine = {leaf: self._spine_of_leaf(leaf) for leaf in self.switches("leaf")}
        tree: dict[str, dict[str, list[str]]] = {}
        for host in self.hosts():
            leaf = self._domains[host].get("leaf", NO_LEAF)
            spine = leaf_spine.get(leaf) or self._domains[host].get("spine", NO_SPINE)
            tree.setdefault(spine, {}).setdefault(leaf, []).append(host)
        for leaf, uplink in leaf_spine.items():
            tree.setdefault(uplink or NO_SPINE, {}).setdefault(leaf, [])
        for name in self.switches("spine"):
            tree.setdefault(name, {})
        return {s: {leaf: tree[s][leaf] for leaf in _ordered(tree[s])} for s in _ordered(tree)}

    def blast_radius(self, kind: str, name: str) -> BlastRadius:
        """What a failure of domain (kind, name) touches; empty for an unknown domain."""
        _check_kind(kind)
        node: NodeKey = ("switch", name)
        if kind in SWITCH_KINDS and node in self._graph:
            return self._switch_radius(kind, name)
        members = tuple(self.members(kind, name))
        cut = members if kind in WHOLE_DOMAIN_KINDS else ()
        return BlastRadius(kind, name, members, cut)

    def _switch_radius(self, kind: str, name: str) -> BlastRadius:
        node: NodeKey = ("switch", name)
        below = self._neighbours(node, "leaf") if kind == "spine" else []
        hosts = set(self.members(kind, name)) | set(self._neighbours(node, "host"))
        for leaf in below:
            hosts |= set(self._neighbours(("switch", leaf), "host"))
        hosts |= {h for leaf in below for h in self.members("leaf", leaf)}
        import networkx as nx  # noqa: PLC0415 (a tenth of a second: only when asked for)

        before = _switches_in_reach(self._networkx)
        after = _switches_in_reach(nx.restricted_view(self._networkx, [node], []))
        # Cut off: left with no switch at all, or unable to reach some other switch it reached
        # before (its way up went only through this one). A dual-homed host keeps its other leaf.
        cut = [h for h in hosts if after.get(h, 0) == 0 or after.get(h, 0) < before[h] - 1]
        return BlastRadius(
            kind, name, tuple(natural_sorted(hosts)), tuple(natural_sorted(cut)), tuple(below)
        )

    @cached_property
    def _networkx(self) -> nx.Graph:
        """The fabric as networkx sees it, for the graph algorithms (built once, when asked)."""
        return self._graph.to_networkx()

    def _neighbours(self, node: NodeKey, kind: str) -> list[str]:
        if node not in self._graph:
            return []
        found = (n[1] for n in self._graph.neighbors(node) if self._graph.kind(n) == kind)
        return natural_sorted(found)

    def _spine_of_leaf(self, leaf: str) -> str | None:
        named = Counter(
            self._domains[h]["spine"]
            for h in self.members("leaf", leaf)
            if "spine" in self._domains[h]
        )
        if named:
            return sorted(named.items(), key=lambda item: (-item[1], natural_key(item[0])))[0][0]
        uplinks = self.uplinks(leaf)
        return uplinks[0] if uplinks else None


def _check_kind(kind: str) -> None:
    if kind not in DOMAIN_KINDS:
        raise ValueError(f"unknown domain kind {kind!r}; one of {', '.join(DOMAIN_KINDS)}")


def _ordered(names: Iterable[str]) -> list[str]:
    """Natural order with the "(no ...)" placeholders last."""
    return sorted(names, key=lambda n: (n.startswith("("), natural_key(n)))


def _switches_in_reach(graph: Any) -> dict[str, int]:
    """For each host: how many switches its connected component holds."""
    import networkx as nx  # noqa: PLC0415 (a tenth of a second: only when asked for)

    counts: dict[str, int] = {}
    for component in nx.connected_components(graph):
        switches = sum(1 for node in component if node[0] == "switch")
        counts.update({node[1]: switches for node in component if node[0] == "host"})
    return counts


_DECLARED_KEYS = (*DOMAIN_KINDS, "gpu_model")


def _declared_domains(host_vars: Mapping[str, Any]) -> dict[str, Any]:
    """Reserved topology vars (as strings) plus gpu_model; empty values count as absent."""
    out: dict[str, Any] = {}
    for key in _DECLARED_KEYS:
        value = host_vars.get(key)
        if value is None:
            continue
        text = (value if type(value) is str else str(value)).strip()
        if text:
            out[key] = text
    return out


def _fabric_graph(declared: Mapping[str, Mapping[str, Any]], fabric: Fabric | None) -> FabricGraph:
    """The graph of the hosts' vars, with the topology file's switches and links if any."""
    graph = FabricGraph()
    for host, attrs in declared.items():
        graph.add_node(("host", host), kind="host", gpu_model=attrs.get("gpu_model"))
    for switch in fabric.switches if fabric is not None else ():
        graph.add_node(("switch", switch.name), kind=switch.kind, **dict(switch.attrs))
    for host, attrs in declared.items():
        leaf, spine = attrs.get("leaf"), attrs.get("spine")
        if leaf:
            _switch_node(graph, leaf, "leaf", host)
            graph.add_edge(("host", host), ("switch", leaf))
        if spine:
            _switch_node(graph, spine, "spine", host)
        if leaf and spine:
            graph.add_edge(("switch", leaf), ("switch", spine))
    if fabric is not None:
        for link in fabric.links:
            ends = [_link_end(graph, name, link, fabric) for name in (link.a, link.b)]
            if ends[0] is not None and ends[1] is not None:
                graph.add_edge(ends[0], ends[1])
    return graph


def _switch_node(graph: FabricGraph, name: str, kind: str, host: str) -> None:
    """Add a switch a host var names, refusing one name used as both leaf and spine."""
    node = ("switch", name)
    if node not in graph:
        graph.add_node(node, kind=kind)
    elif graph.kind(node) != kind:
        raise InventoryError(
            f"host {host} names {name} as its {kind}, but {name} is a "
            f"{graph.kind(node)} elsewhere (inventory or topology file)"
        )


def _link_end(graph: FabricGraph, name: str, link: Link, fabric: Fabric) -> NodeKey | None:
    if ("switch", name) in graph:
        return ("switch", name)
    if ("host", name) in graph:
        return ("host", name)
    if not fabric.strict:
        return None  # a subnet dump sees hosts that this inventory does not manage
    raise InventoryError(
        f"link {link.a} - {link.b}: {name} is neither a switch of the topology file nor an "
        "inventory host",
        link.position,
    )


def _derived_domains(
    graph: FabricGraph, declared: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, str]]:
    """Declared domains, plus a leaf/spine the fabric implies unambiguously."""
    domains: dict[str, dict[str, str]] = {}
    for host, attrs in declared.items():
        own = {k: v for k, v in attrs.items() if k != "gpu_model"}  # strings, in kind order
        derived = False
        if "leaf" not in own:
            node = ("host", host)
            leaves = [n[1] for n in graph.neighbors(node) if graph.kind(n) == "leaf"]
            if len(leaves) == 1:
                own["leaf"], derived = leaves[0], True
        if "spine" not in own and "leaf" in own:
            leaf = ("switch", own["leaf"])
            spines = [n[1] for n in graph.neighbors(leaf) if graph.kind(n) == "spine"]
            if len(spines) == 1:
                own["spine"], derived = spines[0], True
        domains[host] = {k: own[k] for k in DOMAIN_KINDS if k in own} if derived else own
    return domains


__all__ = [
    "DOMAIN_KINDS",
    "NO_LEAF",
    "NO_SPINE",
    "BlastRadius",
    "Topology",
    "natural_key",
    "natural_sorted",
]
