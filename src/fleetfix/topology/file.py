"""Reading the optional topology file: documented YAML switches and links, or an ibnetdiscover dump.

The YAML form (docs/report.md shows a full example):

    switches:
      - {name: spine-01, kind: spine}
      - {name: leaf-07, kind: leaf, rack: r07}     # extra keys are kept as attributes
    links:
      - {a: leaf-07, b: spine-01}
      - {a: gpu001, b: leaf-07}                    # a name that is not a switch is a host

An `ibnetdiscover` dump is recognised by its `Switch`/`Ca` node lines. Hosts are the first word
of a CA's node description (`"gpu001 mlx5_0"` -> gpu001); a switch is named from its node
description (`MF0;leaf-07:MQM9790/U1` -> leaf-07, else its first word when unique, else its
GUID id); a switch with a CA behind it is a leaf, one linked only to switches a spine.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from fleetfix.errors import InventoryError, SourcePosition

SWITCH_KINDS: tuple[str, ...] = ("leaf", "spine")
TOP_LEVEL_KEYS: tuple[str, ...] = ("switches", "links")


@dataclass(frozen=True, slots=True)
class Switch:
    """A fabric switch; `attrs` holds any extra keys of its YAML entry."""

    name: str
    kind: str
    attrs: Mapping[str, Any] = field(default_factory=dict)
    position: SourcePosition | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """A cable between two named ends (switches or hosts)."""

    a: str
    b: str
    position: SourcePosition | None = None


@dataclass(frozen=True, slots=True)
class Fabric:
    """Switches and links from a topology file.

    `strict`: every link end that is not a switch must be an inventory host (true for YAML, which
    a person wrote); an ibnetdiscover dump sees the whole subnet, so unknown hosts are skipped.
    """

    switches: tuple[Switch, ...] = ()
    links: tuple[Link, ...] = ()
    strict: bool = True
    source: str = ""


def load_topology_file(path: Path) -> Fabric:
    """Read a topology file in either format (detected from its content).

    Raises:
        InventoryError: the file cannot be read or is malformed (with file:line where known).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InventoryError(f"cannot read topology file {path}: {exc}") from exc
    if looks_like_ibnetdiscover(text):
        return parse_ibnetdiscover(text, str(path))
    return parse_topology_yaml(text, str(path))


# -- YAML ------------------------------------------------------------------------------------


def parse_topology_yaml(text: str, source: str = "<topology>") -> Fabric:
    """Parse the YAML topology form; raises InventoryError with a position on bad input."""
    root = _compose(text, source)
    if root is None:
        return Fabric(source=source)
    if not isinstance(root, MappingNode):
        raise _error("a topology file is a mapping with `switches` and `links`", root, source)
    sections = _mapping_nodes(root, source)
    for key, (key_node, _) in sections.items():
        if key not in TOP_LEVEL_KEYS:
            raise _error(f"unknown key {key!r}", key_node, source, hint=_suggest(key))
    switches = tuple(_switches(sections.get("switches"), source))
    _no_duplicates(switches, source)
    links = tuple(_links(sections.get("links"), source))
    return Fabric(switches=switches, links=links, strict=True, source=source)


def _compose(text: str, source: str) -> Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        position = SourcePosition(source, mark.line + 1, mark.column + 1) if mark else None
        raise InventoryError(f"invalid YAML in topology file: {exc}", position) from exc


def _construct(node: Node, source: str) -> Any:
    try:
        return yaml.SafeLoader("").construct_document(node)
    except yaml.YAMLError as exc:
        raise _error(f"invalid value: {exc}", node, source) from exc


def _mapping_nodes(node: MappingNode, source: str) -> dict[str, tuple[Node, Node]]:
    """Keys (constructed) to (key node, value node), refusing non-string keys."""
    out: dict[str, tuple[Node, Node]] = {}
    for key_node, value_node in node.value:
        key = _construct(key_node, source)
        if not isinstance(key, str):
            raise _error(f"keys must be strings, not {key!r}", key_node, source)
        out[key] = (key_node, value_node)
    return out


