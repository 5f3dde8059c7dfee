"""The topology probe: `nvidia-smi topo -m` as a GPU/NIC link matrix, and its comparison
with what the node should look like.

Real output is tab-separated and read by tabs, so an empty cell keeps its column: the one
nvidia-smi prints before `GPU NUMA ID`, a CPU Affinity left empty in a container whose cpuset
holds none of the GPU's CPUs (a GB200 tray's capture), a NIC row's affinity cells. Pasted
output (spaces) is read by whitespace, where an empty cell cannot be seen. The header row's
terminal underline (driver 580 and later, even into a pipe) is gone before parsing
(Probe.read). Every cell must be a link type
(X, NV#, PIX, PXB, PHB, NODE, SYS, SOC), the diagonal must be X, every row must name a
column and affinity values must look like CPU lists: a paste whose columns were mangled is
refused instead of being read into the wrong pairs. Output without the legend that always
follows the matrix was cut off: its last row (which may be cut mid-line) is dropped and the
facts say `complete: false`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetfix.errors import InputError, ProbeParseError
from fleetfix.probes.base import Probe
from fleetfix.probes.gpu_facts import frozen_map
from fleetfix.probes.nvidia_smi_text import TOOL_ERROR, Line, clean_paste

NAME = "topology"

_LINK = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_P2P_CELLS = frozenset({"OK", "CNS", "GNS", "TNS", "NS", "DR", "U"})
_DEVICE = re.compile(r"^(?:GPU\d+|NIC\d+|[a-z][\w.-]*)$")
_GPU = re.compile(r"^GPU(\d+)$")
_CPU_LIST = re.compile(r"^(?:\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*|N/A)$")
_NUMA_ID = re.compile(r"^(?:\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*|N/A)$")
_AFFINITY_LABELS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND_ENTRY = re.compile(r"^\s*(?P<symbol>\S+)\s+=\s+(?P<meaning>.*?)\s*$")
_NIC_ENTRY = re.compile(r"^\s*(?P<label>NIC\d+):\s*(?P<device>\S+)\s*$")
# Closer first: the NICs a GPU should use are the ones at its best PCIe distance.
_DISTANCE = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}


@dataclass(frozen=True, slots=True)
class TopoGpu:
    """One GPU's row: its NVLink bonds per peer GPU, closest NICs, CPU/NUMA affinity."""

    name: str
    index: int
    nvlinks: Mapping[str, int] = field(default_factory=frozen_map)
    nvlink_peers: int = 0
    closest_nics: tuple[str, ...] = ()
    nic_link: str | None = None
    cpu_affinity: str | None = None
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopologyFacts:
    """The link matrix as `matrix[row][column]` (device labels as printed: GPU0, NIC0,
    mlx5_0), per-GPU summaries, NIC legend (`NIC0` -> `mlx5_0`) and the symbol legend."""

    devices: tuple[str, ...]
    matrix: Mapping[str, Mapping[str, str]]
    gpus: tuple[TopoGpu, ...]
    nics: Mapping[str, str]
    complete: bool
    gpu_count: int = 0
    nic_count: int = 0
    gpu_link_types: tuple[str, ...] = ()
    all_gpus_nvlinked: bool = False
    legend: Mapping[str, str] = field(default_factory=frozen_map)


def command(params: Mapping[str, Any]) -> str:
    del params
    return "nvidia-smi topo -m"


@dataclass(frozen=True, slots=True)
class _Header:
    devices: tuple[str, ...]
    affinity: tuple[str, ...]


def _header(line: Line, text: str) -> _Header:
    tokens = line.text.split()
    devices: list[str] = []
    while tokens and tokens[0] not in ("CPU", "NUMA") and tokens[:2] != ["GPU", "NUMA"]:
        token = tokens.pop(0)
        if not _DEVICE.match(token):
            raise ProbeParseError(NAME, f"{token!r} is not a device column", text, line=line.number)
        devices.append(token)
    rest = " ".join(tokens)
    affinity: list[str] = []
    for label in _AFFINITY_LABELS:
        if rest.startswith(label):
            affinity.append(label)
            rest = rest[len(label) :].strip()
    if rest or not devices or devices[0] != "GPU0":
        raise ProbeParseError(NAME, "not a `topo -m` header line", text, line=line.number)
    return _Header(tuple(devices), tuple(affinity))


@dataclass(frozen=True, slots=True)
class _Row:
    name: str
    cells: Mapping[str, str]
    affinity: Mapping[str, str | None]


def _tokens(line: Line, header: _Header) -> list[str]:
    """A row's cells: by tab where nvidia-smi wrote tabs (empty cells kept), else by
    whitespace (a paste). nvidia-smi prints an empty cell before `GPU NUMA ID`: dropped."""
    if "\t" not in line.text:
        return line.text.split()
    tokens = [cell.strip() for cell in line.text.split("\t")]
    rest = tokens[1 + len(header.devices) :]
    quirk = header.affinity[-1:] == ("GPU NUMA ID",) and len(rest) == len(header.affinity) + 1
    if quirk and rest[-2] == "":
        del tokens[-2]
    return tokens


