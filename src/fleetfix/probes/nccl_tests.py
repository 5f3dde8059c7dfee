"""The `nccl_tests` probe: results of all_reduce_perf and the other nccl-tests binaries.

The parser reads what those binaries print, in every layout seen in real runs:

* the header (`# nThread 1 nGpus 8 minBytes ...`, NCCL 1 without the `#`), the `# Using devices`
  rank lines (with or without `Group`/`Pid`; bus ids `[0x1b]` or `[0002:00:01]`);
* result rows: `size count type redop root` + out-of-place and in-place `time algbw busbw
  #wrong`; the older `error` column (max deviation, `4e-07`) and the pre-redop layouts, found
  from the table header or, for header-less tails, from the number of cells. `#wrong` is printed
  with `%6g`: a count past 999999 reads `1.57286e+06`, and still counts;
* `# Out of bounds values : N OK|FAILED`, `# Avg bus bandwidth : X`;
* failures: `Test NCCL failure`, `Test failure common.cu:915`, NCCL 1's `NCCL failure ...`,
  CUDA failures, `# Test FAILED`, mpirun's abort notices, and `NCCL WARN` lines that report an
  error (the /dev/shm exhaustion case is flagged as `shm_exhausted`).

Open MPI tags (`[1,0]<stdout>:`), interleaved `NCCL INFO` debug lines, ssh/X11 noise, shell
prompts and a 4-space markdown indent are skipped. Several runs in one output (one per op, as
the probe's own command prints them) are split at each command line, `# Collective test
starting:` line or header. Output with nothing of the above raises ProbeParseError.

A node without the nccl-tests binaries is ToolNotInstalled, never facts: the command prints
`### fleetfix not-installed BINARY` before running anything, and a shell's "command not found"
for a `*_perf` binary (an older command, a paste) says the same.

Truncation: a run is `complete` only when its `Avg bus bandwidth` line is there; a cut-off
output parses as far as it goes with `complete: False`. A malformed result row is refused,
except as the very last line, where it is the cut itself.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import Probe
from fleetfix.probes.not_installed import missing_tool, unless_installed
from fleetfix.probes.text import Line, dedent, split_lines, strip_quotes

NAME = "nccl_tests"
TOOL = "nccl-tests"
DEFAULT_OPS = "all_reduce_perf"
DEFAULT_ARGS = "-b 8M -e 1G -f 2"


@dataclass(frozen=True, slots=True)
class NcclHeader:
    """The parameters line every nccl-tests run starts with."""

    nthread: int | None
    ngpus: int | None
    min_bytes: int | None
    max_bytes: int | None
    warmup_iters: int | None
    iters: int | None
    validation: int | None
    graph: int | None


@dataclass(frozen=True, slots=True)
class NcclRank:
    """One `#  Rank N ... on HOST device D [BUSID] MODEL` line."""

    rank: int
    host: str
    device: int
    bus_id: str
    """As printed: `0x1b` (PCI bus number only) or `0002:00:01` (domain:bus:device)."""
    model: str
    group: int | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class NcclResult:
    """Out-of-place or in-place numbers of one row (None: the run printed N/A or no column)."""

    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None
    """`#wrong` count (nccl-tests >= 2.13); None in the older `error` layout. Past 999999 the
    tool prints it as `1.57286e+06`, read to those 6 significant digits."""
    max_error: float | None
    """The older `error`/`res` column: largest deviation seen; None in the `#wrong` layout."""


@dataclass(frozen=True, slots=True)
class NcclRow:
    """One message size of one op."""

    op: str | None
    size: int
    count: int
    type: str
    redop: str | None
    root: int | None
    out_of_place: NcclResult
    in_place: NcclResult


@dataclass(frozen=True, slots=True)
class NcclRun:
    """Summary of one binary's run (one op) inside the output."""

    op: str | None
    header: NcclHeader | None
    row_count: int
    oob_values: int | None
    avg_busbw: float | None
    complete: bool


