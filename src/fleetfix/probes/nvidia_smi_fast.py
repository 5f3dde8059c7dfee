"""The fast path of the nvidia_smi probe: one clean `nvidia-smi -q -x` document, read once.

What the probe's own command prints (optional `### fleetfix` marker lines, then the XML) needs
none of the paste clean-up. `read_clean_xml` returns None for anything else, and for XML
libxml2 rejects: the caller then takes the slow path (clean the paste, parse with
defusedxml), which accepts pasted XML and words the error for garbage exactly as before.

Two readers give the same facts; tests/probes/test_nvidia_smi_fast.py holds the scan to the
tree, and both to the slow path, on every XML sample, multi-GPU copies of each and hundreds
of damaged ones:

- The scan (nvidia_smi_scan.scan_report) reads nvidia-smi's own layout from the text. On the
  lab's 8-GPU output it takes about a third of the tree's time; with one GPU nothing repeats
  and the tree is as fast, so `read_clean_xml` scans only output with two GPUs or more.
- The tree (lxml's elements walked by nvidia_smi_xml.read_report; this module) reads
  whatever the scan is not sure of (nvidia_smi_scan lists it), and words errors with their
  line.

Safety: nvidia-smi's DOCTYPE only names its DTD (`SYSTEM "nvsmi_device_v12.dtd"`). A document
declaring anything itself (an internal DTD subset, an entity) is refused before it is parsed,
and the parser neither loads DTDs, nor resolves entities, nor touches the network.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from fleetfix.errors import ProbeParseError
from fleetfix.probes.gpu_facts import Format, Reading
from fleetfix.probes.nvidia_smi_scan import DOTS, scan_report
from fleetfix.probes.nvidia_smi_text import MARKER_PREFIX, Marker, parse_marker
from fleetfix.probes.nvidia_smi_xml import PROBE, normalize_key, read_report

_STARTS = ("<?xml", "<nvidia_smi_log")
# Anything but the five predefined entities and character references: the slow path judges it.
_ENTITY_REFERENCE = re.compile(r"&(?!(?:lt|gt|amp|apos|quot|#[0-9]+|#x[0-9a-fA-F]+);)")
_FORBIDDEN = "XML with forbidden constructs"


class _Element(Protocol):
    """The part of lxml's element API the fast path uses (lxml ships no type stubs)."""

    @property
    def tag(self) -> str: ...

    @property
    def text(self) -> str | None: ...

    @property
    def sourceline(self) -> int | None: ...

    def get(self, key: str) -> str | None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[_Element]: ...


@dataclass(frozen=True, slots=True)
class CleanXml:
    """What the fast path read: the report, and the marker lines printed above it."""

    reading: Reading
    markers: tuple[Marker, ...]


def read_clean_xml(text: str) -> CleanXml | None:
    """The report from one clean `nvidia-smi -q -x` document; None when `text` is not one.

    Raises ProbeParseError for a document declaring entities or an internal DTD subset, and
    for well-formed XML whose root is not `<nvidia_smi_log>`.
    """
    head = _head(text)
    if head is None:
        return None
    markers, start = head
    if not _check_prolog(text, start):
        return None
    if "&" in text and _ENTITY_REFERENCE.search(text, start):
        return None
    if text.find("\u2026", start) >= 0:
        return None  # a human cut lines out: the slow path knows elisions
    # One GPU repeats nothing: the tree reads it as fast (tests/probes compare the scan's
    # reading of each sample with the tree's all the same).
    reading = scan_report(text, start, min_gpus=2)  # None for `...` too
    if reading is None:
        if DOTS.search(text, start):
            return None
        reading = _read_tree(text, start)
    return None if reading is None else CleanXml(reading, markers)


def _read_tree(text: str, start: int) -> Reading | None:
    """The report through lxml's tree; None when libxml2 rejects the document."""
    root = _parse(text[start:].encode("utf-8", "surrogateescape"), text, start)
    if root is None:
        return None
    if root.tag != "nvidia_smi_log":
        raise ProbeParseError(PROBE, f"XML root is <{root.tag}>, not <nvidia_smi_log>", text)
    tree = _XmlNode(root, root.tag, _Document(text.count("\n", 0, start)))
    return read_report(tree, Format.XML, text)


def _head(text: str) -> tuple[tuple[Marker, ...], int] | None:
    """Leading marker lines and where the XML starts; None unless XML follows them."""
    markers: list[Marker] = []
    position = 0
    while text.startswith(MARKER_PREFIX, position):
        end = text.find("\n", position)
        if end < 0:
            return None
        markers.append(parse_marker(len(markers) + 1, text[position:end]))
        position = end + 1
    rest = text[position:]
    start = position + len(rest) - len(rest.lstrip())
    if not text.startswith(_STARTS, start):
        return None
    return tuple(markers), start