def _items(section: tuple[Node, Node] | None, name: str, source: str) -> Iterator[MappingNode]:
    if section is None:
        return
    key_node, value_node = section
    if not isinstance(value_node, SequenceNode):
        raise _error(f"`{name}` must be a list", key_node, source)
    for item in value_node.value:
        if not isinstance(item, MappingNode):
            raise _error(f"each entry of `{name}` must be a mapping", item, source)
        yield item


def _switches(section: tuple[Node, Node] | None, source: str) -> Iterator[Switch]:
    for item in _items(section, "switches", source):
        data = _construct(item, source)
        if not all(isinstance(key, str) for key in data):
            raise _error("switch keys must be strings", item, source)
        name, kind = data.pop("name", None), data.pop("kind", None)
        if not isinstance(name, str) or not name.strip():
            raise _error("a switch needs a `name` (a string)", item, source)
        if kind not in SWITCH_KINDS:
            raise _error(
                f"switch {name}: `kind` must be one of {', '.join(SWITCH_KINDS)}, not {kind!r}",
                item,
                source,
            )
        yield Switch(name.strip(), str(kind), data, _position(item, source))


def _links(section: tuple[Node, Node] | None, source: str) -> Iterator[Link]:
    for item in _items(section, "links", source):
        data = _construct(item, source)
        ends = (data.get("a"), data.get("b"))
        if set(data) != {"a", "b"} or not all(isinstance(e, str) and e.strip() for e in ends):
            raise _error("a link is `{a: NAME, b: NAME}` (two strings, nothing else)", item, source)
        a, b = (str(e).strip() for e in ends)
        if a == b:
            raise _error(f"a link from {a} to itself", item, source)
        yield Link(a, b, _position(item, source))


def _no_duplicates(switches: tuple[Switch, ...], source: str) -> None:
    seen: set[str] = set()
    for switch in switches:
        if switch.name in seen:
            raise InventoryError(f"switch {switch.name} is listed twice", switch.position)
        seen.add(switch.name)


def _position(node: Node, source: str) -> SourcePosition:
    return SourcePosition(source, node.start_mark.line + 1, node.start_mark.column + 1)


def _error(message: str, node: Node, source: str, *, hint: str | None = None) -> InventoryError:
    return InventoryError(message, _position(node, source), hint=hint)


def _suggest(word: str) -> str | None:
    close = difflib.get_close_matches(word, TOP_LEVEL_KEYS, n=1)
    return f"did you mean {close[0]!r}?" if close else None


# -- ibnetdiscover ---------------------------------------------------------------------------

_NODE_LINE = re.compile(r'^(Switch|Ca|Rt)\s+\d+\s+"([^"]+)"\s*(?:#\s*"([^"]*)")?')
_PORT_LINE = re.compile(r'^\[\d+\](?:\([0-9a-fA-F]+\))?\s+"([^"]+)"\[\d+\][^#]*(?:#(.*))?$')
_QUOTED = re.compile(r'"([^"]*)"')
_MF0_NAME = re.compile(r"^MF0;([^:;\s]+):")


@dataclass(frozen=True, slots=True)
class _IbNode:
    """One `Switch`/`Ca` block of a dump: its id, type, description and port peers."""

    node_id: str
    node_type: str
    description: str
    line: int
    peers: tuple[tuple[str, str], ...]  # (peer node id, peer description from the comment)


def looks_like_ibnetdiscover(text: str) -> bool:
    """Whether `text` has ibnetdiscover's `Switch N "S-..."` / `Ca N "H-..."` node lines."""
    return any(_NODE_LINE.match(line) for line in text.splitlines())


