"""The gpu_processes probe: which processes hold the GPUs (before a reset or driver reload).

Two sources, printed in one output between `### fleetfix ...` markers:
- `nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory
  --format=csv,noheader`: CUDA processes per GPU, as the driver sees them;
- `fuser -v /dev/nvidia*` (psmisc): every process with a GPU device file open, including
  services (nvidia-persistenced, dcgm, fabric manager) and processes in other containers.

Each section ends with `### fleetfix end rc=N` so a failing tool is visible. `parse` also
reads either source alone (a pasted CSV with or without header, or a pasted fuser table).
A source that failed makes the facts incomplete; `count == 0` only means "no holders" when
`complete` is true (fuser run without root cannot see other users' processes).

Two more sections say whose each process is (probes/process_owners.py): `owners` (ps: user,
start time, command line, cgroup and so the Slurm job) and `slurm-jobs` (squeue: the jobs Slurm
has on the node), which tell a running job's process from an orphan (actions/orphans.py).

Each tool runs under `timeout -k 2 N` (params `nvidia_smi_timeout`, `fuser_timeout`; 15 s
each, so both plus their kill grace fit a 60 s step timeout): a hung nvidia-smi (a GPU off the
bus) is killed and fuser still answers. A section that ended in 124 or 137 (killed) is a source
that did not answer, never "no processes".
"""

from __future__ import annotations

import csv
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleetfix.errors import PlaybookError, ProbeParseError
from fleetfix.probes.base import Probe
from fleetfix.probes.gpu_facts import ValueReader, normalize_bus_id
from fleetfix.probes.nvidia_smi_text import (
    MARKER_PREFIX,
    TOOL_ERROR,
    Line,
    Section,
    clean_paste,
    sections,
)
from fleetfix.probes.process_owners import (
    OWNERS_OK_RC,
    ProcessOwner,
    read_jobs,
    read_owners,
)

NAME = "gpu_processes"
QUERY_FIELDS = ("pid", "process_name", "gpu_uuid", "gpu_bus_id", "used_memory")

_HEADER_KEYS = {"used_gpu_memory": "used_memory", "name": "process_name"}
_HEADER_CELL = re.compile(r"^[A-Za-z_][\w.]*(?:\s*\[[^\]]*\])?$")
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")
_FUSER_HEADER = re.compile(r"^\s*USER\s+PID\s+ACCESS\s+COMMAND\s*$")
_FUSER_ROW = re.compile(
    r"^(?:(?P<path>/\S+?):)?\s+(?P<user>\S+)\s+(?P<pid>\d+|kernel)\s+(?P<access>[\w.]+)"
    r"(?:\s+(?P<command>.+?))?\s*$"
)
_FUSER_ROW_NO_PID = re.compile(
    r"^(?:(?P<path>/\S+?):)?\s+(?P<user>\S+)\s+(?P<access>[.cerfFmM]{5})(?:\s+(?P<command>.+?))?\s*$"
)
"""A row whose PID psmisc wrote to (buffered) stdout: the PIDs follow the table, in row order."""
_FUSER_PIDS = re.compile(r"^\s*\d+(?:\s+\d+)*\s*$")
_FUSER_PATH_ALONE = re.compile(r"^(?P<path>/\S+):\s*$")
"""psmisc puts a long device name on a line of its own and its holders on the next lines."""
_FUSER_NO_FILE = re.compile(r"^Specified filename .* does not exist\.?$")
_FUSER_WARNING = re.compile(r"^Cannot stat .*$|^fuser: .*(?:permission|denied).*$", re.I)
_NOT_INSTALLED = re.compile(r"(?:command )?not found$|No such file or directory$")
TIMED_OUT_RC = (124, 137)
"""`timeout` exits 124 when it stopped the tool with SIGTERM, 137 (128 + 9) after -k's KILL."""
_COULD_NOT_RUN_RC = (125, 126, 127)
"""`timeout` itself failed, or the tool could not be executed or found."""
DEFAULT_TIMEOUT = 15.0
KILL_GRACE = 2


