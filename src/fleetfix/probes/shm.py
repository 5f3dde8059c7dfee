"""The `shm` probe: /dev/shm usage, its files with size/owner/age, and which are held open.

Its output format is fleetfix's own (one real capture so far, from an H200 VM): sections
after `### <name>` markers, each a plain tool's output:

    ### now       date +%s                      (ages need the host's clock, not ours)
    ### uid       id -u                         (only root sees every process's files)
    ### df        df -P /dev/shm
    ### files     find ... -printf '%T@ %s %u %p\\n'   (mtime, bytes, owner, path)
    ### open      /dev/shm paths in /proc/*/fd links and /proc/*/maps
                  (NCCL mmaps its segments and may close the fd, so maps matter)

The command first looks for the tools it runs (date, id, df, find, awk, sort): a node without
one gets the not-installed marker and ToolNotInstalled, not sections silently left empty.

Every section must be present: a cut-off output is rejected, because a missing `open` section
would make every file look idle. When the scan did not run as root, `held_open` is None
(unknown) for files nobody was seen holding, and `stale_files` never offers them for deletion.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import Probe
from fleetfix.probes.not_installed import missing_tool, unless_installed
from fleetfix.probes.text import Line, clean_lines

NAME = "shm"
SHM_DIR = "/dev/shm"
NCCL_PATTERNS = ("nccl-*",)
"""Names NCCL gives its shared-memory segments (/dev/shm/nccl-XXXXXX)."""
TOOLS = ("date", "id", "df", "find", "awk", "sort")
"""What the command runs; a node without one of them says which (ToolNotInstalled)."""
_SECTIONS = ("now", "uid", "df", "files", "open")
_MARK = re.compile(r"^### (?P<name>\w+)$")
_DF_HEADER = re.compile(r"^Filesystem\s+\d+-blocks\s+Used\s+Available\s+Capacity\s+Mounted on$")
_DF_LINE = re.compile(
    r"^(?P<fs>\S+)\s+(?P<blocks>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+"
    r"(?P<pct>\d+|-)%?\s+(?P<mount>/.*)$"
)
_DF_BLOCK = re.compile(r"^Filesystem\s+(?P<size>\d+)-blocks")
_FILE_LINE = re.compile(r"^(?P<mtime>\d+(?:\.\d+)?) (?P<size>\d+) (?P<owner>\S+) (?P<path>/.+)$")


@dataclass(frozen=True, slots=True)
class ShmFile:
    """One regular file directly under /dev/shm."""

    path: str
    name: str
    size_bytes: int
    owner: str
    mtime: float
    age_s: float
    """Seconds since last modification, by the host's clock."""
    held_open: bool | None
    """True if some process has it open or mapped; None when that could not be checked."""
    nccl: bool


@dataclass(frozen=True, slots=True)
class ShmFacts:
    """/dev/shm as the host sees it."""

    now: int
    mount: str
    size_bytes: int
    used_bytes: int
    available_bytes: int
    usage_percent: int | None
    files: tuple[ShmFile, ...]
    file_count: int
    file_bytes: int
    nccl_files: tuple[str, ...]
    held_open_files: tuple[str, ...]
    open_scan_complete: bool
    """The open-file scan ran as root, so `held_open` False is trustworthy."""


def parse(text: str) -> ShmFacts:
    """Shm facts from the probe's sectioned output.

    Raises:
        ToolNotInstalled: one of the tools the command runs is not on the node.
        ProbeParseError: a section is missing or not understood.
    """
    missing = missing_tool(text, TOOLS)
    if missing is not None:
        raise ToolNotInstalled(NAME, missing, text)
    sections = _sections(clean_lines(text), text)
    now = _single_int(sections["now"], "now", text)
    uid = _single_int(sections["uid"], "uid", text)
    mount, size, used, avail, pct = _df(sections["df"], text)
    open_paths = {ln.text.strip() for ln in sections["open"] if ln.text.strip()}
    scan_complete = uid == 0
    files = tuple(
        _file(ln, now, open_paths, scan_complete, text) for ln in _content(sections["files"])
    )
    return ShmFacts(
        now=now,
        mount=mount,
        size_bytes=size,
        used_bytes=used,
        available_bytes=avail,
        usage_percent=pct,
        files=files,
        file_count=len(files),
        file_bytes=sum(f.size_bytes for f in files),
        nccl_files=tuple(f.path for f in files if f.nccl),
        held_open_files=tuple(f.path for f in files if f.held_open),
        open_scan_complete=scan_complete,
    )


