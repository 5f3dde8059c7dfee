"""The nvlink probe: per-GPU NVLink link state, speed and error counters.

Reads `nvidia-smi nvlink -s` (status: `Link N: 25 GB/s` or `Link N: <inactive>`) and
`nvidia-smi nvlink -e` (counters: `Link N: Replay Errors: 0`); the command prints both
between `### fleetfix` markers, each followed by `### fleetfix end rc=N` with its exit
status, and `parse` also reads either pasted alone (the GPU header lines repeat, so both
halves merge per GPU). A GPU without NVLink (a PCIe board, one GPU in a VM) makes nvidia-smi
print nothing and exit 0: that is zero links (`has_nvlink` false), not a failure. A section
that exited non-zero, or printed nvidia-smi's own failure, is a failure whatever else it
printed. Output of the older command (markers without exit statuses) still reads, its empty
sections as zero links; a paste with no output at all is refused. A GPU for which NVML reports
"all links are inActive" has no per-link list but counts as having inactive links.
`nvlink -info` and other subcommands are refused, as is anything that is not one of these
lines. Elided pastes (`...`) are read and marked `complete: false`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetfix.errors import ProbeParseError
from fleetfix.probes.base import Probe
from fleetfix.probes.gpu_facts import frozen_map
from fleetfix.probes.nvidia_smi_text import (
    MARKER_PREFIX,
    TOOL_ERROR,
    Section,
    clean_paste,
    sections,
)

NAME = "nvlink"

_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*?) \(UUID: ?(?P<uuid>[^)]*)\)?$")
_SPEED = re.compile(
    r"^Link (?P<link>\d+): (?:(?P<speed>\d+(?:\.\d+)?) GB/s|(?P<inactive><inactive>))$"
)
_COUNTER = re.compile(r"^Link (?P<link>\d+): (?P<counter>[A-Za-z][\w -]*?): (?P<value>\d+|N/A)$")
_ALL_INACTIVE = re.compile(
    r"^NVML: Unable to retrieve NVLink information as all links are inActive$"
)
_UNSUPPORTED = re.compile(r"^(?:NVLE|Firmware Version|MSE|NETIR)\b.*:")


@dataclass(frozen=True, slots=True)
class Link:
    """One NVLink link. `active` is None when only `-e` counters were shown; `speed_gbps`
    is None for an `<inactive>` link."""

    index: int
    active: bool | None
    speed_gbps: float | None = None
    errors: Mapping[str, int | None] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class NvlinkGpu:
    """NVLink state of one GPU."""

    index: int
    name: str | None
    uuid: str | None
    links: tuple[Link, ...]
    all_links_inactive: bool = False
    active_links: int = 0
    inactive_links: tuple[int, ...] = ()
    error_total: int = 0


@dataclass(frozen=True, slots=True)
class NvlinkFacts:
    """NVLink facts for a host. `inactive_links` lists [gpu, link] pairs; a GPU whose links
    are all inactive is in `gpus_with_inactive_links` even without a per-link list."""

    gpus: tuple[NvlinkGpu, ...]
    status_seen: bool
    errors_seen: bool
    complete: bool
    inactive_links: tuple[tuple[int, int], ...] = ()
    gpus_with_inactive_links: tuple[int, ...] = ()
    gpus_with_link_errors: tuple[int, ...] = ()
    link_speeds_gbps: tuple[float, ...] = ()
    link_count: int = 0
    """Links nvidia-smi listed, over every GPU (0: no NVLink on this node)."""
    has_nvlink: bool = False
    """A GPU listed a link, or said all its links are inactive."""


_SECTIONS = {"nvlink-status": "nvidia-smi nvlink -s", "nvlink-errors": "nvidia-smi nvlink -e"}
_END = "end"


def command(params: Mapping[str, Any]) -> str:
    del params
    return "; ".join(
        f"echo '{MARKER_PREFIX}{section}'; {tool} 2>&1; echo \"{MARKER_PREFIX}{_END} rc=$?\""
        for section, tool in _SECTIONS.items()
    )


@dataclass
class _GpuBuilder:
    """Links of one GPU as lines arrive; local to one parse call."""

    index: int
    name: str | None
    uuid: str | None
    speeds: dict[int, float | None] = field(default_factory=dict)
    counters: dict[int, dict[str, int | None]] = field(default_factory=dict)
    all_inactive: bool = False

    def build(self) -> NvlinkGpu:
        indexes = sorted(set(self.speeds) | set(self.counters))
        links = tuple(
            Link(
                index=i,
                active=_is_up(self.speeds[i]) if i in self.speeds else None,
                speed_gbps=self.speeds.get(i),
                errors=frozen_map(self.counters.get(i, {})),
            )
            for i in indexes
        )
        inactive = tuple(link.index for link in links if link.active is False)
        return NvlinkGpu(
            index=self.index,
            name=self.name,
            uuid=self.uuid,
            links=links,
            all_links_inactive=self.all_inactive,
            active_links=sum(1 for link in links if link.active),
            inactive_links=inactive,
            error_total=sum(v or 0 for link in links for v in link.errors.values()),
        )


def _is_up(speed: float | None) -> bool:
    """`<inactive>` (None) and a link trained at 0 GB/s are both down."""
    return speed is not None and speed > 0


def _counter_name(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def _read_lines(
    lines: list[tuple[int, str]], gpus: dict[int, _GpuBuilder], text: str
) -> tuple[bool, bool]:
    """Feed lines into per-GPU builders; return whether status and counter lines were seen."""
    current: _GpuBuilder | None = None
    status = errors = False
    for number, raw in lines:
        line = raw.strip()
        if TOOL_ERROR.match(line):
            raise ProbeParseError(NAME, f"nvidia-smi failed: {line}", text, line=number)
        if (match := _GPU.match(line)) is not None:
            index = int(match["index"])
            uuid = match["uuid"].strip()
            known = gpus.get(index)
            current = known or _GpuBuilder(
                index, match["name"] or None, uuid if uuid.startswith("GPU-") else None
            )
            gpus[index] = current
            continue
        if current is None:
            raise ProbeParseError(NAME, "link line before any 'GPU N:' header", text, line=number)
        if (match := _SPEED.match(line)) is not None:
            current.speeds[int(match["link"])] = (
                None if match["inactive"] else float(match["speed"])
            )
            status = True
        elif (match := _COUNTER.match(line)) is not None:
            value = None if match["value"] == "N/A" else int(match["value"])
            current.counters.setdefault(int(match["link"]), {})[_counter_name(match["counter"])] = (
                value
            )
            errors = True
        elif _ALL_INACTIVE.match(line):
            current.all_inactive = True
            status = True
        elif _UNSUPPORTED.match(line):
            reason = (
                "nvlink -info (or another subcommand) output; this probe reads nvlink -s and -e"
            )
            raise ProbeParseError(NAME, reason, text, line=number)
        else:
            raise ProbeParseError(
                NAME, "not a line of nvidia-smi nvlink -s or -e", text, line=number
            )
    return status, errors


def _known(line: str) -> bool:
    stripped = line.strip()
    patterns = (_GPU, _SPEED, _COUNTER, _ALL_INACTIVE, _UNSUPPORTED, TOOL_ERROR)
    if stripped.startswith("GPU ") and not stripped.endswith(")"):
        return False  # a header cut before its UUID
    return any(pattern.match(stripped) for pattern in patterns)


def _ran(parts: tuple[Section, ...], text: str) -> set[str]:
    """The probe's sections that ran and exited 0; ProbeParseError for one that did not."""
    ran: set[str] = set()
    for part, after in zip(parts, (*parts[1:], None), strict=True):
        name = part.marker.name if part.marker else ""
        if name not in _SECTIONS:
            continue
        end = after.marker if after is not None and after.marker else None
        value = end.get("rc") if end is not None and end.name == _END else None
        if value is not None and value != "0":
            said = [line for line in part.lines if line.text.strip()]
            detail = said[0].text.strip() if said else "no output"
            at = said[0].number if said else part.marker.number if part.marker else None
            reason = f"{_SECTIONS[name]} exited {value}: {detail}"
            raise ProbeParseError(NAME, reason, text, line=at)
        ran.add(name)
    return ran


