"""Read the default `nvidia-smi` table (no arguments) into GPU facts.

The table is split on `|`, so both the 79-column (driver < 530) and the 89-column layouts
read the same. Each GPU is a block of two or three rows between `+---+` borders; the process
list is a second table. Output cut off at the end (a truncated paste) keeps the GPUs that
were fully shown and is marked incomplete; a line that does not fit anywhere else is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from fleetfix.errors import ProbeParseError
from fleetfix.probes.gpu_facts import (
    EccCounters,
    EccFacts,
    Format,
    GpuFacts,
    GpuProcess,
    MemoryUsage,
    MigFacts,
    Power,
    Reading,
    Temperatures,
    Utilization,
    ValueReader,
    normalize_bus_id,
)
from fleetfix.probes.nvidia_smi_text import Line, Paste

PROBE = "nvidia_smi"

_BORDER = re.compile(r"^[+|][-=+|]*$")
_VERSIONS = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s+(?P<driver>\S+)"
    r"(?:\s+CUDA Version:\s+(?P<cuda>\S+))?"
)
_ROW1 = (
    re.compile(r"^\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off|WDDM|TCC|N/A)\s*$"),
    re.compile(
        r"^\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+"
        r"(?P<display>On|Off|N/A)\s*$"
    ),
    re.compile(r"^\s*(?P<ecc>\d+|N/A|Off|On|ERR!)\s*$"),
)
_ROW2 = (
    re.compile(
        r"^\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>P\d+|N/A|ERR!)\s+"
        r"(?P<draw>\S+)\s*/\s*(?P<cap>\S+)\s*$"
    ),
    re.compile(r"^\s*(?P<used>\S+)\s*/\s*(?P<total>\S+)\s*$"),
    re.compile(r"^\s*(?P<util>\S+)\s+(?P<compute>\S.*?)\s*$"),
)
_PROCESS = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:(?P<gi>\S+)\s+(?P<ci>\S+)\s+)?(?P<pid>\d+)\s+"
    r"(?P<type>[CGM](?:\+[CGM])*)\s+(?P<name>.*?)\s+(?P<memory>\d+MiB|N/A)\s*\|$"
)
_TIMESTAMP = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4}$")


def looks_like_table(paste: Paste) -> bool:
    """The banner row `| NVIDIA-SMI x  Driver Version: y ...|` is there."""
    return any(_VERSIONS.search(line.text) for line in paste.lines)


def _cells(line: Line) -> list[str] | None:
    """The cells of a `| a | b | c |` row, or None for anything else."""
    text = line.text.strip()
    if len(text) < 2 or not text.startswith("|") or not text.endswith("|"):
        return None
    return text[1:-1].split("|")


def _match_row(line: Line, patterns: tuple[re.Pattern[str], ...]) -> dict[str, str] | None:
    cells = _cells(line)
    if cells is None or len(cells) != len(patterns):
        return None
    found: dict[str, str] = {}
    for cell, pattern in zip(cells, patterns, strict=True):
        match = pattern.match(cell)
        if match is None:
            return None
        found.update({k: v for k, v in match.groupdict().items() if v is not None})
    return found


@dataclass
class _Scan:
    """Where the table reader is; local to one parse call."""

    paste: Paste
    text: str
    position: int = 0
    truncated: bool = False
    gpus: list[GpuFacts] = field(default_factory=list)

    def current(self) -> Line | None:
        lines = self.paste.lines
        return lines[self.position] if self.position < len(lines) else None

    def reject_or_truncate(self, reason: str) -> None:
        """A line that does not fit: the cut-off end of a paste, or an error."""
        line = self.current()
        assert line is not None
        rest = [ln for ln in self.paste.lines[self.position + 1 :] if ln.text.strip()]
        if rest:
            raise ProbeParseError(PROBE, reason, self.text, line=line.number)
        self.truncated = True
        self.position = len(self.paste.lines)


def read_table(paste: Paste, text: str) -> Reading:
    """Facts from the default table. Complete only when the GPU table and the process
    table are both closed; processes are None (unknown) when the process table is missing."""
    scan = _Scan(paste, text)
    timestamp, versions = _header(scan)
    _gpu_rows(scan)
    processes, closed = _process_table(scan)
    gpus = tuple(_with_processes(gpu, processes) for gpu in scan.gpus)
    return Reading(
        format=Format.TABLE,
        complete=not scan.truncated and not paste.elided and processes is not None and closed,
        gpus=gpus,
        timestamp=timestamp,
        driver_version=versions["driver"],
        cuda_version=versions.get("cuda"),
    )


def _header(scan: _Scan) -> tuple[str | None, dict[str, str]]:
    """Skip to the `|===|` line under the column titles; return timestamp and versions."""
    timestamp = None
    versions: dict[str, str] = {}
    while (line := scan.current()) is not None:
        scan.position += 1
        stripped = line.text.strip()
        if stripped.startswith("|=") and versions:
            return timestamp, versions
        if (match := _VERSIONS.search(stripped)) is not None:
            versions = {k: v for k, v in match.groupdict().items() if v}
        elif _TIMESTAMP.match(stripped) and not versions:
            timestamp = stripped
        elif stripped and not _BORDER.match(stripped) and not (versions and _is_title(stripped)):
            reason = "unexpected line in the table header"
            raise ProbeParseError(PROBE, reason, scan.text, line=line.number)
    raise ProbeParseError(PROBE, "the table has no GPU rows (cut off in the header)", scan.text)


def _is_title(text: str) -> bool:
    return text.startswith("|") and any(
        word in text for word in ("Persistence-M", "Memory-Usage", "MIG M.", "Bus-Id")
    )


def _gpu_rows(scan: _Scan) -> None:
    """Read GPU blocks until a blank line (or the end)."""
    while (line := scan.current()) is not None and line.text.strip():
        if _BORDER.match(line.text.strip()):
            scan.position += 1
            continue
        first = _match_row(line, _ROW1)
        if first is None:
            scan.reject_or_truncate("expected a GPU row ('| index name persistence | bus id ...')")
            return
        scan.position += 1
        second = _next_row(scan, _ROW2)
        third = _mig_row(scan) if second is not None else None
        scan.gpus.append(_gpu(first, second, third, ValueReader(PROBE, scan.text)))


def _next_row(scan: _Scan, patterns: tuple[re.Pattern[str], ...]) -> dict[str, str] | None:
    line = scan.current()
    if line is None or _BORDER.match(line.text.strip()):
        return None
    row = _match_row(line, patterns)
    if row is None:
        scan.reject_or_truncate("a GPU row that does not match the table layout")
        return None
    scan.position += 1
    return row


def _mig_row(scan: _Scan) -> str | None:
    """The third row holds only `MIG M.` (absent before driver 450)."""
    line = scan.current()
    if line is None or _BORDER.match(line.text.strip()):
        return None
    cells = _cells(line)
    if cells is None or len(cells) != 3 or cells[0].strip() or cells[1].strip():
        scan.reject_or_truncate("expected the MIG mode row of a GPU")
        return None
    scan.position += 1
    return cells[2].strip()


def _gpu(
    first: dict[str, str], second: dict[str, str] | None, mig: str | None, values: ValueReader
) -> GpuFacts:
    ecc_raw = first["ecc"]
    ecc_enabled = None if ecc_raw in ("N/A", "ERR!") else ecc_raw != "Off"
    ecc_count = values.integer(
        ecc_raw if ecc_raw not in ("Off", "On") else None, "ecc.volatile.dbe"
    )
    second = second or {}
    gpu = GpuFacts(
        index=int(first["index"]),
        bus_id=normalize_bus_id(first["bus"]),
        bus_id_reported=first["bus"],
        name=first["name"],
        persistence_mode=values.flag(
            first["persistence"] if first["persistence"] in ("On", "Off") else None,
            "persistence_mode",
        ),
        compute_mode=values.string(second.get("compute"), "compute_mode"),
        performance_state=values.string(second.get("perf"), "performance_state"),
        mig=MigFacts(enabled=values.flag(mig, "mig.current")),
        ecc=EccFacts(enabled=ecc_enabled, volatile=EccCounters(dbe=ecc_count)),
        temperature=Temperatures(gpu=values.integer(second.get("temp"), "temperature.gpu")),
        power=Power(
            draw=values.number(second.get("draw"), "power.draw"),
            limit=values.number(second.get("cap"), "power.limit"),
        ),
        memory=MemoryUsage(
            total=values.integer(second.get("total"), "memory.total"),
            used=values.integer(second.get("used"), "memory.used"),
        ),
        utilization=Utilization(gpu=values.integer(second.get("util"), "utilization.gpu")),
    )
    errors = tuple(dict.fromkeys(values.error_fields))
    return replace(gpu, error_fields=errors) if errors else gpu


def _process_table(scan: _Scan) -> tuple[dict[int, list[GpuProcess]] | None, bool]:
    """The `Processes:` table as processes per GPU index, and whether it was closed."""
    while (line := scan.current()) is not None and not line.text.strip():
        scan.position += 1
    if scan.current() is None:
        return None, False
    _skip_mig_devices(scan)
    line = scan.current()
    if line is None:
        return None, False
    if not _BORDER.match(line.text.strip()):
        scan.reject_or_truncate("expected the process table")
        return None, False
    scan.position += 1
    return _process_rows(scan)


def _skip_mig_devices(scan: _Scan) -> None:
    """A MIG-enabled GPU adds a `MIG devices:` table before the processes; skip it."""
    following = (
        scan.paste.lines[scan.position + 1] if scan.position + 1 < len(scan.paste.lines) else None
    )
    if following is None or "MIG devices:" not in following.text:
        return
    while (line := scan.current()) is not None and line.text.strip():
        scan.position += 1
    while (line := scan.current()) is not None and not line.text.strip():
        scan.position += 1


def _process_rows(scan: _Scan) -> tuple[dict[int, list[GpuProcess]] | None, bool]:
    """Rows after the `|===|` rule until the closing border. A table cut off before its
    border gives None: a partial list would make a busy GPU look idle."""
    values = ValueReader(PROBE, scan.text)
    found: dict[int, list[GpuProcess]] = {}
    seen_rule = False
    while (line := scan.current()) is not None and line.text.strip():
        stripped = line.text.strip()
        if stripped.startswith("+") and seen_rule:
            scan.position += 1
            return found, True
        if stripped.startswith("|="):
            seen_rule = True
        elif seen_rule and (match := _PROCESS.match(stripped)) is not None:
            _add_process(found, match, values)
        elif not stripped.startswith("|") or (seen_rule and "No running processes" not in stripped):
            scan.reject_or_truncate("a process table row that does not match the table layout")
            return None, False
        scan.position += 1
    return None, False


def _add_process(
    found: dict[int, list[GpuProcess]], match: re.Match[str], values: ValueReader
) -> None:
    process = GpuProcess(
        pid=int(match["pid"]),
        name=values.string(match["name"], "processes.name"),
        type=match["type"],
        used_memory_mib=values.integer(match["memory"], "processes.used_memory"),
        gpu_instance_id=values.integer(match["gi"], "processes.gi"),
        compute_instance_id=values.integer(match["ci"], "processes.ci"),
    )
    found.setdefault(int(match["gpu"]), []).append(process)


def _with_processes(gpu: GpuFacts, processes: dict[int, list[GpuProcess]] | None) -> GpuFacts:
    if processes is None:
        return gpu
    index = -1 if gpu.index is None else gpu.index
    return replace(gpu, processes=tuple(processes.get(index, ())))