@dataclass(frozen=True, slots=True)
class HeldProcess:
    """A process on a GPU: from the driver's compute-apps list, from fuser, or both.

    A process using two GPUs appears once per GPU (as the driver lists it)."""

    pid: int
    name: str | None
    gpu_uuid: str | None = None
    gpu_bus_id: str | None = None
    used_memory_mib: int | None = None
    user: str | None = None
    devices: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    command_line: str | None = None
    """From ps (None: ps did not list it, or the owners section was not read)."""
    started: str | None = None
    """ps's `lstart`: with the PID, which process this is (a PID can be reused)."""
    cgroup: str | None = None
    job_id: int | None = None
    """The Slurm job its cgroup puts it in; None: in no job (or not read)."""


@dataclass(frozen=True, slots=True)
class GpuProcessesFacts:
    """Processes holding GPUs.

    `query_ok`: nvidia-smi ran and was read; `fuser_ok`: fuser ran, was read and saw every
    process (a clean scan, which busy gates trust on its own); None: not in the output.
    `complete` is False when a source failed, timed out, was not installed, or saw only part of
    the processes; then `count` is a lower bound."""

    processes: tuple[HeldProcess, ...]
    count: int
    """User processes on the GPUs (what gates a reset or reboot); NVIDIA's own daemons
    (persistenced, DCGM's hostengine, the fabric manager, IMEX) are not counted here."""
    pids: tuple[int, ...]
    compute_pids: tuple[int, ...]
    holder_pids: tuple[int, ...]
    holder_commands: tuple[str, ...]
    complete: bool
    query_ok: bool | None = None
    fuser_ok: bool | None = None
    errors: tuple[str, ...] = ()
    service_pids: tuple[int, ...] = ()
    """Device holders that are NVIDIA service daemons: actions stop and restore those units."""
    owners_ok: bool | None = None
    """ps said whose each process is (user, start, command line, job); None: not in the
    output."""
    slurm_jobs: tuple[int, ...] = ()
    """The jobs Slurm has on the node (running, completing, suspended)."""
    slurm_jobs_ok: bool | None = None
    """squeue answered; None: not in the output, False: it failed (then nothing can be told
    an orphan)."""
    orphan_pids: tuple[int, ...] = ()
    """Processes no job Slurm has on the node owns (`orphans`); empty unless both ps and
    squeue answered."""


