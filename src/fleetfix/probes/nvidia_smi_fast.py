"""The fast path of the nvidia_smi probe: one clean `nvidia-smi -q -x` document, read once.

What the probe's own command prints (optional `### fleetfix` marker lines, then the XML) needs
none of the paste clean-up. `read_clean_xml` returns None for anything else, and for XML
libxml2 rejects: the caller then takes the slow path (clean the paste, parse with
defusedxml), which accepts pasted XML and words the error for garbage exactly as before.

Two readers give the same facts; tests/probes/test_nvidia_smi_fast.py holds the scan to the
tree, and both to the slow path, on every XML sample, multi-GPU copies of each and hundreds
of damaged ones:

- The scan (`scan_report`) reads nvidia-smi's own layout from the text: each element on a
  line of its own, indented one unit (a tab, or spaces) per level. It cuts an element at its
  children's start tags and proves each child complete before reading it
  (`_element_content`); it splits only the sections a fact reads; and a GPU whose children
  repeat the previous GPU's text word for word takes those children's facts from it. Last,
  libxml2 checks that the document is XML, without building a tree and leaving out the
  repeated children (`_Scan`). On the lab's 8-GPU output it takes about a third of the
  tree's time; with one GPU nothing repeats and the tree is as fast, so `read_clean_xml`
  scans only output with two GPUs or more.
- The tree (lxml's elements walked by nvidia_smi_xml.read_report) reads whatever the scan
  is not sure of: a reference (`&amp;`), a comment, CDATA or a processing instruction, a
  carriage return, a prolog other than nvidia-smi's (`<?xml ...?>`, `<!DOCTYPE
  nvidia_smi_log SYSTEM "...">`), a root with attributes, a `<gpu>` without a plain `id`,
  an element not on a line of its own at its depth, a tag with attributes or a space, an
  element inside one of its own name, and any value the report reader refuses or records
  as an error (the tree reader words the error, with its line).

Safety: nvidia-smi's DOCTYPE only names its DTD (`SYSTEM "nvsmi_device_v12.dtd"`). A document
declaring anything itself (an internal DTD subset, an entity) is refused before it is parsed,
and the parser neither loads DTDs, nor resolves entities, nor touches the network.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import ne, or_
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, cast

from lxml import etree  # type: ignore[import-untyped]  # no stubs: typed by _Element below

from fleetfix.errors import ProbeParseError
from fleetfix.probes.gpu_facts import (
    Clocks,
    EccCounters,
    EccFacts,
    Fabric,
    Format,
    GpuFacts,
    GpuProcess,
    MemoryUsage,
    MigDevice,
    MigFacts,
    Power,
    Reading,
    RemappedRows,
    RetiredPages,
    Temperatures,
    Utilization,
    ValueReader,
    frozen_map,
    normalize_bus_id,
    recovery_action_name,
    sram_source_name,
    sum_known,
)
from fleetfix.probes.nvidia_smi_text import MARKER_PREFIX, Marker, parse_marker
from fleetfix.probes.nvidia_smi_xml import (
    CLOCK_PATHS,
    PENDING_RETIREMENT,
    PROBE,
    TEMPERATURE_PATHS,
    normalize_key,
    read_report,
    reason_name,
)

_STARTS = ("<?xml", "<nvidia_smi_log")
# Anything but the five predefined entities and character references: the slow path judges it.
_ENTITY_REFERENCE = re.compile(r"&(?!(?:lt|gt|amp|apos|quot|#[0-9]+|#x[0-9a-fA-F]+);)")
_DOTS = re.compile(r"\.\.\.")  # as `"..." in text`, at half the cost
_FORBIDDEN = "XML with forbidden constructs"
T = TypeVar("T")


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
        if _DOTS.search(text, start):
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


# --- the scan: nvidia-smi's layout read from the text ---------------------------------------


class _Unsure(Exception):
    """The scan cannot vouch for what it read: the tree reader takes the document."""


_ROOT = ("nvidia_smi_log",)
_GPU = (*_ROOT, "gpu")
_ROOT_OPEN, _ROOT_CLOSE = "<nvidia_smi_log>", "</nvidia_smi_log>"
_PLAIN_PROLOG = re.compile(
    r'\s*(?:<\?xml[^<>?]*\?>\s*)?(?:<!DOCTYPE nvidia_smi_log SYSTEM "[^"<>\[\]]*">\s*)?'
)
# Left to the tree reader when in the body: a reference, a comment, CDATA or a declaration, a
# processing instruction, a carriage return (each found by one memchr).
_NOT_PLAIN = ("&", "!", "?", "\r")
# A child's start tag; then `/` if it is empty (`<processes />`), or its text and end tag if
# it is a leaf. Groups: tag, empty, text.
_CHILD = r"<([A-Za-z_][A-Za-z0-9_]*)(?:( ?/)>|>(?:([^<]*)</\1>)?)"
_BULKY = "supported_clocks"
_AFTER_NAME = frozenset(">/ \t\n\r")  # what may follow the name in a start tag
_NOT_IN_ID = re.compile(r'[<>&"\t\n\r]')  # an id the XML parser would rewrite or refuse
_ATTACHED = re.compile(r"<attached_gpus>([0-9]{1,4})</attached_gpus>")
_COMPLETE = (("uuid", "gpu_uuid"), ("product_name",), ("ecc_errors",), ("processes",))


def scan_report(text: str, start: int, *, min_gpus: int = 1) -> Reading | None:
    """The report read straight from the text, as read_report reads the tree; None where the
    scan cannot be sure it reads what the tree reader would (see the module docstring), or
    for fewer than `min_gpus` GPUs."""
    body = text.find(_ROOT_OPEN, start) + len(_ROOT_OPEN)
    if body < len(_ROOT_OPEN) or not _PLAIN_PROLOG.fullmatch(text, start, body - len(_ROOT_OPEN)):
        return None
    attached = _ATTACHED.search(text, body, body + 1000)
    if min_gpus > 1 and attached is not None and int(attached[1]) < min_gpus:
        return None  # the tree reads it (a hint: the count is checked for real below)
    if any(text.find(sign, body) >= 0 for sign in _NOT_PLAIN):
        return None
    end = text.rfind("<")
    unit = _indent_unit(text, body)
    if unit is None or not text.startswith(_ROOT_CLOSE, end):
        return None
    scan = _Scan(unit, ValueReader(PROBE, text))
    try:
        reading = scan.read(text, body, end, min_gpus)
    except _Unsure:
        return None
    # libxml2 checks last, as it costs the most; `...` in what it reads is `...` in `text`.
    checked = "".join([text[start:body], *scan.checked, text[end:]])
    if _DOTS.search(checked) or not _well_formed(checked):
        return None
    return reading


def _indent_unit(text: str, body: int) -> str | None:
    """What indents one level (a tab, or spaces): the line start of the root's first child."""
    lead = text[body : text.find("<", body)]
    unit = lead[lead.rfind("\n") + 1 :]
    if "\n" not in lead or not unit or unit[0] not in " \t" or unit.strip(unit[0]):
        return None
    return unit