def _row(line: Line, header: _Header, text: str) -> _Row:
    tokens = _tokens(line, header)
    name, cells, rest = (
        tokens[0],
        tokens[1 : 1 + len(header.devices)],
        tokens[1 + len(header.devices) :],
    )
    if name not in header.devices:
        reason = f"row {name!r} has no column in the header (a mangled paste?)"
        raise ProbeParseError(NAME, reason, text, line=line.number)
    if len(cells) < len(header.devices) or len(rest) > len(header.affinity):
        raise ProbeParseError(NAME, f"row {name!r} does not fit the header", text, line=line.number)
    for column, cell in zip(header.devices, cells, strict=True):
        _check_cell(name, column, cell, line, text)
    affinity = dict(zip(header.affinity, rest, strict=False))
    for label, value in affinity.items():
        pattern = _NUMA_ID if label != "CPU Affinity" else _CPU_LIST
        if value and not pattern.match(value):
            reason = f"row {name!r}: {label} {value!r} is not a CPU/NUMA list (clipped?)"
            raise ProbeParseError(NAME, reason, text, line=line.number)
    # N/A, or an empty tab cell (none of the GPU's CPUs in a container's cpuset): unknown
    values = {
        label: (value if value not in ("", "N/A") else None) for label, value in affinity.items()
    }
    return _Row(name, dict(zip(header.devices, cells, strict=True)), values)


def _check_cell(row: str, column: str, cell: str, line: Line, text: str) -> None:
    if cell in _P2P_CELLS:
        reason = "P2P status matrix (`topo -p2p`); this probe reads `nvidia-smi topo -m`"
        raise ProbeParseError(NAME, reason, text, line=line.number)
    if not _LINK.match(cell):
        raise ProbeParseError(NAME, f"{cell!r} is not a link type", text, line=line.number)
    if (cell == "X") != (row == column):
        reason = f"{row}/{column} is {cell!r}: only a device's own cell is X (columns shifted?)"
        raise ProbeParseError(NAME, reason, text, line=line.number)


def _split(lines: tuple[Line, ...], text: str) -> tuple[Line, list[Line], list[Line]]:
    """Header line, matrix lines, legend lines."""
    nonblank = [line for line in lines if line.text.strip()]
    if not nonblank:
        raise ProbeParseError(NAME, "empty output", text)
    header = nonblank[0]
    if TOOL_ERROR.match(header.text.strip()):
        reason = f"nvidia-smi failed: {header.text.strip()}"
        raise ProbeParseError(NAME, reason, text, line=header.number)
    legend_at = next(
        (i for i, line in enumerate(nonblank) if line.text.strip() == "Legend:"), len(nonblank)
    )
    return header, nonblank[1:legend_at], nonblank[legend_at:]


def _legend(lines: list[Line]) -> tuple[dict[str, str], dict[str, str]]:
    symbols: dict[str, str] = {}
    nics: dict[str, str] = {}
    for line in lines:
        if (nic := _NIC_ENTRY.match(line.text)) is not None:
            nics[nic["label"]] = nic["device"]
        elif (entry := _LEGEND_ENTRY.match(line.text)) is not None:
            symbols[entry["symbol"]] = entry["meaning"]
    return symbols, nics


def parse(text: str) -> TopologyFacts:
    """Facts from `nvidia-smi topo -m` (or `-mp`) output."""
    paste = clean_paste(text)
    header_line, matrix_lines, legend_lines = _split(paste.lines, text)
    header = _header(header_line, text)
    complete = bool(legend_lines) and not paste.elided
    if not legend_lines:
        matrix_lines = matrix_lines[:-1]  # cut off before the legend: the last row may be cut too
    rows = [_row(line, header, text) for line in matrix_lines]
    if complete and {row.name for row in rows} != set(header.devices):
        complete = False
    symbols, nic_legend = _legend(legend_lines)
    return _facts(header, rows, symbols, nic_legend, complete=complete)


def _facts(
    header: _Header,
    rows: list[_Row],
    symbols: dict[str, str],
    nic_legend: dict[str, str],
    *,
    complete: bool,
) -> TopologyFacts:
    nic_labels = tuple(d for d in header.devices if not _GPU.match(d))
    nics = {label: nic_legend.get(label, label) for label in nic_labels}
    gpus = tuple(_gpu(row, nics) for row in rows if _GPU.match(row.name))
    gpu_links = {
        cell
        for row in rows
        if _GPU.match(row.name)
        for column, cell in row.cells.items()
        if _GPU.match(column) and column != row.name
    }
    gpu_names = [d for d in header.devices if _GPU.match(d)]
    return TopologyFacts(
        devices=header.devices,
        matrix=frozen_map({row.name: frozen_map(row.cells) for row in rows}),
        gpus=gpus,
        nics=frozen_map(nics),
        complete=complete,
        gpu_count=len(gpu_names),
        nic_count=len(nic_labels),
        gpu_link_types=tuple(sorted(gpu_links)),
        all_gpus_nvlinked=bool(gpu_links) and all(link.startswith("NV") for link in gpu_links),
        legend=frozen_map(symbols),
    )