@dataclass(frozen=True, slots=True)
class NcclTestsFacts:
    """Every run, rank and row, with the numbers health gates use (GB/s for bandwidth)."""

    ops: tuple[str, ...]
    runs: tuple[NcclRun, ...]
    ranks: tuple[NcclRank, ...]
    hosts: tuple[str, ...]
    rows: tuple[NcclRow, ...]
    avg_busbw: float | None
    """The run's `Avg bus bandwidth`; with several runs the lowest one; None if any is missing."""
    max_busbw: float | None
    wrong_total: int | None
    oob_values: int | None
    failed: bool
    failures: tuple[str, ...]
    nccl_warnings: tuple[str, ...]
    shm_exhausted: bool
    """NCCL could not create its /dev/shm segment (No space left on device)."""
    nccl_version: str | None
    tests_version: str | None
    complete: bool


def meets_threshold(facts: NcclTestsFacts, min_busbw: float) -> bool:
    """True only for a complete, unfailed output whose average bus bandwidth reaches `min_busbw`.

    Args:
        facts: parsed nccl-tests output.
        min_busbw: the lowest acceptable `Avg bus bandwidth`, in GB/s.
    """
    return (
        facts.complete
        and not facts.failed
        and facts.avg_busbw is not None
        and facts.avg_busbw >= min_busbw
    )


def command(params: Mapping[str, Any]) -> str:
    """Print a saved log (`file`), or run each op on this node and echo its command line first.

    The echoed `+ all_reduce_perf ...` line tells the parser where each op's output begins.
    Every binary is looked for before any runs: a missing one prints the not-installed marker
    (exit 0) and nothing else.
    """
    saved = str(params.get("file", "")).strip()
    if saved:
        return f"cat -- {shlex.quote(saved)}"
    bin_dir = str(params.get("bin_dir", "")).strip().rstrip("/")
    args = quoted_args(params.get("args", DEFAULT_ARGS))
    gpus = str(params.get("gpus", "")).strip()
    count = shlex.quote(gpus) if gpus else "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
    binaries = [
        f"{bin_dir}/{op.strip()}" if bin_dir else op.strip()
        for op in str(params.get("ops", DEFAULT_OPS)).split(",")
    ]
    runs = []
    for binary in binaries:
        line = f"{shlex.quote(binary)} {args}"
        runs.append(f'echo {shlex.quote(f"+ {line}")} -g "$g"; {line} -g "$g" 2>&1')
    return f"{unless_installed(binaries)}g={count}; " + "; ".join(runs)


def quoted_args(args: object) -> str:
    """The `args` parameter as shell words, each quoted like every other parameter: a string
    is split as a shell would (`-b 8M -e 1G`), a list is taken word for word. Nothing in it
    runs as shell syntax (`; touch x` is two more arguments to all_reduce_perf).

    Raises:
        ValueError: a string with an unterminated quote.
    """
    words = [str(a) for a in args] if isinstance(args, list | tuple) else shlex.split(str(args))
    return " ".join(shlex.quote(word) for word in words)


def parse(text: str) -> NcclTestsFacts:
    """Parse nccl-tests output (any version, MPI-tagged or not) into NcclTestsFacts.

    Raises:
        ToolNotInstalled: a nccl-tests binary is not on the node.
        ProbeParseError: nothing in the text is nccl-tests or NCCL output, or a result row
            in the middle of the output is malformed.
    """
    if missing_tool(text, _BINARY) is not None:
        raise ToolNotInstalled(NAME, TOOL, text)
    lines = _clean(text)
    reader = _Reader(text, last_line=lines[-1][0] if lines else 0)
    for number, line in lines:
        reader.feed(number, line)
    if not reader.recognised:
        reason = "empty output" if not text.strip() else "no nccl-tests or NCCL output found"
        raise ProbeParseError(NAME, reason, text)
    return reader.facts()


PROBE: Probe[NcclTestsFacts] = Probe(
    name=NAME,
    summary="nccl-tests results: per-size rows, avg/max bus bandwidth, wrong values, failures",
    command=command,
    parse=parse,
    params={
        "ops": f"comma-separated nccl-tests binaries (default {DEFAULT_OPS})",
        "args": f"arguments for each binary (default {DEFAULT_ARGS!r}); -g is added",
        "gpus": "GPUs per process for -g (default: every GPU nvidia-smi lists)",
        "bin_dir": "directory holding the binaries (default: found on PATH)",
        "file": "parse this saved output file instead of running anything",
    },
)


# --- line cleaning ---------------------------------------------------------------------------