class _Null:
    """A parser target that keeps nothing: libxml2 only checks that the document is XML."""

    def close(self) -> None:
        return None


def _well_formed(xml: str) -> bool:
    """Whether libxml2 accepts `xml` (no tree built, no entity or DTD loaded, depth <= 256)."""
    parser = etree.XMLParser(
        target=_Null(), resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        etree.fromstring(xml.encode("utf-8", "surrogateescape"), parser)
    except etree.XMLSyntaxError:
        return False
    return True


def _element_content(path: tuple[str, ...], name: str, piece: str) -> str:
    """The content of the element `<name>` that `piece` follows, up to the next start tag
    that opens a sibling (so `piece` holds its content, its end tag and text after it).

    In well-formed XML that element ends at the last tag of `piece` when that tag is
    `</name>`, no start tag of `name` is inside `piece` and no ancestor is called `name`:
    an earlier end would leave `</name>` to close an element started inside `piece`.
    """
    last = piece.rfind("<")
    if name in path or not piece.startswith(f"</{name}>", last):
        raise _Unsure
    opening = "<" + name
    at = piece.find(opening)
    while at >= 0:
        if piece[at + len(opening)] in _AFTER_NAME:
            raise _Unsure
        at = piece.find(opening, at + 1)
    return piece[:last]


class _Keys(dict[str, str]):
    """normalize_key of each tag, worked out once per document."""

    def __missing__(self, tag: str) -> str:
        key = self[tag] = normalize_key(tag)
        return key

    def of(self, tags: list[str]) -> list[str]:
        """The keys of `tags`: `tags` itself when each is a key already (one test for all)."""
        joined = f",{','.join(tags)},"
        if joined.islower() and "__" not in joined and ",_" not in joined and "_," not in joined:
            return tags
        return list(map(self.__getitem__, tags))


class _Split:
    """An element's content cut at its children's start tags: the text before the first,
    then each child's tag, `/` if it is empty, its text if it is a leaf, and the text after
    it (for a section: its content, its end tag and the text up to the next child)."""

    __slots__ = ("empties", "lead", "leaves", "pieces", "tags")

    def __init__(self, parts: list[Any]) -> None:
        self.lead: str = parts[0]
        self.tags: list[str] = parts[1::4]
        self.empties: list[str | None] = parts[2::4]
        self.leaves: list[str | None] = parts[3::4]
        self.pieces: list[str] = parts[4::4]

    def extend(self, earlier: _Split, at: int) -> None:
        """Append the children of `earlier` from `at` on (the same text follows this)."""
        self.tags += earlier.tags[at:]
        self.empties += earlier.empties[at:]
        self.leaves += earlier.leaves[at:]
        self.pieces += earlier.pieces[at:]

    def alike(self, other: _Split) -> bool:
        """Whether both have the same children, one by one (not the same text)."""
        return self.tags == other.tags and self.empties == other.empties

    def changed(self, other: _Split) -> list[int]:
        """Where the children of an alike split differ in text."""
        differ = map(or_, map(ne, self.pieces, other.pieces), map(ne, self.leaves, other.leaves))
        return list(compress(count(), differ))

    def child_text(self, at: int, indent: str) -> str:
        """Child `at` as it stands in the text, from its line break to the next child's."""
        tag, empty, leaf = self.tags[at], self.empties[at], self.leaves[at]
        if empty:
            start = f"<{tag}{empty}>"
        elif leaf is None:
            start = f"<{tag}>"
        else:
            start = f"<{tag}>{leaf}</{tag}>"
        return indent + start + self.pieces[at]

    def text(self, children: range, indent: str) -> str:
        """The text of these children (consecutive), as it stands."""
        return "".join([self.child_text(at, indent) for at in children])

    def values(self) -> list[str | None]:
        """Each child's value as the tree reader sees it: None for a section."""
        if None not in self.leaves:
            return list(map(str.strip, cast(list[str], self.leaves)))
        return [
            ("" if empty else None) if leaf is None else leaf.strip()
            for leaf, empty in zip(self.leaves, self.empties, strict=True)
        ]

    def value(self, at: int) -> str | None:
        leaf = self.leaves[at]
        if leaf is None:
            return "" if self.empties[at] else None
        return leaf.strip()


class _Section:
    """One element's children in order (key, tag, content, value), and the first content and
    value of each key. The path names the tags from the root down to the element."""

    __slots__ = ("_index", "child_values", "contents", "keys", "path", "tags", "values")

    def __init__(
        self,
        path: tuple[str, ...],
        tags: list[str],
        contents: list[str],
        values: list[str | None],
        keys: list[str],
        *,
        first: tuple[dict[str, str] | None, dict[str, str | None]] | None = None,
    ) -> None:
        self.path = path
        self.tags = tags
        self.keys = keys
        self.contents = contents
        self.child_values = values
        if first is None:
            first = None, dict(zip(reversed(self.keys), reversed(values), strict=True))
        self._index, self.values = first

    @property
    def index(self) -> dict[str, str]:
        """The content of the first child of each key."""
        if self._index is None:
            self._index = dict(zip(reversed(self.keys), reversed(self.contents), strict=True))
        return self._index

    @property
    def children(self) -> Iterator[tuple[str, str, str]]:
        return zip(self.keys, self.tags, self.contents, strict=True)

    def tag(self, key: str) -> str:
        """The tag of the first child `key`."""
        if self.keys is self.tags:
            return key
        return next(tag for name, tag in zip(self.keys, self.tags, strict=True) if name == key)

    def replaced(
        self, tags: list[str], changed: list[int], contents: list[str], values: list[str | None]
    ) -> _Section:
        """The section of an element with the same children, whose `changed` differ."""
        keys = tags if self.keys is self.tags else self.keys
        if len(self.values) < len(keys):  # a repeated key: which child is first matters
            return _Section(self.path, tags, contents, values, keys)
        index, first_values = self.index.copy(), self.values.copy()
        for at in changed:
            index[keys[at]], first_values[keys[at]] = contents[at], values[at]
        return _Section(self.path, tags, contents, values, keys, first=(index, first_values))


def _seeds(
    convert: Callable[[ValueReader, str, str], T], words: tuple[str, ...]
) -> Mapping[str, T]:
    reader = ValueReader(PROBE, "")
    return MappingProxyType({word: convert(reader, word, PROBE) for word in words})


_NOT_AVAILABLE = ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown")
_ZEROS = ("0", "0 %", "0 MiB", "0 MHz", "0 C", "0.00 W")
_WORDS = ("Yes", "No", "Enabled", "Disabled", "Active", "Not Active", "None", "Default")
# What nvidia-smi prints most, converted by ValueReader itself: seeds for each document.
_SEEDED_STRINGS = _seeds(ValueReader.string, _NOT_AVAILABLE + _ZEROS + _WORDS)
_SEEDED_INTEGERS = _seeds(ValueReader.integer, _NOT_AVAILABLE + _ZEROS)
_SEEDED_NUMBERS = _seeds(ValueReader.number, _NOT_AVAILABLE + _ZEROS)
_SEEDED_FLAGS = _seeds(ValueReader.flag, _NOT_AVAILABLE + _WORDS[:6])


class _Values:
    """ValueReader's conversions, each raw value converted once per document. A value it
    would refuse or record as an error makes the scan unsure: the tree reader words it."""

    def __init__(self, reader: ValueReader) -> None:
        self._reader = reader
        self._strings = dict(_SEEDED_STRINGS)
        self._integers = dict(_SEEDED_INTEGERS)
        self._numbers = dict(_SEEDED_NUMBERS)
        self._flags = dict(_SEEDED_FLAGS)

    def _convert(self, cache: dict[str, T], convert: Callable[[str, str], T], raw: str) -> T:
        try:
            value = convert(raw, PROBE)
        except ProbeParseError:
            raise _Unsure from None
        if self._reader.error_fields:
            raise _Unsure
        cache[raw] = value
        return value

    def string(self, raw: str | None) -> str | None:
        if raw is None:
            return None
        if raw in self._strings:
            return self._strings[raw]
        return self._convert(self._strings, self._reader.string, raw)

    def integer(self, raw: str | None) -> int | None:
        if raw is None:
            return None
        if raw in self._integers:
            return self._integers[raw]
        digits, space, unit = raw.partition(" ")
        if _plain_number(digits, space, unit) and "." not in digits:
            value = self._integers[raw] = int(digits)
            return value
        return self._convert(self._integers, self._reader.integer, raw)

    def number(self, raw: str | None) -> float | None:
        if raw is None:
            return None
        if raw in self._numbers:
            return self._numbers[raw]
        digits, space, unit = raw.partition(" ")
        if _plain_number(digits, space, unit):
            value = self._numbers[raw] = float(digits)
            return value
        return self._convert(self._numbers, self._reader.number, raw)

    def flag(self, raw: str | None) -> bool | None:
        if raw is None:
            return None
        if raw in self._flags:
            return self._flags[raw]
        return self._convert(self._flags, self._reader.flag, raw)


def _plain_number(digits: str, space: str, unit: str) -> bool:
    """Whether `digits space unit` is a number ValueReader reads as float(digits): ASCII
    digits, maybe one `.` between digits, few enough for a float to hold them exactly, and
    no unit or a common one."""
    whole, dot, fraction = digits.partition(".")
    return (
        len(digits) <= 15
        and digits.isascii()
        and whole.isdigit()
        and (not dot or fraction.isdigit())
        and (not space or unit in _UNITS)
    )


_UNITS = frozenset({"C", "%", "MiB", "KiB", "GiB", "MHz", "W", "V", "mV"})


class _GpuText:
    """One `<gpu>` of the root in `text`: `[start:begin]` its start tag (from its line break),
    `[begin:last]` its content, `[last:stop]` its end tag and the text up to the next GPU."""

    __slots__ = ("begin", "ident", "last", "start", "stop", "text")

    def __init__(self, text: str, ident: str, *bounds: int) -> None:
        self.text, self.ident = text, ident
        self.start, self.begin, self.last, self.stop = bounds

    def content(self, less: int = 0) -> str:
        """The content, but its last `less` characters."""
        return self.text[self.begin : self.last - less]

    def ends_with(self, tail: str) -> bool:
        """Whether the content ends with `tail`."""
        begin = self.last - len(tail)
        return begin >= self.begin and self.text.startswith(tail, begin, self.last)

    def around(self, content: str) -> tuple[str, str, str]:
        """The GPU's text with `content` for its own."""
        text = self.text
        return text[self.start : self.begin], content, text[self.last : self.stop]


@dataclass(frozen=True, slots=True)
class _Seen:
    """A GPU read: its children, its facts, whether it looks complete, and the text of its
    children after the last that differed from the GPU before (the next GPU likely ends so)."""

    split: _Split
    section: _Section
    fields: dict[str, Any]  # GpuFacts'
    complete: bool
    tail: tuple[int, str] = (0, "")


class _Scan:
    """One document read from its text.

    A host's GPUs print alike: each GPU is compared with the one before, and only children
    whose text differs are verified and read again (the facts reading only the others are
    the previous GPU's). `checked` collects the root's content without those repeated
    children for libxml2 to check: each is a complete element whose very text libxml2 reads
    in an earlier GPU, so the document is well formed exactly when what libxml2 reads is.
    """

    def __init__(self, unit: str, reader: ValueReader) -> None:
        self.values = _Values(reader)
        self.checked: list[str] = []
        self._unit = unit
        self._keys = _Keys()
        self._children: list[re.Pattern[str]] = []  # a child's start at each depth
        self._sections: dict[tuple[tuple[str, ...], str], _Section] = {}

    def read(self, text: str, body: int, end: int, min_gpus: int) -> Reading:
        """The report in the root element, `text[body:end]`."""
        first, gpus = self._gpu_texts(text, body, end)
        if len(gpus) < min_gpus:
            raise _Unsure
        header = self.section(_ROOT, text[body:first])
        if "gpu" in header.index:
            raise _Unsure  # a GPU without the id nvidia-smi prints
        self.checked.append(text[body:first])
        values = self.values
        attached = values.integer(header.values.get("attached_gpus"))
        positional = attached == len(gpus)
        seen: list[_Seen] = []
        for index, gpu in enumerate(gpus):
            seen.append(self._gpu(gpu, index if positional else None, seen[-1] if seen else None))
        return Reading(
            format=Format.XML,
            complete=positional and all(gpu.complete for gpu in seen),
            gpus=tuple(GpuFacts(**gpu.fields) for gpu in seen),
            timestamp=values.string(header.values.get("timestamp")),
            driver_version=values.string(header.values.get("driver_version")),
            cuda_version=values.string(header.values.get("cuda_version")),
            attached_gpus=attached,
        )

    def _gpu_texts(self, text: str, body: int, end: int) -> tuple[int, list[_GpuText]]:
        """Where the first GPU starts, and each GPU (the root's last children).

        A GPU's end needs no start-tag search: `_gpu` splits every GPU into verified
        children, which proves that its content ends at its last tag, `</gpu>`.
        """
        opening = f'\n{self._unit}<gpu id="'
        first = at = text.find(opening, body, end)
        if at < 0:
            raise _Unsure  # no GPU, or none with the id nvidia-smi prints
        gpus: list[_GpuText] = []
        size = 0
        while at >= 0:
            begin = at + len(opening)
            # GPUs print alike: look for the next one from three quarters of the last's size.
            following = text.find(opening, begin + size * 3 // 4, end)
            stop = end if following < 0 else following
            size = stop - begin
            close = text.find('">', begin, stop)
            last = text.rfind("<", begin, stop)
            ident = text[begin:close]
            if close < 0 or _NOT_IN_ID.search(ident) or not text.startswith("</gpu>", last):
                raise _Unsure
            gpus.append(_GpuText(text, ident, at, close + 2, last, stop))
            at = following
        return first, gpus

    def _gpu(self, gpu: _GpuText, index: int | None, previous: _Seen | None) -> _Seen:
        """One GPU read, from the GPU before where its children's text is the same."""
        tail_at, tail = previous.tail if previous is not None else (0, "")
        if previous is not None and tail and gpu.ends_with(tail):
            # Cut only the text before the tail: it would be cut just as it was before.
            split = _Split(self._parts(2, gpu.content(len(tail))))
            split.extend(previous.split, tail_at)
        else:
            split, tail = self._gpu_split(gpu.content()), ""
        if previous is None or not split.alike(previous.split):
            return self._first(gpu, index, split)
        changed = split.changed(previous.split)
        contents, values = previous.section.contents.copy(), previous.section.child_values.copy()
        for at in changed:
            contents[at] = self._child(_GPU, split, at)
            values[at] = split.value(at)
        section = previous.section.replaced(split.tags, changed, contents, values)
        fields = {field for at in changed for field in _FACTS_OF.get(section.keys[at], ())}
        facts = _GpuScan(self, section).read_like(previous.fields, fields, gpu.ident, index)
        indent = "\n" + self._unit * 2
        kept = [split.child_text(at, indent) for at in changed]
        self.checked += gpu.around("".join([split.lead, *kept]))
        # The next GPU likely ends as this one does after its last change.
        last = changed[-1] + 1 if changed else 0
        if not tail or last < tail_at:
            tail = split.text(range(last, tail_at if tail else len(values)), indent) + tail
            tail_at = last
        return _Seen(split, section, facts, previous.complete, (tail_at, tail))

    def _gpu_split(self, content: str) -> _Split:
        """A GPU's split, cut around the child no fact reads and nvidia-smi prints at length
        (the clocks each memory clock supports: half of a GPU's text)."""
        opening, closing = f"\n{self._unit * 2}<{_BULKY}>", f"</{_BULKY}>"
        start = content.find(opening)
        end = content.find(closing, start) if start >= 0 else -1
        if end < 0:
            return _Split(self._parts(2, content))
        end += len(closing)
        rest = self._parts(2, content[end:])  # verified (_element_content) with the others
        bulky = content[start + len(opening) : end] + rest[0]
        return _Split([*self._parts(2, content[:start]), _BULKY, None, None, bulky, *rest[1:]])

    def _first(self, gpu: _GpuText, index: int | None, split: _Split) -> _Seen:
        """A GPU read in full (the first, or one unlike the GPU before)."""
        contents, keys = self._verified(_GPU, split), self._keys.of(split.tags)
        section = _Section(_GPU, split.tags, contents, split.values(), keys)
        reader = _GpuScan(self, section)
        self.checked += gpu.around(gpu.content())
        # Until a GPU tells which children change, expect the largest child on to repeat.
        largest = max(range(len(split.pieces)), key=lambda at: len(split.pieces[at]), default=0)
        tail = (largest, split.text(range(largest, len(split.pieces)), "\n" + self._unit * 2))
        facts = reader.read(gpu.ident, index)
        return _Seen(split, section, facts, reader.looks_complete(), tail)

    def section(self, path: tuple[str, ...], content: str) -> _Section:
        """The element at `path` with this content, split into its verified children."""
        key = (path, content)
        found = self._sections.get(key)
        if found is None:
            found = self._sections[key] = self._new_section(path, content)
        return found

    def _new_section(self, path: tuple[str, ...], content: str) -> _Section:
        parts = self._parts(len(path), content)
        leaves = cast(list[str | None], parts[3::4])
        if None not in leaves:  # only leaves (most sections): none may hide a sibling
            if "<" in "".join(parts[4::4]):
                raise _Unsure
            texts, tags = cast(list[str], leaves), parts[1::4]
            return _Section(path, tags, texts, list(map(str.strip, texts)), self._keys.of(tags))
        split = _Split(parts)
        contents, keys = self._verified(path, split), self._keys.of(split.tags)
        return _Section(path, split.tags, contents, split.values(), keys)

    def _parts(self, depth: int, content: str) -> list[Any]:
        """`content` cut at its children's start tags (those indented `depth` units)."""
        while len(self._children) <= depth:
            indent = re.escape("\n" + self._unit * len(self._children))
            self._children.append(re.compile(indent + _CHILD))
        parts = self._children[depth].split(content)
        if "<" in parts[0]:
            raise _Unsure  # a child that does not start its own line at its depth
        return parts

    def _verified(self, path: tuple[str, ...], split: _Split) -> list[str]:
        """Each child's content, once every child is shown to be complete."""
        if None not in split.leaves:  # only leaves (most sections)
            if "<" in "".join(split.pieces):
                raise _Unsure  # a sibling that does not start its own line
            return cast(list[str], split.leaves)
        contents: list[str] = []
        plain: list[str] = []  # what follows each leaf or empty child: no tag may hide there
        for tag, empty, leaf, piece in zip(
            split.tags, split.empties, split.leaves, split.pieces, strict=True
        ):
            if leaf is not None or empty:
                plain.append(piece)
                contents.append(leaf or "")
            else:
                contents.append(_element_content(path, tag, piece))
        if "<" in "".join(plain):
            raise _Unsure
        return contents

    def _child(self, path: tuple[str, ...], split: _Split, at: int) -> str:
        """The content of child `at` (see _element_content)."""
        leaf, piece = split.leaves[at], split.pieces[at]
        if leaf is not None or split.empties[at]:
            if "<" in piece:
                raise _Unsure  # a sibling that does not start its own line
            return leaf or ""
        return _element_content(path, split.tags[at], piece)


class _GpuScan:
    """One GPU read from its verified children by nvidia_smi_xml._GpuReader's rules: the same
    paths, alternatives and fallbacks (_FACTS lists what each fact reads)."""

    def __init__(self, scan: _Scan, gpu: _Section) -> None:
        self.scan = scan
        self.gpu = gpu
        self.string = scan.values.string
        self.integer = scan.values.integer
        self.number = scan.values.number
        self.flag = scan.values.flag
        self.sections: dict[str, _Section | None] = {}

    def looks_complete(self) -> bool:
        return all(any(name in self.gpu.values for name in names) for names in _COMPLETE)

    def read(self, ident: str, index: int | None) -> dict[str, Any]:
        """GpuFacts' fields."""
        return {**self.identity(ident, index), **{f: read(self) for f, (_, read) in _FACTS.items()}}

    def read_like(
        self, like: dict[str, Any], fields: set[str], ident: str, index: int | None
    ) -> dict[str, Any]:
        """GpuFacts' fields of a GPU whose facts but `fields` are those of the GPU `like`."""
        again = {field: _FACTS[field][1](self) for field in fields}
        return {**like, **self.identity(ident, index), **again}

    def identity(self, ident: str, index: int | None) -> dict[str, Any]:
        reported = ident or self.string(self.below("pci", "pci_bus_id", "bus_id"))
        bus_id = normalize_bus_id(reported) if reported else None
        return {"index": index, "bus_id": bus_id, "bus_id_reported": reported}

    def sub(self, base: _Section | None, name: str) -> _Section | None:
        """The first child `name` of `base`, split into its own children."""
        if base is None or (content := base.index.get(name)) is None:
            return None
        return self.scan.section((*base.path, base.tag(name)), content)

    def at(self, name: str) -> _Section | None:
        """The GPU's first child `name`, split (once per reader)."""
        if name not in self.sections:
            self.sections[name] = self.sub(self.gpu, name)
        return self.sections[name]

    def all(self, base: _Section, name: str) -> list[_Section]:
        section = self.scan.section
        return [section((*base.path, tag), c) for key, tag, c in base.children if key == name]

    def own(self, *names: str) -> str | None:
        """The value of the GPU's first child named one of `names` (the first that exists)."""
        return _pick(self.gpu.values, names)

    def below(self, parent: str, *names: str) -> str | None:
        """The value of the first of `names` in the GPU's first child `parent`."""
        section = self.at(parent)
        return None if section is None else _pick(section.values, names)

    def path(self, base: _Section, *paths: str) -> str | None:
        """The value at the first of `paths` (`a/b/c` below `base`) that exists."""
        for path in paths:
            *parents, name = path.split("/")
            section: _Section | None = base
            for parent in parents:
                section = self.sub(section, parent)
            if section is not None and name in section.values:
                return section.values[name]
        return None

    def mig(self) -> MigFacts:
        section = self.at("mig_devices")
        devices = None
        if section is not None:
            devices = tuple(self.mig_device(node) for node in self.all(section, "mig_device"))
        return MigFacts(
            enabled=self.flag(self.below("mig_mode", "current_mig", "current")),
            pending_enabled=self.flag(self.below("mig_mode", "pending_mig", "pending")),
            devices=devices,
        )

    def mig_device(self, node: _Section) -> MigDevice:
        values, integer = node.values, self.integer
        return MigDevice(
            index=integer(values.get("index")),
            gpu_instance_id=integer(values.get("gpu_instance_id")),
            compute_instance_id=integer(values.get("compute_instance_id")),
            multiprocessors=integer(
                self.path(node, "device_attributes/shared/multiprocessor_count")
            ),
            memory_total=integer(self.path(node, "fb_memory_usage/total")),
            memory_used=integer(self.path(node, "fb_memory_usage/used")),
            sram_uncorrectable=integer(
                self.path(
                    node,
                    "ecc_error_count/volatile_count/sram_uncorrectable",
                    "ecc_errors/volatile/sram_uncorrectable",
                )
            ),
        )

    def ecc(self) -> EccFacts:
        errors = self.at("ecc_errors")
        sources = self.counts(self.sub(errors, "aggregate_uncorrectable_sram_sources"))
        return EccFacts(
            enabled=self.flag(self.below("ecc_mode", "current_ecc", "current")),
            pending_enabled=self.flag(self.below("ecc_mode", "pending_ecc", "pending")),
            volatile=self.ecc_counters(self.sub(errors, "volatile")),
            aggregate=self.ecc_counters(self.sub(errors, "aggregate")),
            aggregate_uncorrectable_sram_sources=frozen_map(
                {sram_source_name(key): count for key, count in sources.items()}
            ),
            channel_repair_pending=self.flag(self.below("ecc_errors", "channel_repair_pending")),
            tpc_repair_pending=self.flag(self.below("ecc_errors", "tpc_repair_pending")),
            unrepairable_memory=self.flag(self.below("ecc_errors", "unrepairable_memory")),
        )

    def counts(self, section: _Section | None, skip: str = "") -> dict[str, int | None]:
        """Every `key: count` child of a section (a section child counts as None)."""
        if section is None:
            return {}
        integer = self.integer
        pairs = zip(section.keys, section.child_values, strict=True)
        return {key: integer(value) for key, value in pairs if key != skip}

    def ecc_counters(self, base: _Section | None) -> EccCounters:
        if base is None:
            return EccCounters()
        values, integer = base.values, self.integer
        parity = integer(values.get("sram_uncorrectable_parity"))
        secded = integer(_pick(values, ("sram_uncorrectable_secded", "sram_uncorrectable_sec_ded")))
        sram_unc = integer(values.get("sram_uncorrectable"))
        if sram_unc is None:
            sram_unc = sum_known(parity, secded)
        sram_corr = integer(values.get("sram_correctable"))
        dram_corr = integer(values.get("dram_correctable"))
        dram_unc = integer(values.get("dram_uncorrectable"))
        single, double = self.sub(base, "single_bit"), self.sub(base, "double_bit")
        return EccCounters(
            sbe=sum_known(sram_corr, dram_corr)
            if single is None
            else integer(single.values.get("total")),
            dbe=sum_known(sram_unc, dram_unc)
            if double is None
            else integer(double.values.get("total")),
            sram_correctable=sram_corr,
            sram_uncorrectable=sram_unc,
            sram_uncorrectable_parity=parity,
            sram_uncorrectable_secded=secded,
            dram_correctable=dram_corr,
            dram_uncorrectable=dram_unc,
            sram_threshold_exceeded=self.flag(values.get("sram_threshold_exceeded")),
            sbe_by_location=frozen_map(self.counts(single, skip="total")),
            dbe_by_location=frozen_map(self.counts(double, skip="total")),
        )

    def retired_pages(self) -> RetiredPages:
        base = self.at("retired_pages")
        if base is None:
            return RetiredPages()
        pending = [self.flag(base.values.get(path)) for path in PENDING_RETIREMENT]
        known = [flag for flag in pending if flag is not None]
        return RetiredPages(
            sbe=self.integer(
                self.path(base, "multiple_single_bit_retirement/retired_count", "single_bit_ecc")
            ),
            dbe=self.integer(
                self.path(base, "double_bit_retirement/retired_count", "double_bit_ecc")
            ),
            pending=any(known) if known else None,
        )

    def remapped_rows(self) -> RemappedRows:
        base = self.at("remapped_rows")
        if base is None:
            return RemappedRows()
        histogram = self.sub(base, "row_remapper_histogram") or self.sub(
            base, "bank_remap_availability_histogram"
        )
        bins = {
            key.removeprefix("row_remapper_histogram_"): count
            for key, count in self.counts(histogram).items()
        }
        values = base.values
        return RemappedRows(
            correctable=self.integer(_pick(values, ("remapped_row_corr", "correctable_error"))),
            uncorrectable=self.integer(_pick(values, ("remapped_row_unc", "uncorrectable_error"))),
            pending=self.flag(_pick(values, ("remapped_row_pending", "pending"))),
            failure=self.flag(
                _pick(values, ("remapped_row_failure", "remapping_failure_occurred"))
            ),
            histogram=frozen_map(bins),
        )

    def temperature(self) -> Temperatures:
        base = self.at("temperature")
        if base is None:
            return Temperatures()
        values, integer = base.values, self.integer
        paths = TEMPERATURE_PATHS.items()
        return Temperatures(**{field: integer(_pick(values, alts)) for field, alts in paths})

    def power(self) -> Power:
        base = self.at("gpu_power_readings") or self.at("power_readings")
        if base is None:
            return Power()
        values, number = base.values, self.number
        instant = number(_pick(values, ("instant_power_draw", "instantaneous_power_draw")))
        draw = number(_pick(values, ("power_draw", "average_power_draw")))
        return Power(
            draw=instant if draw is None else draw,
            draw_instant=instant,
            limit=number(
                _pick(values, ("current_power_limit", "enforced_power_limit", "power_limit"))
            ),
            default_limit=number(values.get("default_power_limit")),
            max_limit=number(values.get("max_power_limit")),
        )

    def memory(self) -> MemoryUsage:
        base = self.at("fb_memory_usage")
        if base is None:
            return MemoryUsage()
        values, integer = base.values, self.integer
        return MemoryUsage(
            total=integer(values.get("total")),
            used=integer(values.get("used")),
            free=integer(values.get("free")),
            reserved=integer(values.get("reserved")),
        )

    def utilization(self) -> Utilization:
        return Utilization(
            gpu=self.integer(self.below("utilization", "gpu_util", "gpu")),
            memory=self.integer(self.below("utilization", "memory_util", "memory")),
        )

    def clocks(self) -> Clocks:
        integer, below = self.integer, self.below
        return Clocks(
            **{field: integer(below(parent, *names)) for field, (parent, names) in _CLOCKS.items()}
        )

    def throttle_reasons(self) -> tuple[str, ...] | None:
        base = self.at("clocks_event_reasons") or self.at("clocks_throttle_reasons")
        if base is None or not base.keys:
            return None
        flag = self.flag
        states = {reason_name(key): flag(value) for key, value in self.descendants(base)}
        if all(state is None for state in states.values()):
            return None
        return tuple(reason for reason, state in states.items() if state)

    def descendants(self, base: _Section) -> list[tuple[str, str]]:
        """Every (key, value) below `base`, depth first, as nvidia_smi_xml._descendants."""
        found: list[tuple[str, str]] = []
        for (key, tag, content), value in zip(base.children, base.child_values, strict=True):
            if value is not None:
                found.append((key, value))
            else:
                found.extend(self.descendants(self.scan.section((*base.path, tag), content)))
        return found

    def processes(self) -> tuple[GpuProcess, ...] | None:
        base = self.at("processes")
        if base is None:
            return None
        if infos := self.all(base, "process_info"):
            return tuple(self.process(info) for info in infos)
        if base.keys:
            raise _Unsure  # -q text's process layout: the tree reader judges it
        if (self.gpu.values["processes"] or "").lower() not in ("none", ""):
            raise _Unsure  # a word the tree reader refuses
        return ()

    def process(self, node: _Section) -> GpuProcess:
        values, integer = node.values, self.integer
        pid = integer(values.get("pid"))
        if pid is None:
            raise _Unsure  # the tree reader refuses it, with its line
        return GpuProcess(
            pid=pid,
            name=self.string(values.get("process_name")),
            type=self.string(values.get("type")),
            used_memory_mib=integer(values.get("used_memory")),
            gpu_instance_id=integer(values.get("gpu_instance_id")),
            compute_instance_id=integer(values.get("compute_instance_id")),
        )

    def fabric(self) -> Fabric | None:
        base = self.at("fabric")
        if base is None:
            return None
        values, string = base.values, self.string
        return Fabric(
            state=string(values.get("state")),
            status=string(values.get("status")),
            clique_id=string(values.get("cliqueid")),
            cluster_uuid=string(values.get("clusteruuid")),
            health=string(self.path(base, "health/summary")),
        )


def _pick(values: Mapping[str, str | None], names: tuple[str, ...]) -> str | None:
    """The value of the first of `names` that is a child (None for a section)."""
    for name in names:
        if name in values:
            return values[name]
    return None


def _parent_and_names(paths: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """`("clocks/sm_clock", "clocks/sm")` -> `("clocks", ("sm_clock", "sm"))`."""
    parents, names = zip(*(path.split("/") for path in paths), strict=True)
    if len(set(parents)) != 1:
        raise ValueError(f"alternatives under different parents: {paths}")
    return parents[0], names


_CLOCKS = MappingProxyType(
    {field: _parent_and_names(paths) for field, paths in CLOCK_PATHS.items()}
)

_Fact = tuple[frozenset[str], Callable[[_GpuScan], Any]]


def _leaf_fact(convert: Callable[[_GpuScan, str | None], Any], path: str) -> _Fact:
    parent, _, name = path.rpartition("/")
    if parent:
        return frozenset({parent}), lambda gpu: convert(gpu, gpu.below(parent, name))
    return frozenset({name}), lambda gpu: convert(gpu, gpu.own(name))


def _own_fact(convert: Callable[[_GpuScan, str | None], Any], *names: str) -> _Fact:
    return frozenset(names), lambda gpu: convert(gpu, gpu.own(*names))


def _section_fact(read: Callable[[_GpuScan], Any], *children: str) -> _Fact:
    return frozenset(children), read


def _text(gpu: _GpuScan, raw: str | None) -> str | None:
    return gpu.string(raw)


def _flag(gpu: _GpuScan, raw: str | None) -> bool | None:
    return gpu.flag(raw)


def _recovery(gpu: _GpuScan, raw: str | None) -> str | None:
    return recovery_action_name(gpu.string(raw))


# Each fact of a GPU (but its index and bus id), the GPU's children it reads, and how.
_FACTS: Mapping[str, _Fact] = MappingProxyType(
    {
        "uuid": _own_fact(_text, "uuid", "gpu_uuid"),
        "name": _own_fact(_text, "product_name"),
        "architecture": _own_fact(_text, "product_architecture"),
        "serial": _own_fact(_text, "serial", "serial_number"),
        "vbios": _own_fact(_text, "vbios_version"),
        "persistence_mode": _own_fact(_flag, "persistence_mode"),
        "compute_mode": _own_fact(_text, "compute_mode"),
        "performance_state": _own_fact(_text, "performance_state"),
        "mig": _section_fact(_GpuScan.mig, "mig_mode", "mig_devices"),
        "ecc": _section_fact(_GpuScan.ecc, "ecc_mode", "ecc_errors"),
        "retired_pages": _section_fact(_GpuScan.retired_pages, "retired_pages"),
        "remapped_rows": _section_fact(_GpuScan.remapped_rows, "remapped_rows"),
        "temperature": _section_fact(_GpuScan.temperature, "temperature"),
        "power": _section_fact(_GpuScan.power, "gpu_power_readings", "power_readings"),
        "memory": _section_fact(_GpuScan.memory, "fb_memory_usage"),
        "utilization": _section_fact(_GpuScan.utilization, "utilization"),
        "clocks": _section_fact(_GpuScan.clocks, *(parent for parent, _ in _CLOCKS.values())),
        "throttle_reasons": _section_fact(
            _GpuScan.throttle_reasons, "clocks_event_reasons", "clocks_throttle_reasons"
        ),
        "processes": _section_fact(_GpuScan.processes, "processes"),
        "fabric": _section_fact(_GpuScan.fabric, "fabric"),
        "recovery_action": _own_fact(_recovery, "gpu_recovery_action"),
        "reset_required": _leaf_fact(_flag, "gpu_reset_status/reset_required"),
        "drain_and_reset_recommended": _leaf_fact(
            _flag, "gpu_reset_status/drain_and_reset_recommended"
        ),
    }
)
# The facts that read each child of a GPU.
_FACTS_OF: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        child: tuple(field for field, (sources, _) in _FACTS.items() if child in sources)
        for child in frozenset().union(*(sources for sources, _ in _FACTS.values()))
    }
)


# --- the tree: lxml's elements seen as report nodes ---------------------------------------


def _parse(data: bytes, text: str, start: int) -> _Element | None:
    """The root element, or None when libxml2 rejects the bytes (the slow path then judges)."""
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