def parse(text: str) -> NvlinkFacts:
    """Facts from `nvlink -s` and/or `nvlink -e` output."""
    paste = clean_paste(text)
    parts = sections(paste)
    ran = _ran(parts, text)
    lines = [(line.number, line.text) for part in parts for line in part.lines if line.text.strip()]
    if not lines:
        if not ran:
            raise ProbeParseError(NAME, "empty output", text)
        # nvidia-smi listed nothing and succeeded: no GPU here has NVLink.
        complete = not paste.elided
        return _facts(
            (), status="nvlink-status" in ran, errors="nvlink-errors" in ran, complete=complete
        )
    # Output cut off mid-line (a truncated paste) ends in a line no pattern knows: drop it
    # and say the facts are partial. An unknown line anywhere else is an error.
    cut = not _known(lines[-1][1])
    if cut:
        lines = lines[:-1]
    gpus: dict[int, _GpuBuilder] = {}
    status, errors = _read_lines(lines, gpus, text)
    built = tuple(gpus[index].build() for index in sorted(gpus))
    if not built:
        raise ProbeParseError(NAME, "no 'GPU N:' section", text)
    return _facts(
        built,
        status=status or "nvlink-status" in ran,
        errors=errors or "nvlink-errors" in ran,
        complete=not (cut or paste.elided),
    )


def _facts(
    gpus: tuple[NvlinkGpu, ...], *, status: bool, errors: bool, complete: bool
) -> NvlinkFacts:
    inactive = tuple((gpu.index, link) for gpu in gpus for link in gpu.inactive_links)
    return NvlinkFacts(
        gpus=gpus,
        status_seen=status,
        errors_seen=errors,
        complete=complete,
        inactive_links=inactive,
        gpus_with_inactive_links=tuple(
            gpu.index for gpu in gpus if gpu.inactive_links or gpu.all_links_inactive
        ),
        gpus_with_link_errors=tuple(gpu.index for gpu in gpus if gpu.error_total > 0),
        link_speeds_gbps=tuple(
            sorted(
                {
                    link.speed_gbps
                    for gpu in gpus
                    for link in gpu.links
                    if link.speed_gbps is not None
                }
            )
        ),
        link_count=sum(len(gpu.links) for gpu in gpus),
        has_nvlink=any(gpu.links or gpu.all_links_inactive for gpu in gpus),
    )


PROBE: Probe[NvlinkFacts] = Probe(
    name=NAME,
    summary="NVLink per GPU: link states and speeds (nvlink -s) and error counters (nvlink -e)",
    command=command,
    parse=parse,
    params={},
)