_MPI_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
# A command line naming a nccl-tests binary: `+ all_reduce_perf -b 8`, `$ ./build/x_perf`,
# `mpirun ... /opt/nccl-tests/build/all_reduce_perf_mpi ...`.
_OP_LINE = re.compile(r"^[^#].*?(?:^|[\s/])(\w+_perf(?:_mpi)?)(?:\s|$)")
_BINARY = re.compile(r"\w+_perf(?:_mpi)?")


def _clean(text: str) -> list[tuple[int, str]]:
    """Numbered content lines, MPI tags, quote prefixes and a common indent removed.

    Prompt lines stay: the command line names the op (`root@node03:~# ./all_reduce_perf`).
    """
    untagged = tuple(Line(ln.number, _MPI_TAG.sub("", ln.text)) for ln in split_lines(text))
    lines = dedent(strip_quotes(untagged))
    return [(line.number, line.text.rstrip()) for line in lines if line.text.strip()]


# --- line patterns -----------------------------------------------------------------------------

_HEADER = re.compile(r"^#?\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_HEADER_ITEM = re.compile(r"(warmup iters|agg iters|iters|validation|graph):\s*(\d+)")
_RANK = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?(?:\s+Pid\s+(?P<pid>\d+))?"
    r"\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<model>.*)$"
)
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_NCCL_VERSION = re.compile(r"^(?:#\s*NCCL Tests compiled with NCCL|NCCL version)\s+(\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan|inf)")
_NCCL_DEBUG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b")
_NCCL_WARN = re.compile(r"\bNCCL WARN\s+(.*)$")
_WARN_IS_ERROR = re.compile(r"(?i)error|fail|abort|timed? ?out|unhandled|no space")
_FAILURE = re.compile(
    r"(?i)\b(?:test )?(?:nccl|cuda) failure\b|\btest failure\b|#\s*test failed|"
    r"\bnon-zero exit code\b|\bexited on signal\b|\bMPI_ABORT\b|\bsegmentation fault\b|"
    r"\bcommand not found\b|\berror while loading shared libraries\b|\bcannot execute\b"
)
_ROW_START = re.compile(r"^\s*\d+\s+\d+")
_G_COUNT = re.compile(r"^-?\d\.\d+e\+\d+$")  # `%g` of a count >= 1e6: `1.57286e+06`
_TABLE_TITLES = frozenset({"size", "bytes", "count", "N", "type", "redop", "op", "root", "time"})


# --- result rows ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Layout:
    """Which optional columns a result row carries."""

    redop: bool
    root: bool
    wrong_is_count: bool | None
    """True for `#wrong`, False for `error`/`res`; None when unknown (decided per value)."""


def _layout_from_header(line: str) -> _Layout | None:
    """The layout announced by `#  size count type redop root time ... #wrong` titles."""
    titles = line.lstrip("#").split()
    if len(titles) < 4 or titles[0] not in ("size", "bytes") or "time" not in titles:
        return None
    last = titles[-1]
    return _Layout(
        redop="redop" in titles or "op" in titles,
        root="root" in titles,
        wrong_is_count=True if last == "#wrong" else False if last in ("error", "res") else None,
    )


def _layout_from_cells(cells: list[str]) -> _Layout | None:
    """A header-less row's layout from its width: 11, 12 or 13 cells."""
    extra = len(cells) - 11
    if extra == 0:
        return _Layout(redop=False, root=False, wrong_is_count=None)
    if extra in (1, 2) and re.fullmatch(r"[A-Za-z]\w*", cells[3]):
        return _Layout(redop=True, root=extra == 2, wrong_is_count=None)
    return None


def _number(cell: str) -> float | None:
    """A float cell; `N/A` (and nccl-tests' blank placeholders) read as None."""
    if cell in ("N/A", "-", "n/a"):
        return None
    return float(cell)


def _result(cells: list[str], wrong_is_count: bool | None) -> NcclResult:
    time_us, algbw, busbw, check = cells
    wrong: int | None = None
    max_error: float | None = None
    if check not in ("N/A", "-", "n/a"):
        counts = wrong_is_count if wrong_is_count is not None else _looks_like_count(check)
        if counts:
            wrong = _count(check)
        else:
            max_error = float(check)
    return NcclResult(_number(time_us), _number(algbw), _number(busbw), wrong, max_error)