def _gpu(row: _Row, nics: Mapping[str, str]) -> TopoGpu:
    nvlinks = {column: int(cell[2:]) for column, cell in row.cells.items() if cell.startswith("NV")}
    nic_cells = {column: cell for column, cell in row.cells.items() if column in nics}
    best = min((_DISTANCE[cell] for cell in nic_cells.values()), default=None)
    closest = tuple(nics[c] for c, cell in nic_cells.items() if _DISTANCE[cell] == best)
    nic_link = next((cell for cell in nic_cells.values() if _DISTANCE[cell] == best), None)
    match = _GPU.match(row.name)
    assert match is not None
    return TopoGpu(
        name=row.name,
        index=int(match.group(1)),
        nvlinks=frozen_map(nvlinks),
        nvlink_peers=len(nvlinks),
        closest_nics=closest,
        nic_link=nic_link,
        cpu_affinity=row.affinity.get("CPU Affinity"),
        numa_affinity=row.affinity.get("NUMA Affinity"),
        gpu_numa_id=row.affinity.get("GPU NUMA ID"),
    )


@dataclass(frozen=True, slots=True)
class ExpectedTopology:
    """What a node's `topo -m` should show: counts, one link type for every GPU pair (e.g.
    NV18 on an 8xH100 HGX), and/or specific pairs (`("GPU0", "NIC0"): "PIX"`)."""

    gpus: int | None = None
    nics: int | None = None
    gpu_link: str | None = None
    links: Mapping[tuple[str, str], str] = field(default_factory=frozen_map)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ExpectedTopology:
        """From inventory/playbook vars: `{gpus: 8, nics: 8, gpu_link: NV18,
        links: {"GPU0-NIC0": PIX}}`; InputError when a value makes no sense."""
        links: dict[tuple[str, str], str] = {}
        for pair, link in dict(data.get("links") or {}).items():
            first, _, second = str(pair).partition("-")
            if not (first and second and _LINK.match(str(link))):
                raise InputError(f"expected topology: bad link {pair!r}: {link!r}")
            links[(first, second)] = str(link)
        gpu_link = data.get("gpu_link")
        if gpu_link is not None and not _LINK.match(str(gpu_link)):
            raise InputError(f"expected topology: {gpu_link!r} is not a link type")
        return cls(
            gpus=_count(data.get("gpus"), "gpus"),
            nics=_count(data.get("nics"), "nics"),
            gpu_link=None if gpu_link is None else str(gpu_link),
            links=frozen_map(links),
        )

    @classmethod
    def from_facts(cls, golden: TopologyFacts) -> ExpectedTopology:
        """Everything a known-good node showed (every off-diagonal cell)."""
        links = {
            (row, column): cell
            for row, cells in golden.matrix.items()
            for column, cell in cells.items()
            if row != column
        }
        return cls(gpus=golden.gpu_count, nics=golden.nic_count, links=links)


def _count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"expected topology: {name} must be a number, not {value!r}") from exc


def compare_topology(
    seen: TopologyFacts, expected: ExpectedTopology | TopologyFacts
) -> tuple[str, ...]:
    """Every way `seen` differs from `expected`, one sentence each; () when it matches."""
    want = (
        expected
        if isinstance(expected, ExpectedTopology)
        else ExpectedTopology.from_facts(expected)
    )
    problems: list[str] = []
    if not seen.complete:
        problems.append("topology output is incomplete (cut off or elided): cannot confirm it")
    if want.gpus is not None and seen.gpu_count != want.gpus:
        problems.append(f"expected {want.gpus} GPUs, seen {seen.gpu_count}")
    if want.nics is not None and seen.nic_count != want.nics:
        problems.append(f"expected {want.nics} NICs, seen {seen.nic_count}")
    pairs = dict(want.links)
    if want.gpu_link is not None:
        count = want.gpus if want.gpus is not None else seen.gpu_count
        for first, second in itertools.combinations(range(count), 2):
            pairs.setdefault((f"GPU{first}", f"GPU{second}"), want.gpu_link)
    for (a, b), link in sorted(pairs.items(), key=lambda item: _natural(item[0])):
        got = seen.matrix.get(a, {}).get(b)
        if got != link:
            problems.append(f"{a}-{b}: expected {link}, seen {got or 'nothing'}")
    return tuple(problems)


def _natural(pair: tuple[str, str]) -> tuple[tuple[str, int], ...]:
    """GPU2 before GPU10."""
    return tuple(
        (match.group(1), int(match.group(2) or -1))
        for match in (re.match(r"^(.*?)(\d*)$", name) for name in pair)
        if match is not None
    )


PROBE: Probe[TopologyFacts] = Probe(
    name=NAME,
    summary="GPU/NIC link matrix from nvidia-smi topo -m: NVLink bonds, PCIe paths, "
    "closest NICs, CPU/NUMA affinity",
    command=command,
    parse=parse,
    params={},
)
