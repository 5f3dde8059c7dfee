"""Read `nvidia-smi -q` text into a report tree; clean pasted nvidia-smi family output.

`clean_paste` is shared by the nvidia_smi, gpu_processes, nvlink and topology parsers. It
uses fleetfix.probes.text for the generic paste artefacts (CRLF, markdown `> ` quoting, shell
prompt lines, a common indent) and adds what this tool family needs: a bare command line
left above the output (`nvidia-smi nvlink -s`), `...`/`[...]` elisions (dropped, but the
paste is flagged `elided`), whole-line `# ...` comments a poster adds (no line of these
tools' output starts with `#`: nvidia-smi -q, -q -x, the table, --query CSV, nvlink, topo,
fuser), and the `### fleetfix <section> key=value` markers fleetfix's own commands print
(taken out and returned separately).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetfix.errors import ProbeParseError
from fleetfix.probes.gpu_facts import Format, Reading
from fleetfix.probes.nvidia_smi_xml import Node, normalize_key, read_report
from fleetfix.probes.text import Line, dedent, drop_prompts, is_elision, split_lines, strip_quotes

__all__ = [
    "MARKER_PREFIX",
    "TOOL_ERROR",
    "Line",
    "Marker",
    "Paste",
    "Section",
    "clean_paste",
    "parse_marker",
    "read_text",
    "sections",
    "text_tree",
]

MARKER_PREFIX = "### fleetfix "
_COMMAND = re.compile(r"^\s*(?:sudo\s+)?(?P<command>(?:nvidia-smi|fuser)(?:\s.*)?)$")
TOOL_ERROR = re.compile(
    r"^(?:No devices were found"
    r"|NVIDIA-SMI has failed because .*"
    r"|Failed to initialize NVML: .*"
    r"|NVML library version: .*"
    r"|Unable to determine the device handle for .*)$",
    re.IGNORECASE,
)
"""A line nvidia-smi prints instead of data when the driver, NVML or a GPU fails."""
_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_GPU_HEADER = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_KEY_VALUE = re.compile(r"^(?P<key>\S.*?)\s*:(?:\s+(?P<value>.*))?$")
_SECTION_NAME = re.compile(r"[A-Za-z][\w .()/+-]*")


@dataclass(frozen=True, slots=True)
class Marker:
    """A `### fleetfix <name> [key=value ...]` line a fleetfix command printed."""

    number: int
    name: str
    fields: tuple[tuple[str, str], ...]

    def get(self, key: str) -> str | None:
        return next((value for name, value in self.fields if name == key), None)


@dataclass(frozen=True, slots=True)
class Paste:
    """Tool output with paste artefacts removed; `elided` when a human cut lines out."""

    lines: tuple[Line, ...]
    elided: bool = False
    command: str | None = None
    markers: tuple[Marker, ...] = ()

    def joined(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def nonblank(self) -> tuple[Line, ...]:
        return tuple(line for line in self.lines if line.text.strip())


@dataclass(frozen=True, slots=True)
class Section:
    """The lines that followed one marker (or preceded every marker: `marker` None)."""

    marker: Marker | None
    lines: tuple[Line, ...]


def sections(paste: Paste) -> tuple[Section, ...]:
    """Split cleaned output at its markers; lines keep their original numbers."""
    found: list[Section] = []
    previous: Marker | None = None
    for marker in (*paste.markers, None):
        start = previous.number if previous else 0
        end = marker.number if marker else float("inf")
        lines = tuple(line for line in paste.lines if start < line.number < end)
        if previous is not None or lines:
            found.append(Section(previous, lines))
        previous = marker
    return tuple(found)


def _is_marker(text: str) -> bool:
    return text.startswith(MARKER_PREFIX)


def parse_marker(number: int, text: str) -> Marker:
    """The marker on line `number` (`text` starts with MARKER_PREFIX)."""
    words = text[len(MARKER_PREFIX) :].split()
    name = words[0] if words else ""
    fields = tuple(
        (key, value) for key, _, value in (word.partition("=") for word in words[1:]) if value
    )
    return Marker(number, name, fields)


def _take_command(lines: tuple[Line, ...]) -> tuple[tuple[Line, ...], str | None]:
    """Drop a bare `nvidia-smi ...` / `fuser ...` line a paster left above the output."""
    first = next((i for i, line in enumerate(lines) if line.text.strip()), None)
    if first is None or (match := _COMMAND.match(lines[first].text)) is None:
        return lines, None
    return lines[first + 1 :], match["command"].strip()


def clean_paste(text: str) -> Paste:
    """Split `text` into lines without paste artefacts and fleetfix markers."""
    markers: list[Marker] = []
    output: list[Line] = []
    for line in split_lines(text):
        stripped = line.text.rstrip()
        if _is_marker(stripped):
            markers.append(parse_marker(line.number, stripped))
        else:
            output.append(Line(line.number, stripped))
    unquoted = strip_quotes(tuple(output))
    # A poster's whole-line comment: these tools print no line starting with `#`.
    lines = drop_prompts(tuple(ln for ln in unquoted if not ln.text.lstrip().startswith("#")))
    lines, command = _take_command(lines)
    kept = tuple(line for line in lines if not is_elision(line.text))
    elided = len(kept) != len(lines)
    return Paste(dedent(kept), elided=elided, command=command, markers=tuple(markers))


@dataclass(frozen=True, slots=True)
class _Item:
    indent: int
    key: str
    value: str | None
    line: int


def _item(line: Line) -> _Item | None:
    """One `Key : value` or section line of `-q` text; None when it is neither."""
    expanded = line.text.expandtabs(8)
    body = expanded.lstrip(" ")
    indent = len(expanded) - len(body)
    header = _GPU_HEADER.match(body)
    if header is not None:
        return _Item(indent, "gpu", header["bus"], line.number)
    match = _KEY_VALUE.match(body)
    if match is not None:
        return _Item(indent, normalize_key(match["key"]), match["value"] or "", line.number)
    if _SECTION_NAME.fullmatch(body.strip()):
        return _Item(indent, normalize_key(body), None, line.number)
    return None


def _build(
    items: list[_Item], start: int, parent_indent: int
) -> tuple[list[tuple[str, Node]], int]:
    """The children of the item at `parent_indent`: following items indented deeper."""
    children: list[tuple[str, Node]] = []
    index = start
    while index < len(items) and items[index].indent > parent_indent:
        item = items[index]
        grandchildren, index = _build(items, index + 1, item.indent)
        children.append((item.key, Node(item.value, tuple(grandchildren), item.line)))
    return children, index


def text_tree(paste: Paste, text: str) -> Node:
    """The `-q` text as the same report tree the XML reader builds."""
    items: list[_Item] = []
    for line in paste.lines:
        stripped = line.text.strip()
        if not stripped or _BANNER.match(stripped):
            continue
        item = _item(line)
        if item is None:
            reason = "line is not 'Key : value' or a section name of nvidia-smi -q"
            raise ProbeParseError("nvidia_smi", reason, text, line=line.number)
        items.append(item)
    children, _ = _build(items, 0, -1)
    return Node(None, tuple(children), None)


def read_text(paste: Paste, text: str) -> Reading:
    """Facts from `nvidia-smi -q` text (also `-q -i N` and `-q -d SECTION` output).

    Raises ProbeParseError for fragments without a `GPU <bus id>` section (grep output,
    a pasted ECC block): facts that belong to no GPU cannot gate a remediation.
    """
    root = text_tree(paste, text)
    if not root.all("gpu"):
        reason = "no 'GPU <bus id>' section: a fragment or filtered (grep) output of nvidia-smi -q"
        raise ProbeParseError("nvidia_smi", reason, text)
    return read_report(root, Format.TEXT, text, elided=paste.elided)