SERVICE_DAEMONS = (
    "nvidia-persistenced",
    "nv-hostengine",
    "nv-fabricmanager",
    "nvidia-fabricmanager",
    "nvidia-imex",
    "nvidia-dcgm",
    "dcgm-exporter",
    "nvsm",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
"""Daemons that hold /dev/nvidia* on a healthy node, not jobs (fuser shows their names cut to
15 characters): the GPU reset and driver reload stop and restore them. An MPS server serves
clients, but those show as processes of their own."""


def is_service_daemon(name: str | None) -> bool:
    return name is not None and any(name[:15] == d[:15] for d in SERVICE_DAEMONS)


def command(params: Mapping[str, Any]) -> str:
    """Both sources at once, each under `timeout`, then each between markers with its exit
    status; never fails as a whole.

    A GPU off the bus can leave nvidia-smi (or fuser, reading that process's maps) stuck in
    the kernel, where even SIGKILL waits, and `timeout` waits with it. So each tool runs in a
    background job writing to a file, and a watchdog ends the wait at the deadline: the stuck
    tool's section then ends `rc=137 stuck=1` instead of hanging the probe, and the other
    tool's answer is still printed.

    Raises:
        PlaybookError: a timeout parameter is not a positive number of seconds.
    """
    query_limit = _timeout(params, "nvidia_smi_timeout")
    fuser_limit = _timeout(params, "fuser_timeout")
    deadline = math.ceil(max(query_limit, fuser_limit)) + KILL_GRACE + 1
    fields = ",".join(QUERY_FIELDS)
    query = f"nvidia-smi --query-compute-apps={fields} --format=csv,noheader"
    # psmisc's fuser -v writes its table to stderr but each PID to stdout: both go to one file,
    # stdout unbuffered where coreutils' stdbuf exists so every PID lands in its row (else the
    # PIDs may trail the table, which the parser also reads).
    fuser = "$u fuser -v /dev/nvidia*"
    return " ".join(
        (
            "d=$(mktemp -d) || exit 1;",
            "u=; command -v stdbuf >/dev/null 2>&1 && u='stdbuf -o0 -e0';",
            _background(query_limit, f'{query} >"$d/q" 2>&1', "q"),
            _background(fuser_limit, f'{fuser} >"$d/f" 2>&1', "f"),
            f"( sleep {deadline}; kill -9 $q $f ) </dev/null >/dev/null 2>&1 & w=$!;",
            "wait $q $f 2>/dev/null; kill $w 2>/dev/null;",
            _show("query-compute-apps", query_limit, "q"),
            _show("fuser", fuser_limit, "f"),
            _OWNERS,
            _SLURM_JOBS.format(limit=f"{query_limit:g}", node=_slurm_node(params)),
            'rm -rf "$d"',
        )
    )


_OWNERS = " ".join(
    (
        # Every PID either tool printed (fuser's other words are never all digits).
        "p=$( { cut -d, -f1 \"$d/q\"; tr -s ' \\t:' '\\n' <\"$d/f\"; } 2>/dev/null"
        " | grep -xE '[0-9]+' | sort -un | paste -sd, -);",
        f"echo '{MARKER_PREFIX}owners'; r=0;",
        'if [ -n "$p" ]; then',
        'o=$(LC_ALL=C timeout -k 2 15 ps -ww -o pid=,user:32=,lstart=,args= -p "$p" 2>&1); r=$?;',
        "[ -z \"$o\" ] || printf '%s\\n' \"$o\" | sed 's/^ */pid /';",
        'LC_ALL=C timeout -k 2 15 ps -ww -o pid=,cgroup= -p "$p" 2>/dev/null',
        "| sed 's/^ */cgroup /';",
        "fi;",
        f'echo "{MARKER_PREFIX}end rc=$r";',
    )
)
"""The owners section: user, start time and command line, then the cgroup, of each PID."""
_SLURM_JOBS = " ".join(
    (
        'if [ -n "$p" ]; then',
        f"echo '{MARKER_PREFIX}slurm-jobs timeout={{limit}}';",
        "j=$(timeout -k 2 {limit} squeue -h -w {node} -o %A 2>&1); r=$?;",
        "printf '%s\\n' \"$j\";",
        f'echo "{MARKER_PREFIX}end rc=$r";',
        "fi;",
    )
)
"""The jobs Slurm has on this node (squeue's `%A`: the job id cgroups are named after), asked
only when a process holds a GPU: an idle fleet's probe sends slurmctld no RPC per node, and a
node whose controller does not answer waits for squeue only when an answer could matter."""


def _slurm_node(params: Mapping[str, Any]) -> str:
    """The node's Slurm name for squeue -w: the `node` param, else the short hostname."""
    node = params.get("node")
    return shlex.quote(str(node)) if node else '"$(hostname -s)"'


def _background(limit: float, tool_call: str, file: str) -> str:
    """One tool under `timeout` in a job holding none of the session's file descriptors (a
    stuck tool must not keep the session open); its exit status goes to `$d/<file>.rc`."""
    return (
        f'( timeout -k {KILL_GRACE} {limit:g} {tool_call}; echo $? >"$d/{file}.rc" )'
        f" </dev/null >/dev/null 2>&1 & {file}=$!;"
    )


def _show(section: str, limit: float, file: str) -> str:
    """The section as the parser reads it; no exit status means the watchdog gave up on it."""
    return (
        f"echo '{MARKER_PREFIX}{section} timeout={limit:g}'; cat \"$d/{file}\" 2>/dev/null;"
        f' if [ -s "$d/{file}.rc" ]; then echo "{MARKER_PREFIX}end rc=$(cat "$d/{file}.rc")";'
        f" else echo '{MARKER_PREFIX}end rc=137 stuck=1'; fi;"
    )


def _timeout(params: Mapping[str, Any], name: str) -> float:
    value = params.get(name)
    if value is None:
        return DEFAULT_TIMEOUT
    try:
        limit = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        limit = float("nan")
    if not 0 < limit <= 3600:  # also false for NaN and inf
        raise PlaybookError(
            f"{NAME}: {name} must be a number of seconds between 0 and 3600, not {value!r}"
        )
    return limit


@dataclass(frozen=True, slots=True)
class _Source:
    """What one section yielded."""

    processes: tuple[HeldProcess, ...]
    ok: bool
    complete: bool
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Status:
    """How one tool's run ended, from its section's markers."""

    rc: int | None = None
    """None: no end marker (a paste of the tool's output alone)."""
    limit: str | None = None
    stuck: bool = False
    """The tool did not exit even after SIGKILL; the watchdog stopped waiting for it."""


def _status(start: Section, end: Section | None) -> _Status:
    limit = start.marker.get("timeout") if start.marker else None
    if end is None or end.marker is None or end.marker.name != "end":
        return _Status(limit=limit)
    value = end.marker.get("rc")
    rc = int(value) if value is not None and value.isdigit() else None
    return _Status(rc, limit, end.marker.get("stuck") == "1")


def _unanswered(tool: str, lines: tuple[Line, ...], status: _Status) -> _Source:
    """A source that timed out or could not run: no verdict on processes, only its errors."""
    said = tuple(line.text.strip() for line in lines if line.text.strip())
    within = f" within {status.limit}s" if status.limit else ""
    if status.stuck:
        reason = (
            f"{tool} did not answer{within} and did not exit after SIGKILL (stuck in the"
            " kernel?): its processes are unknown"
        )
    elif status.rc in TIMED_OUT_RC:
        how = "killed with SIGKILL" if status.rc == 137 else "stopped by timeout"
        reason = f"{tool} did not answer{within} ({how}, rc={status.rc}): its processes are unknown"
    elif status.rc == 127 and any("timeout" in line and tool not in line for line in said):
        reason = f"`timeout` (coreutils) is not installed, so {tool} was not run (rc=127)"
    elif status.rc == 127:
        reason = f"{tool} is not installed (rc=127)"
    else:
        reason = f"{tool} exited {status.rc}"
    return _Source((), ok=False, complete=False, errors=(reason, *said))


def _query_source(lines: tuple[Line, ...], status: _Status, text: str) -> _Source:
    """`--query-compute-apps` CSV (with or without header)."""
    body = [line for line in lines if line.text.strip()]
    if status.stuck or status.rc not in (None, 0):
        # A failed nvidia-smi prints its reason (driver not loaded, not installed) instead.
        return _unanswered("nvidia-smi", lines, status)
    errors = tuple(ln.text.strip() for ln in body if TOOL_ERROR.match(ln.text.strip()))
    if errors:
        return _Source((), ok=False, complete=False, errors=errors)
    body = [ln for ln in body if ln.text.strip() != "No running processes found"]
    rows = list(zip(body, csv.reader(ln.text for ln in body), strict=True))
    keys: tuple[str, ...] = QUERY_FIELDS
    if rows and all(_HEADER_CELL.match(cell.strip()) for cell in rows[0][1]):
        keys = tuple(_header_key(cell) for cell in rows[0][1])
        rows = rows[1:]
    if "pid" not in keys:
        raise ProbeParseError(NAME, "compute-apps CSV has no pid column", text)
    found = tuple(_query_row(line, cells, keys, text) for line, cells in rows)
    return _Source(found, ok=True, complete=True)


def _header_key(cell: str) -> str:
    key = _HEADER_UNIT.sub("", cell.strip()).lower()
    return _HEADER_KEYS.get(key, key)


def _query_row(line: Line, cells: list[str], keys: tuple[str, ...], text: str) -> HeldProcess:
    if len(cells) != len(keys):
        reason = f"compute-apps row has {len(cells)} values for {len(keys)} columns"
        raise ProbeParseError(NAME, reason, text, line=line.number)
    row = dict(zip(keys, (cell.strip() for cell in cells), strict=True))
    values = ValueReader(NAME, text)
    pid = values.integer(row.get("pid"), "pid", line.number)
    if pid is None:
        raise ProbeParseError(NAME, "compute-apps row without a pid", text, line=line.number)
    bus = values.string(row.get("gpu_bus_id"), "gpu_bus_id")
    return HeldProcess(
        pid=pid,
        name=values.string(row.get("process_name"), "process_name"),
        gpu_uuid=values.string(row.get("gpu_uuid"), "gpu_uuid"),
        gpu_bus_id=normalize_bus_id(bus) if bus else None,
        used_memory_mib=values.integer(row.get("used_memory"), "used_memory", line.number),
        sources=("query",),
    )


def _fuser_source(lines: tuple[Line, ...], status: _Status, text: str) -> _Source:
    """`fuser -v` table; exit 1 with no table means nothing holds the devices."""
    rc = status.rc
    if status.stuck or rc in TIMED_OUT_RC or rc in _COULD_NOT_RUN_RC:
        return _unanswered("fuser", lines, status)
    table = _FuserTable(text)
    for line in (ln for ln in lines if ln.text.strip()):
        stripped = line.text.strip()
        if _FUSER_HEADER.match(line.text) or _FUSER_NO_FILE.match(stripped):
            continue
        if "fuser" in stripped and _NOT_INSTALLED.search(stripped):
            return _Source((), ok=False, complete=False, errors=(stripped,))
        if _FUSER_WARNING.match(stripped):
            table.warnings.append(stripped)
            continue
        table.read(line)
    holders = table.holders()
    ok = rc in (None, 0, 1)
    errors = () if ok else (f"fuser exited {rc}",)
    found = tuple(holders[pid] for pid in sorted(holders))
    warnings = table.warnings
    return _Source(found, ok=ok, complete=ok and not warnings, errors=(*errors, *warnings))


class _FuserTable:
    """The rows of one `fuser -v` table, read line by line. psmisc writes each PID to stdout
    and the rest of its row to stderr; captured in one file without stdbuf, the PIDs can trail
    the table (rows without PIDs, then lines of PIDs in row order)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.warnings: list[str] = []
        self._holders: dict[int, _Holder] = {}
        self._waiting: list[tuple[str, str | None, str, int]] = []  # rows whose PID comes later
        self._path: str | None = None

    def read(self, line: Line) -> None:
        alone = _FUSER_PATH_ALONE.match(line.text)
        if alone is not None:
            self._path = alone["path"]
            return
        if self._waiting and _FUSER_PIDS.match(line.text):
            for pid in line.text.split():
                if not self._waiting:
                    raise ProbeParseError(
                        NAME, "more PIDs than fuser rows", self.text, line=line.number
                    )
                user, command, device, _ = self._waiting.pop(0)
                _add_holder(self._holders, int(pid), user, command, device)
            return
        match = _FUSER_ROW.match(line.text)
        late = None if match is not None else _FUSER_ROW_NO_PID.match(line.text)
        row = match or late
        if row is None:
            raise ProbeParseError(
                NAME, "not a line of `fuser -v` output", self.text, line=line.number
            )
        self._path = row["path"] or self._path
        if self._path is None:
            raise ProbeParseError(
                NAME, "fuser row before any device path", self.text, line=line.number
            )
        if late is not None:
            self._waiting.append((late["user"], late["command"], self._path, line.number))
        elif row["pid"] != "kernel":
            _add_holder(self._holders, int(row["pid"]), row["user"], row["command"], self._path)

    def holders(self) -> dict[int, HeldProcess]:
        if self._waiting:
            number = self._waiting[0][3]
            raise ProbeParseError(NAME, "fuser row without a PID", self.text, line=number)
        return {
            pid: HeldProcess(
                pid=pid, name=name, user=user, devices=tuple(devices), sources=("fuser",)
            )
            for pid, (user, name, devices) in self._holders.items()
        }


_Holder = tuple[str, str | None, dict[str, None]]
"""A PID's user and command (its last row's) and its devices in the order first seen."""


def _add_holder(
    holders: dict[int, _Holder], pid: int, user: str, name: str | None, path: str
) -> None:
    devices = holders[pid][2] if pid in holders else {}
    devices[path] = None
    holders[pid] = (user, name, devices)


def _merge(
    query: tuple[HeldProcess, ...], fuser: tuple[HeldProcess, ...]
) -> tuple[HeldProcess, ...]:
    """Query rows enriched with fuser's user/devices; fuser-only holders appended."""
    by_pid = {holder.pid: holder for holder in fuser}
    merged = [
        HeldProcess(
            pid=row.pid,
            name=row.name or (by_pid[row.pid].name if row.pid in by_pid else None),
            gpu_uuid=row.gpu_uuid,
            gpu_bus_id=row.gpu_bus_id,
            used_memory_mib=row.used_memory_mib,
            user=by_pid[row.pid].user if row.pid in by_pid else None,
            devices=by_pid[row.pid].devices if row.pid in by_pid else (),
            sources=("query", "fuser") if row.pid in by_pid else ("query",),
        )
        for row in query
    ]
    queried = {row.pid for row in query}
    merged.extend(holder for holder in fuser if holder.pid not in queried)
    return tuple(sorted(merged, key=lambda process: process.pid))


