"""The nvidia_smi scan: the probe's own `-q -x` output read from its text, without lxml's tree.

What it reads: nvidia-smi's own layout, each element on a line of its own, indented one unit
(a tab, or spaces) per level. It cuts an element at its children's start tags and proves each
child complete before reading it (`_element_content`); it splits only the sections a fact
reads (nvidia_smi_scan_facts reads a GPU's facts from them); and a GPU whose children repeat
the previous GPU's text word for word takes those children's facts from it. Last, expat
(Python's pyexpat, with namespaces) checks that the document is XML, without building a tree
and leaving out the repeated children (`_Scan`). Not lxml: its libxml2 is 3-4 MB of a run's
memory (issue 21), and lxml now loads only when the tree reads a document; expat takes 0.17
ms where libxml2 took 0.08 for a lab host's 8 GPUs.

When it declines (`scan_report` returns None) the tree (lxml's elements walked by
nvidia_smi_xml.read_report, in nvidia_smi_fast) reads the document: for whatever the scan is
not sure of, that is a reference (`&amp;`), a comment, CDATA or a processing instruction, a
carriage return, a prolog other than nvidia-smi's (`<?xml ...?>`, `<!DOCTYPE nvidia_smi_log
SYSTEM "...">`), a root with attributes, a `<gpu>` without a plain `id`, an element not on a
line of its own at its depth, a tag with attributes or a space, an element inside one of its
own name, and any value the report reader refuses or records as an error (the tree reader
words the error, with its line); for fewer GPUs than the caller asks for; and for a document
expat rejects.

Why that is sound: a child is read only once proven complete (in well-formed XML an element
ends at its piece's last tag when that is its own end tag and no start tag of its name is
inside), and expat still checks every document is XML. The repeated children it is spared
are each a complete element whose very text expat reads in an earlier GPU, so the document
is well formed exactly when what expat reads is. One difference from the tree is kept:
libxml2 refuses elements nested more than 256 deep, expat has no such limit, so a document
whose unread sections nest that deep (nvidia-smi's nest 4) is read by the scan where the tree
refuses it; every fact the scan reads is still in a child it proved complete.
tests/probes/test_nvidia_smi_fast.py holds the scan to the tree on every XML sample,
multi-GPU copies of each and hundreds of damaged ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import compress, count
from operator import ne, or_
from pyexpat import ExpatError, ParserCreate
from typing import Any, cast

from fleetfix.probes.gpu_facts import Format, GpuFacts, Reading, ValueReader
from fleetfix.probes.nvidia_smi_scan_facts import FACTS_OF, GpuScan, Section, Unsure, Values
from fleetfix.probes.nvidia_smi_xml import PROBE, normalize_key

DOTS = re.compile(r"\.\.\.")  # as `"..." in text`, at half the cost
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
    except Unsure:
        return None
    # expat checks last, as it costs the most; `...` in what it reads is `...` in `text`.
    checked = "".join([text[start:body], *scan.checked, text[end:]])
    if DOTS.search(checked) or not _well_formed(checked):
        return None
    return reading


def _indent_unit(text: str, body: int) -> str | None:
    """What indents one level (a tab, or spaces): the line start of the root's first child."""
    lead = text[body : text.find("<", body)]
    unit = lead[lead.rfind("\n") + 1 :]
    if "\n" not in lead or not unit or unit[0] not in " \t" or unit.strip(unit[0]):
        return None
    return unit


def _well_formed(xml: str) -> bool:
    """Whether expat accepts `xml` as XML with namespaces (no tree built, no external entity
    or DTD loaded: pyexpat fetches nothing without a handler for it)."""
    parser = ParserCreate(namespace_separator=" ")
    try:
        parser.Parse(xml.encode("utf-8", "surrogateescape"), True)
    except ExpatError:
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
        raise Unsure
    opening = "<" + name
    at = piece.find(opening)
    while at >= 0:
        if piece[at + len(opening)] in _AFTER_NAME:
            raise Unsure
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
    section: Section
    fields: dict[str, Any]  # GpuFacts'
    complete: bool
    tail: tuple[int, str] = (0, "")