def _check_prolog(text: str, start: int) -> bool:
    """Whether a prolog ends at `<nvidia_smi_log` (else: not the probe's document).

    Raises ProbeParseError, before any parsing, when it declares entities or has an internal
    DTD subset.
    """
    root = text.find("<nvidia_smi_log", start)
    if root < 0:
        return False
    entity = text.find("<!ENTITY", start, root)
    doctype = text.find("<!DOCTYPE", start, root)
    subset = -1 if doctype < 0 else text.find("[", doctype, root)
    found = min((at for at in (entity, subset) if at >= 0), default=-1)
    if found >= 0:
        reason = (
            f"{_FORBIDDEN} (an entity declaration or internal DTD subset; "
            "nvidia-smi only names its DTD)"
        )
        raise ProbeParseError(PROBE, reason, text, line=text.count("\n", 0, found) + 1)
    return True


# --- the tree: lxml's elements seen as report nodes ---------------------------------------


def _parse(data: bytes, text: str, start: int) -> _Element | None:
    """The root element, or None when libxml2 rejects the bytes (the slow path then judges)."""
    # lxml (3-4 MB of RSS) loads only when the scan declines a document (nvidia_smi_scan).
    from lxml import etree  # type: ignore[import-untyped]  # noqa: PLC0415  # no stubs: typed by _Element

    parser = etree.XMLParser(
        encoding="utf-8",
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        dtd_validation=False,
        remove_comments=True,  # as ElementTree drops them: text around a comment joins up
        remove_pis=True,
    )
    try:
        root: _Element = etree.fromstring(data, parser)
    except etree.XMLSyntaxError:
        return None
    dtd = etree.ElementTree(root).docinfo.internalDTD
    if dtd is not None and (any(dtd.iterentities()) or any(dtd.iterelements())):
        # _check_prolog missed it (a quoted `>` in the DOCTYPE): refuse all the same.
        reason = f"{_FORBIDDEN} (declarations in the DOCTYPE)"
        raise ProbeParseError(PROBE, reason, text, line=text.count("\n", 0, start) + 1)
    return root


class _Document:
    """What every node of one document shares: its first line's number in `text` less one,
    and the key of each tag seen (a few hundred tags repeat across the GPUs)."""

    __slots__ = ("keys", "offset")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.keys: dict[str, str] = {}

    def key(self, tag: str) -> str:
        key = self.keys.get(tag)
        if key is None:
            key = self.keys[tag] = normalize_key(tag)
        return key


class _XmlNode:
    """One element seen as a report node; its children are wrapped when first asked for.

    Matches `nvidia_smi_xml._element_node`: keys are normalised tags, a `<gpu>`'s value is
    its `id`, a section's value is None, a leaf's is its stripped text.
    """

    __slots__ = ("_children", "_document", "_element", "_index", "_tag")

    def __init__(self, element: _Element, tag: str, document: _Document) -> None:
        self._element = element
        self._tag = tag
        self._document = document
        self._children: tuple[tuple[str, _XmlNode], ...] | None = None
        self._index: dict[str, _XmlNode | _Element] | None = None

    @property
    def value(self) -> str | None:
        element = self._element
        if self._tag == "gpu":
            return element.get("id")
        if len(element):
            return None
        return (element.text or "").strip()

    @property
    def children(self) -> tuple[tuple[str, _XmlNode], ...]:
        if self._children is None:
            document = self._document
            self._children = tuple(
                (document.key(tag), _XmlNode(child, tag, document))
                for child in self._element
                for tag in (child.tag,)
            )
        return self._children

    @property
    def line(self) -> int | None:
        line = self._element.sourceline
        return None if line is None else line + self._document.offset

    def _child(self, key: str) -> _XmlNode | None:
        index = self._index
        if index is None:
            index = self._index = self._first_children()
        found = index.get(key)
        if found is None or isinstance(found, _XmlNode):
            return found
        node = index[key] = _XmlNode(found, found.tag, self._document)
        return node

    def _first_children(self) -> dict[str, _XmlNode | _Element]:
        """The first child of each key; wrapped only when asked for (most never are)."""
        if self._children is not None:
            return dict(reversed(self._children))
        document = self._document
        index: dict[str, _XmlNode | _Element] = {}
        for child in self._element:
            index.setdefault(document.key(child.tag), child)
        return index

    def get(self, path: str) -> _XmlNode | None:
        """The first node at `a/b/c`, or None."""
        if "/" not in path:
            return self._child(path)
        node: _XmlNode | None = self
        for key in path.split("/"):
            if node is None:
                return None
            node = node._child(key)
        return node

    def first(self, *paths: str) -> _XmlNode | None:
        """The node at the first of `paths` that exists."""
        for path in paths:
            if (node := self.get(path)) is not None:
                return node
        return None

    def all(self, key: str) -> Sequence[_XmlNode]:
        """Every direct child named `key`."""
        return tuple(child for name, child in self.children if name == key)