def _classify(section: Section) -> str:
    """Which source an unmarked section is: fuser table or compute-apps CSV."""
    for line in section.lines:
        stripped = line.text.strip()
        if not stripped:
            continue
        if _FUSER_HEADER.match(line.text) or stripped.startswith("/dev/"):
            return "fuser"
        return "query"
    return "empty"


def parse(text: str) -> GpuProcessesFacts:
    """Facts from the probe's combined output, or from either source pasted alone."""
    paste = clean_paste(text)
    parts = sections(paste)
    sources: dict[str, _Source] = {}
    owned = _Owned()
    for index, part in enumerate(parts):
        name = part.marker.name if part.marker else _classify(part)
        status = _status(part, parts[index + 1] if index + 1 < len(parts) else None)
        if name == "query-compute-apps" or (name == "query" and part.marker is None):
            sources["query"] = _query_source(part.lines, status, text)
        elif name == "fuser":
            sources["fuser"] = _fuser_source(part.lines, status, text)
        elif name in ("owners", "slurm-jobs"):
            owned.read(name, part.lines, status, text)
        elif name == "end" and any(line.text.strip() for line in part.lines):
            raise ProbeParseError(
                NAME, "output after a section end", text, line=part.lines[0].number
            )
        elif name not in ("end", "empty"):
            raise ProbeParseError(NAME, f"unknown section {name!r}", text)
    if not sources:
        raise ProbeParseError(NAME, "no compute-apps or fuser output", text)
    return _facts(sources, owned)