def _looks_like_count(cell: str) -> bool:
    """A header-less row's check cell: digits, or `%g` exponent form with a fraction (a count
    of 1e6 or more); the old `error` column's `%.0le` (`4e-07`, `1e+00`) has no fraction."""
    return cell.lstrip("-").isdigit() or bool(_G_COUNT.match(cell))


def _count(cell: str) -> int:
    """A `#wrong` cell: `12`, or `1.57286e+06` (nccl-tests prints the count with `%6g`)."""
    value = float(cell)
    if not math.isfinite(value):
        raise ValueError(f"#wrong is not a count: {cell!r}")
    return round(value)


def _row(line: str, layout: _Layout | None, op: str | None) -> NcclRow:
    """One result row; raises ValueError when it does not fit any layout."""
    cells = line.split()
    layout = layout or _layout_from_cells(cells)
    width = 11 + layout.redop + layout.root if layout else 0
    if layout is None or len(cells) != width or not re.fullmatch(r"[A-Za-z]\w*", cells[2]):
        raise ValueError(f"{len(cells)} cells do not fit a result row")
    rest = cells[3:]
    redop = rest.pop(0) if layout.redop else None
    root = int(rest.pop(0)) if layout.root else None
    return NcclRow(
        op=op,
        size=int(cells[0]),
        count=int(cells[1]),
        type=cells[2],
        redop=redop,
        root=root,
        out_of_place=_result(rest[:4], layout.wrong_is_count),
        in_place=_result(rest[4:], layout.wrong_is_count),
    )


# --- the reader ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _RunDraft:
    op: str | None = None
    header: NcclHeader | None = None
    rows: list[NcclRow] = field(default_factory=list)
    oob_values: int | None = None
    avg_busbw: float | None = None
    layout: _Layout | None = None

    def empty(self) -> bool:
        return self.header is None and not self.rows and self.avg_busbw is None