def parse_ibnetdiscover(text: str, source: str = "<ibnetdiscover>") -> Fabric:
    """Switches and host links from `ibnetdiscover` output (the default, full format).

    Raises:
        InventoryError: no Switch or Ca blocks were found.
    """
    nodes = _ib_nodes(text)
    switches = [n for n in nodes if n.node_type == "Switch"]
    if not switches:
        raise InventoryError(
            f"{source}: no `Switch` blocks found; is this `ibnetdiscover` output "
            "(the default format, not -p/-l)?"
        )
    names = _ib_names(nodes)
    links = _ib_links(nodes, names)
    with_hosts = {
        s for link in links for s in link if s in names.switches and _is_host(link, names)
    }
    fabric_switches = tuple(
        Switch(
            names.by_id[n.node_id],
            "leaf" if names.by_id[n.node_id] in with_hosts else "spine",
            {"description": n.description, "node_id": n.node_id},
            SourcePosition(source, n.line),
        )
        for n in switches
    )
    ordered = tuple(Link(a, b) for a, b in sorted(tuple(sorted(pair)) for pair in links))
    return Fabric(switches=fabric_switches, links=ordered, strict=False, source=source)


def _ib_nodes(text: str) -> list[_IbNode]:
    """Group the dump into node blocks: a node line followed by its port lines."""
    heads: list[tuple[int, re.Match[str]]] = []
    peers: list[list[tuple[str, str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        node = _NODE_LINE.match(line)
        if node:
            heads.append((number, node))
            peers.append([])
            continue
        port = _PORT_LINE.match(line.strip())
        if port and peers:
            quoted = _QUOTED.findall(port.group(2) or "")
            peers[-1].append((port.group(1), quoted[0] if quoted else ""))
    return [
        _IbNode(node.group(2), node.group(1), node.group(3) or "", number, tuple(ports))
        for (number, node), ports in zip(heads, peers, strict=True)
        if node.group(1) in ("Switch", "Ca")  # routers (Rt) carry no hosts
    ]


@dataclass(frozen=True, slots=True)
class _IbNames:
    by_id: Mapping[str, str]
    switches: frozenset[str]


def _ib_names(nodes: list[_IbNode]) -> _IbNames:
    """Friendly names: hosts from the CA description's first word, switches from MF0;NAME:."""
    first_words = [_first_word(n.description) for n in nodes if n.node_type == "Switch"]
    by_id: dict[str, str] = {}
    for node in nodes:
        if node.node_type == "Ca":
            by_id[node.node_id] = _first_word(node.description) or node.node_id
        else:
            by_id[node.node_id] = _switch_name(node, first_words)
    switches = frozenset(by_id[n.node_id] for n in nodes if n.node_type == "Switch")
    # A CA seen only as a switch's peer (a partial dump) is named from the port comment.
    for node in nodes:
        for peer_id, peer_description in node.peers:
            if peer_id not in by_id and peer_id.startswith("H-") and peer_description:
                by_id[peer_id] = _first_word(peer_description)
    return _IbNames(by_id, switches)


def _switch_name(node: _IbNode, first_words: list[str]) -> str:
    named = _MF0_NAME.match(node.description)
    if named:
        return named.group(1)
    word = _first_word(node.description)
    # "Quantum Mellanox Technologies" on every switch names none of them: use the GUID id.
    return word if word and first_words.count(word) == 1 else node.node_id


def _first_word(description: str) -> str:
    words = description.split()
    return words[0] if words else ""


def _ib_links(nodes: list[_IbNode], names: _IbNames) -> set[frozenset[str]]:
    links: set[frozenset[str]] = set()
    for node in nodes:
        here = names.by_id[node.node_id]
        for peer_id, _ in node.peers:
            there = names.by_id.get(peer_id)
            if there is None or there == here:
                continue
            if here in names.switches or there in names.switches:  # CA-to-CA cables: no fabric
                links.add(frozenset((here, there)))
    return links


def _is_host(link: frozenset[str], names: _IbNames) -> bool:
    return any(end not in names.switches for end in link)


__all__ = [
    "SWITCH_KINDS",
    "Fabric",
    "Link",
    "Switch",
    "load_topology_file",
    "looks_like_ibnetdiscover",
    "parse_ibnetdiscover",
    "parse_topology_yaml",
]