class _Owned:
    """What the owners and slurm-jobs sections said."""

    def __init__(self) -> None:
        self.owners: tuple[ProcessOwner, ...] = ()
        self.owners_ok: bool | None = None
        self.jobs: tuple[int, ...] = ()
        self.jobs_ok: bool | None = None
        self.errors: list[str] = []

    def read(self, name: str, lines: tuple[Line, ...], status: _Status, text: str) -> None:
        numbered = [(line.number, line.text) for line in lines]
        tool = "ps" if name == "owners" else "squeue"
        failed = status.stuck or status.rc is None or status.rc not in OWNERS_OK_RC
        if name == "slurm-jobs":
            failed = failed or status.rc != 0
        if failed:
            self.errors.extend(_unanswered(tool, lines, status).errors)
        else:
            failed = not self._parsed(name, numbered, text)
        if name == "owners":
            self.owners_ok = not failed
        else:
            self.jobs_ok = not failed

    def _parsed(self, name: str, numbered: list[tuple[int, str]], text: str) -> bool:
        """Read one section; a line it cannot read makes that section unanswered (no process
        is then known to be an orphan), not the whole probe: a GPU reset's busy gate needs
        the compute apps and fuser, not who owns them."""
        try:
            if name == "owners":
                self.owners = read_owners(numbered, text)
            else:
                self.jobs = read_jobs(numbered, text)
        except ProbeParseError as exc:
            where = f" (line {exc.line})" if exc.line is not None else ""
            self.errors.append(f"{exc.reason}{where}")
            return False
        return True