class _Reader:
    """Walks cleaned lines once, filling runs, ranks, failures and versions."""

    def __init__(self, text: str, last_line: int) -> None:
        self.text = text
        self.last_line = last_line
        self.runs: list[_RunDraft] = [_RunDraft()]
        self.ranks: list[NcclRank] = []
        self.failures: list[str] = []
        self.warnings: list[str] = []
        self.nccl_version: str | None = None
        self.tests_version: str | None = None
        self.recognised = False
        self.cut = False

    @property
    def run(self) -> _RunDraft:
        return self.runs[-1]

    def _new_run(self, op: str | None) -> None:
        # The command line and nccl-tests' own "starting" line announce the same run.
        if self.run.empty() and (self.run.op is None or op is None or op == self.run.op):
            self.run.op = op or self.run.op
        else:
            self.runs.append(_RunDraft(op=op))

    def feed(self, number: int, line: str) -> None:
        stripped = line.strip()
        for handler in (self._debug, self._structure, self._summary, self._table):
            if handler(number, stripped):
                self.recognised = True
                return
        if _FAILURE.search(stripped):
            self.failures.append(stripped)
            self.recognised = True

    def _debug(self, number: int, line: str) -> bool:
        if not _NCCL_DEBUG.search(line):
            return False
        warn = _NCCL_WARN.search(line)
        if warn:
            self.warnings.append(warn.group(1).strip())
            if _WARN_IS_ERROR.search(warn.group(1)):
                self.failures.append(line)
        return True

    def _structure(self, number: int, line: str) -> bool:
        if (match := _STARTING.match(line)) or (
            "_perf" in line and (match := _OP_LINE.match(line))
        ):
            self._new_run(match.group(1))
        elif match := _HEADER.match(line):
            if self.run.header is not None or self.run.rows:
                self._new_run(None)
            self.run.header = _header(line, match)
        elif match := _RANK.match(line):
            self.ranks.append(_rank(match))
        elif match := _TESTS_VERSION.match(line):
            self.tests_version = match.group(1)
        elif match := _NCCL_VERSION.match(line):
            self.nccl_version = match.group(1)
        else:
            return line.startswith("# Collective test concluded") or line == "# Using devices"
        return True

    def _summary(self, number: int, line: str) -> bool:
        if match := _OOB.match(line):
            self.run.oob_values = int(match.group(1))
            if match.group(2).upper() == "FAILED" or int(match.group(1)) > 0:
                self.failures.append(line)
        elif match := _AVG.match(line):
            self.run.avg_busbw = float(match.group(1))
        else:
            return False
        return True

    def _table(self, number: int, line: str) -> bool:
        body = line.lstrip("#").split()
        if body and (body[0] in ("out-of-place", "(B)") or set(body[:3]) <= _TABLE_TITLES):
            self.run.layout = _layout_from_header(line) or self.run.layout
            return True
        if not _ROW_START.match(line):
            return False
        try:
            self.run.rows.append(_row(line, self.run.layout, self.run.op))
        except ValueError as exc:
            if number != self.last_line:
                raise ProbeParseError(
                    NAME, f"malformed result row ({exc})", self.text, line=number
                ) from exc
            self.cut = True  # the output stops inside this row
        return True

    def facts(self) -> NcclTestsFacts:
        # An op announced but silent (crashed at start) stays: it is an incomplete run.
        runs = [draft for draft in self.runs if draft.op or not draft.empty()] or self.runs[:1]
        rows = tuple(row for run in runs for row in run.rows)
        frozen = tuple(_freeze(run) for run in runs)
        counts = [r.wrong for row in rows for r in (row.out_of_place, row.in_place)]
        known = [count for count in counts if count is not None]
        wrong_total = sum(known) if known else None
        oob = [run.oob_values for run in runs if run.oob_values is not None]
        busbw = [
            r.busbw for row in rows for r in (row.out_of_place, row.in_place) if r.busbw is not None
        ]
        averages = [run.avg_busbw for run in frozen]
        failed = bool(self.failures) or bool(wrong_total)
        # Each op's run lists the same GPUs again (with new pids): keep one entry per GPU.
        ranks: dict[tuple[int, str, int, str], NcclRank] = {}
        for rank in self.ranks:
            ranks.setdefault((rank.rank, rank.host, rank.device, rank.bus_id), rank)
        return NcclTestsFacts(
            ops=tuple(dict.fromkeys(run.op for run in frozen if run.op)),
            runs=frozen,
            ranks=tuple(ranks.values()),
            hosts=tuple(dict.fromkeys(rank.host for rank in self.ranks)),
            rows=rows,
            avg_busbw=None if None in averages else min(a for a in averages if a is not None),
            max_busbw=max(busbw) if busbw else None,
            wrong_total=wrong_total,
            oob_values=sum(oob) if oob else None,
            failed=failed,
            failures=tuple(self.failures),
            nccl_warnings=tuple(self.warnings),
            shm_exhausted=any(_is_shm_exhaustion(w) for w in self.warnings),
            nccl_version=self.nccl_version,
            tests_version=self.tests_version,
            complete=not self.cut and all(run.complete for run in frozen),
        )


def _header(line: str, match: re.Match[str]) -> NcclHeader:
    items = dict(_HEADER_ITEM.findall(line))

    def item(key: str) -> int | None:
        return int(items[key]) if key in items else None

    return NcclHeader(
        nthread=int(match.group(1)),
        ngpus=int(match.group(2)),
        min_bytes=int(match.group(3)),
        max_bytes=int(match.group(4)),
        warmup_iters=item("warmup iters"),
        iters=item("iters"),
        validation=item("validation"),
        graph=item("graph"),
    )


def _rank(match: re.Match[str]) -> NcclRank:
    group, pid = match.group("group"), match.group("pid")
    return NcclRank(
        rank=int(match.group("rank")),
        host=match.group("host"),
        device=int(match.group("device")),
        bus_id=match.group("bus"),
        model=match.group("model").strip(),
        group=int(group) if group is not None else None,
        pid=int(pid) if pid is not None else None,
    )


def _freeze(run: _RunDraft) -> NcclRun:
    return NcclRun(
        op=run.op,
        header=run.header,
        row_count=len(run.rows),
        oob_values=run.oob_values,
        avg_busbw=run.avg_busbw,
        complete=run.avg_busbw is not None,
    )


def _is_shm_exhaustion(warning: str) -> bool:
    lowered = warning.lower()
    return "no space left on device" in lowered and (
        "shm" in lowered or "shared memory" in lowered or "posix_fallocate" in lowered
    )