def stale_files(
    facts: ShmFacts, older_than_s: float, patterns: Iterable[str] = NCCL_PATTERNS
) -> tuple[ShmFile, ...]:
    """Files safe to remove: matching a pattern, known not held open, at least `older_than_s` old.

    A pattern matches the file name, or the whole path when it starts with '/'. Files whose
    open state is unknown are never stale.
    """
    wanted = tuple(patterns)
    return tuple(
        f
        for f in facts.files
        if f.held_open is False and f.age_s >= older_than_s and _matches(f, wanted)
    )


def _matches(shm_file: ShmFile, patterns: tuple[str, ...]) -> bool:
    return any(
        fnmatch.fnmatchcase(shm_file.path if p.startswith("/") else shm_file.name, p)
        for p in patterns
    )


def _command(params: Mapping[str, Any]) -> str:
    return (
        f"{unless_installed(TOOLS)}"
        "echo '### now'; date +%s; "
        "echo '### uid'; id -u; "
        f"echo '### df'; df -P {SHM_DIR}; "
        f"echo '### files'; find {SHM_DIR} -maxdepth 1 -type f -printf '%T@ %s %u %p\\n'; "
        "echo '### open'; "
        "{ find /proc/[0-9]*/fd -maxdepth 1 -lname '/dev/shm/*' -printf '%l\\n' 2>/dev/null; "
        "awk '$6 ~ /^\\/dev\\/shm\\// {print $6}' /proc/[0-9]*/maps 2>/dev/null; } | sort -u"
    )


def _sections(lines: tuple[Line, ...], text: str) -> dict[str, tuple[Line, ...]]:
    found: dict[str, list[Line]] = {}
    current: list[Line] | None = None
    for ln in lines:
        mark = _MARK.match(ln.text.strip())
        if mark and mark["name"] in _SECTIONS:
            current = found.setdefault(mark["name"], [])
        elif current is not None:
            current.append(ln)
        elif ln.text.strip():
            raise ProbeParseError(
                NAME, "output before the first section marker", text, line=ln.number
            )
    missing = [name for name in _SECTIONS if name not in found]
    if missing:
        raise ProbeParseError(NAME, f"missing section(s) {', '.join(missing)} (output cut?)", text)
    return {name: tuple(body) for name, body in found.items()}


def _content(lines: Iterable[Line]) -> list[Line]:
    return [ln for ln in lines if ln.text.strip()]


def _single_int(lines: tuple[Line, ...], section: str, text: str) -> int:
    content = _content(lines)
    if len(content) != 1 or not content[0].text.strip().isdigit():
        line = content[0].number if content else None
        raise ProbeParseError(NAME, f"section '{section}' must hold one integer", text, line=line)
    return int(content[0].text.strip())


def _df(lines: tuple[Line, ...], text: str) -> tuple[str, int, int, int, int | None]:
    content = _content(lines)
    if len(content) != 2 or not _DF_HEADER.match(content[0].text.strip()):
        raise ProbeParseError(NAME, "df -P output not understood", text, line=_first(content))
    block = _DF_BLOCK.match(content[0].text.strip())
    row = _DF_LINE.match(content[1].text.strip())
    if block is None or row is None:
        raise ProbeParseError(NAME, "df -P row not understood", text, line=content[1].number)
    unit = int(block["size"])
    pct = None if row["pct"] == "-" else int(row["pct"])
    return (
        row["mount"],
        int(row["blocks"]) * unit,
        int(row["used"]) * unit,
        int(row["avail"]) * unit,
        pct,
    )


def _first(lines: list[Line]) -> int | None:
    return lines[0].number if lines else None


def _file(ln: Line, now: int, open_paths: set[str], scan_complete: bool, text: str) -> ShmFile:
    match = _FILE_LINE.match(ln.text.strip())
    if match is None:
        raise ProbeParseError(NAME, "find line not understood", text, line=ln.number)
    path = match["path"]
    name = path.rsplit("/", 1)[-1]
    mtime = float(match["mtime"])
    held: bool | None = True if path in open_paths else (False if scan_complete else None)
    return ShmFile(
        path=path,
        name=name,
        size_bytes=int(match["size"]),
        owner=match["owner"],
        mtime=mtime,
        age_s=round(now - mtime, 3),
        held_open=held,
        nccl=_matches_name(name, NCCL_PATTERNS),
    )


def _matches_name(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


PROBE: Probe[ShmFacts] = Probe(
    name=NAME,
    summary="/dev/shm usage and files with size, owner, age and open state",
    command=_command,
    parse=parse,
    params={},
)