def _owned(processes: tuple[HeldProcess, ...], owned: _Owned) -> tuple[HeldProcess, ...]:
    """Each process with what ps said of it (its user too: ps reads it with the rest)."""
    by_pid = {owner.pid: owner for owner in owned.owners}
    return tuple(
        replace(
            process,
            user=by_pid[process.pid].user,
            command_line=by_pid[process.pid].command_line,
            started=by_pid[process.pid].started,
            cgroup=by_pid[process.pid].cgroup,
            job_id=by_pid[process.pid].job_id,
        )
        if process.pid in by_pid
        else process
        for process in processes
    )


def _facts(sources: dict[str, _Source], owned: _Owned) -> GpuProcessesFacts:
    query, fuser = sources.get("query"), sources.get("fuser")
    processes = _merge(query.processes if query else (), fuser.processes if fuser else ())
    processes = _owned(processes, owned)
    services = {p.pid for p in processes if is_service_daemon(p.name)}
    users = {p.pid for p in processes} - services
    return GpuProcessesFacts(
        processes=processes,
        count=len(users),
        pids=tuple(sorted(users)),
        service_pids=tuple(sorted(services)),
        compute_pids=tuple(sorted({p.pid for p in query.processes})) if query else (),
        holder_pids=tuple(sorted({p.pid for p in fuser.processes})) if fuser else (),
        holder_commands=tuple(sorted({p.name for p in fuser.processes if p.name})) if fuser else (),
        complete=all(source.complete for source in sources.values()),
        query_ok=query.ok if query else None,
        # Only a clean scan may vouch for the node alone (actions.gates.busy_reason).
        fuser_ok=fuser.ok and fuser.complete if fuser else None,
        errors=(
            *(error for source in sources.values() for error in source.errors),
            *owned.errors,
        ),
        owners_ok=owned.owners_ok,
        slurm_jobs=owned.jobs,
        slurm_jobs_ok=owned.jobs_ok,
        orphan_pids=orphans(processes, owned.jobs) if owned.owners_ok and owned.jobs_ok else (),
    )