class _Scan:
    """One document read from its text.

    A host's GPUs print alike: each GPU is compared with the one before, and only children
    whose text differs are verified and read again (the facts reading only the others are
    the previous GPU's). `checked` collects the root's content without those repeated
    children for expat to check: each is a complete element whose very text expat reads in
    an earlier GPU, so the document is well formed exactly when what expat reads is.
    """

    def __init__(self, unit: str, reader: ValueReader) -> None:
        self.values = Values(reader)
        self.checked: list[str] = []
        self._unit = unit
        self._keys = _Keys()
        self._children: list[re.Pattern[str]] = []  # a child's start at each depth
        self._sections: dict[tuple[tuple[str, ...], str], Section] = {}

    def read(self, text: str, body: int, end: int, min_gpus: int) -> Reading:
        """The report in the root element, `text[body:end]`."""
        first, gpus = self._gpu_texts(text, body, end)
        if len(gpus) < min_gpus:
            raise Unsure
        header = self.section(_ROOT, text[body:first])
        if "gpu" in header.index:
            raise Unsure  # a GPU without the id nvidia-smi prints
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
            raise Unsure  # no GPU, or none with the id nvidia-smi prints
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
                raise Unsure
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
        fields = {field for at in changed for field in FACTS_OF.get(section.keys[at], ())}
        facts = GpuScan(self, section).read_like(previous.fields, fields, gpu.ident, index)
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
        section = Section(_GPU, split.tags, contents, split.values(), keys)
        reader = GpuScan(self, section)
        self.checked += gpu.around(gpu.content())
        # Until a GPU tells which children change, expect the largest child on to repeat.
        largest = max(range(len(split.pieces)), key=lambda at: len(split.pieces[at]), default=0)
        tail = (largest, split.text(range(largest, len(split.pieces)), "\n" + self._unit * 2))
        facts = reader.read(gpu.ident, index)
        return _Seen(split, section, facts, reader.looks_complete(), tail)

    def section(self, path: tuple[str, ...], content: str) -> Section:
        """The element at `path` with this content, split into its verified children."""
        key = (path, content)
        found = self._sections.get(key)
        if found is None:
            found = self._sections[key] = self._new_section(path, content)
        return found

    def _new_section(self, path: tuple[str, ...], content: str) -> Section:
        parts = self._parts(len(path), content)
        leaves = cast(list[str | None], parts[3::4])
        if None not in leaves:  # only leaves (most sections): none may hide a sibling
            if "<" in "".join(parts[4::4]):
                raise Unsure
            texts, tags = cast(list[str], leaves), parts[1::4]
            return Section(path, tags, texts, list(map(str.strip, texts)), self._keys.of(tags))
        split = _Split(parts)
        contents, keys = self._verified(path, split), self._keys.of(split.tags)
        return Section(path, split.tags, contents, split.values(), keys)

    def _parts(self, depth: int, content: str) -> list[Any]:
        """`content` cut at its children's start tags (those indented `depth` units)."""
        while len(self._children) <= depth:
            indent = re.escape("\n" + self._unit * len(self._children))
            self._children.append(re.compile(indent + _CHILD))
        parts = self._children[depth].split(content)
        if "<" in parts[0]:
            raise Unsure  # a child that does not start its own line at its depth
        return parts

    def _verified(self, path: tuple[str, ...], split: _Split) -> list[str]:
        """Each child's content, once every child is shown to be complete."""
        if None not in split.leaves:  # only leaves (most sections)
            if "<" in "".join(split.pieces):
                raise Unsure  # a sibling that does not start its own line
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
            raise Unsure
        return contents

    def _child(self, path: tuple[str, ...], split: _Split, at: int) -> str:
        """The content of child `at` (see _element_content)."""
        leaf, piece = split.leaves[at], split.pieces[at]
        if leaf is not None or split.empties[at]:
            if "<" in piece:
                raise Unsure  # a sibling that does not start its own line
            return leaf or ""
        return _element_content(path, split.tags[at], piece)