def orphans(processes: tuple[HeldProcess, ...], jobs: tuple[int, ...]) -> tuple[int, ...]:
    """The PIDs no job Slurm has on the node owns: a process in the cgroup of a job Slurm no
    longer has (a crashed job's left-over), or, on a node where Slurm has no job at all, a
    CUDA process (one holding GPU memory) in no job that is not one of NVIDIA's daemons. While
    a job runs, a process outside every job cgroup is not an orphan: where Slurm tracks
    processes without cgroups (proctrack/linuxproc, pgid) the job's own ranks look like that.
    A process ps did not list (it exited, or ps could not see it) is none: nothing is known of
    it. A device holder in no job that holds no GPU memory (a monitoring tool) is left alone."""
    found = {
        process.pid
        for process in processes
        if process.started is not None
        and not is_service_daemon(process.name)
        and not is_service_daemon(_program(process.command_line))
        and (
            (process.job_id is not None and process.job_id not in jobs)
            or (process.job_id is None and "query" in process.sources and not jobs)
        )
    }
    return tuple(sorted(found))


def _program(command_line: str | None) -> str | None:
    """The program's own name (no directory) from a command line."""
    if not command_line:
        return None
    return command_line.split()[0].rsplit("/", 1)[-1]


PROBE: Probe[GpuProcessesFacts] = Probe(
    name=NAME,
    summary="Processes holding GPUs: CUDA apps per GPU (nvidia-smi) and device-file holders "
    "(fuser)",
    command=command,
    parse=parse,
    params={
        "nvidia_smi_timeout": "seconds nvidia-smi --query-compute-apps may take before it is "
        f"killed ({DEFAULT_TIMEOUT:g})",
        "fuser_timeout": f"seconds fuser may take before it is killed ({DEFAULT_TIMEOUT:g})",
        "node": "the node's Slurm name, whose jobs squeue lists (default: its short hostname)",
    },
)
