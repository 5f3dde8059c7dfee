"""The `slurm_node` probe: one node's Slurm state, drain reason and allocation.

Reads `scontrol show node NAME` (the multi-line form, and the `-o` one-line form) and, as the
fallback, an `sinfo` table with a header line (`sinfo -N -n NAME -o '%N|%P|%T|...'`, or any
default sinfo layout: columns are found by their titles, `|`-separated or aligned).

The facts describe exactly one node: a runbook's `when:` on drain state must never blur two
nodes together. An sinfo partition summary that covers several nodes (`drain compute[001-003]`)
is therefore refused with the node count; so are sinfo outputs without a header (the columns
would be guesses), `sinfo -s`/count summaries and `Node X not found`.

State words follow Slurm: scontrol prints `BASE+FLAG+...` (`IDLE+DRAIN`, `MIXED+DRAIN`,
`DOWN*+NOT_RESPONDING`), sinfo prints short or long lower-case words with suffix marks
(`drng@`, `fail*`, `idle~`). `drained` means DRAIN is set and nothing runs any more (DRAINED in
sinfo's words); `draining` means DRAIN is set while jobs still hold the node, including
`IDLE+COMPLETING+DRAIN` (an epilog still runs: Slurm itself calls that DRAINING).

When scontrol fails, the command prints each tool's answer after a `### fleetfix <tool> rc=N`
marker, so a failure is read as one: both tools failing is a ProbeParseError that says why
(Slurm not installed, controller unreachable, node unknown), never facts that look idle.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fleetfix.errors import ProbeParseError
from fleetfix.probes.base import Probe
from fleetfix.probes.text import clean_lines

NAME = "slurm_node"
FLEETFIX_REASON_PREFIX = "fleetfix:"
SINFO_FORMAT = "%N|%P|%T|%C|%G|%u|%H|%E"
"""The fallback's sinfo format: node, partition, long state, CPUs A/I/O/T, GRES, reason
user, reason time, reason (last, so a reason may contain anything)."""


class Source(StrEnum):
    """Which Slurm command printed the parsed text."""

    SCONTROL = "scontrol"
    SINFO = "sinfo"


@dataclass(frozen=True, slots=True)
class NodeState:
    """A decoded Slurm state word: base state (None when the word hides it) and flags."""

    base_state: str | None
    flags: tuple[str, ...]
    busy: bool
    """The word itself says jobs hold the node (sinfo `drng`, `mix`, `alloc`, `comp`...)."""


@dataclass(frozen=True, slots=True)
class SlurmNodeFacts:
    """One node as Slurm sees it, with the booleans drain/resume runbooks gate on."""

    source: Source
    name: str
    state: str
    """The state exactly as printed, e.g. `IDLE+DRAIN`, `drng@`."""
    base_state: str | None
    """IDLE, ALLOCATED, MIXED, DOWN, ERROR, FUTURE, UNKNOWN; None when sinfo's word hides it."""
    flags: tuple[str, ...]
    drained: bool
    draining: bool
    allocated: bool
    has_jobs: bool
    down: bool
    not_responding: bool
    reason: str | None
    reason_user: str | None
    reason_time: str | None
    reason_is_fleetfix: bool
    cpus_alloc: int | None
    cpus_idle: int | None
    """CPUs not allocated to any job (total minus allocated)."""
    cpus_total: int | None
    gres: str | None
    gpus_total: int | None
    gpus_alloc: int | None
    partitions: tuple[str, ...]
    boot_time: str | None
    slurm_version: str | None


def command(params: Mapping[str, Any]) -> str:
    """`scontrol show node NODE`, falling back to a one-node `sinfo -N` table; when scontrol
    fails, both tools' answers (stderr included) follow `### fleetfix <tool> rc=N` markers and
    the command exits with sinfo's status."""
    node = str(params.get("node", "")).strip()
    target = shlex.quote(node) if node else "$(hostname -s)"
    return (
        f'node={target}; d=$(mktemp -d) || exit 1; scontrol show node "$node" >"$d/o" 2>"$d/e";'
        ' rc=$?; if [ $rc -eq 0 ]; then cat "$d/o"; else'
        f' echo "{_MARKER}scontrol rc=$rc"; cat "$d/o" "$d/e";'
        f' sinfo -N -n "$node" -o {shlex.quote(SINFO_FORMAT)} >"$d/o" 2>"$d/e"; rc=$?;'
        f' echo "{_MARKER}sinfo rc=$rc"; cat "$d/o"; [ $rc -eq 0 ] || cat "$d/e"; fi;'
        ' rm -rf "$d"; exit $rc'
    )


def parse(text: str) -> SlurmNodeFacts:
    """Parse scontrol or sinfo output (auto-detected) describing one node.

    Raises:
        ProbeParseError: not scontrol/sinfo node output, or output about several nodes.
    """
    if any(line.startswith(_MARKER) for line in text.splitlines()):
        return _parse_fallback(text)
    return _parse_one(text, text)


def _parse_one(text: str, shown: str) -> SlurmNodeFacts:
    """Facts from one tool's output; `shown` is the whole output, for error excerpts."""
    lines = _clean(text)
    if any(line.startswith("NodeName=") for _, line in lines):
        return _parse_scontrol(lines, shown)
    header = next((i for i, (_, line) in enumerate(lines) if _sinfo_columns(line)), None)
    if header is not None:
        return _parse_sinfo(lines[header:], shown)
    not_found = next((line for _, line in lines if _NOT_FOUND.match(line)), None)
    if not_found:
        raise ProbeParseError(NAME, f"Slurm does not know the node ({not_found})", shown)
    if not text.strip():
        raise ProbeParseError(NAME, "empty output", shown)
    raise ProbeParseError(
        NAME, "not scontrol show node output nor an sinfo table with a header line", shown
    )


PROBE: Probe[SlurmNodeFacts] = Probe(
    name=NAME,
    summary="Slurm state of this node: state flags, drain reason (fleetfix or human), jobs",
    command=command,
    parse=parse,
    params={"node": "Slurm node name; default: this host's short hostname"},
)


# --- when scontrol failed ----------------------------------------------------------------

_MARKER = "### fleetfix "
_MARKER_LINE = re.compile(r"^### fleetfix (scontrol|sinfo) rc=(\d+)\s*$")
_UNREACHABLE = re.compile(r"Unable to contact slurm controller|Connection refused|connect failure")
_COMMAND_NOT_FOUND = 127


@dataclass(frozen=True, slots=True)
class _Answer:
    """One tool's section: exit status, its lines (numbered as in the whole output)."""

    rc: int
    lines: tuple[tuple[int, str], ...]

    def said(self) -> str:
        return next((line.strip() for _, line in self.lines if line.strip()), "(nothing)")


def _answers(text: str) -> dict[str, _Answer]:
    answers: dict[str, _Answer] = {}
    tool, rc, lines = None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        marker = _MARKER_LINE.match(line)
        if marker is None and line.startswith(_MARKER):
            raise ProbeParseError(NAME, "unknown fleetfix marker", text, line=number)
        if marker is None:
            lines.append((number, line))
            continue
        if tool is not None:
            answers[tool] = _Answer(rc, tuple(lines))
        elif any(line.strip() for _, line in lines):
            raise ProbeParseError(NAME, "output before the first marker", text, line=1)
        tool, rc, lines = marker.group(1), int(marker.group(2)), []
    if tool is not None:
        answers[tool] = _Answer(rc, tuple(lines))
    return answers


def _parse_fallback(text: str) -> SlurmNodeFacts:
    """scontrol failed: sinfo's table when it answered, else why Slurm could not be read."""
    answers = _answers(text)
    scontrol, sinfo = answers.get("scontrol"), answers.get("sinfo")
    if sinfo is not None and sinfo.rc == 0:
        # Blank every other line so errors keep the line numbers of the whole output.
        kept = dict(sinfo.lines)
        only_sinfo = "\n".join(
            kept.get(number, "") for number in range(1, len(text.splitlines()) + 1)
        )
        try:
            return _parse_one(only_sinfo, text)
        except ProbeParseError as exc:
            if scontrol is None:
                raise
            unknown = _node_unknown(scontrol)
            reason = unknown or f"{exc.reason} (scontrol exited {scontrol.rc}: {scontrol.said()})"
            raise ProbeParseError(NAME, reason, text, line=exc.line) from exc
    raise ProbeParseError(NAME, _why_both_failed(scontrol, sinfo), text)


def _node_unknown(answer: _Answer) -> str | None:
    words = next((ln.strip() for _, ln in answer.lines if _NOT_FOUND.match(ln.strip())), None)
    return f"Slurm does not know the node ({words})" if words else None


def _why_both_failed(scontrol: _Answer | None, sinfo: _Answer | None) -> str:
    """A typed reason: not installed, controller unreachable, node unknown, or their words."""
    answered = [(tool, a) for tool, a in (("scontrol", scontrol), ("sinfo", sinfo)) if a]
    if answered and all(a.rc == _COMMAND_NOT_FOUND for _, a in answered):
        return (
            "slurm not installed on this node (scontrol and sinfo not found); for hosts outside"
            " Slurm set the host var fleetfix_slurm: false"
        )
    unknown = next((found for _, a in answered if (found := _node_unknown(a))), None)
    if unknown:
        return unknown
    for _, answer in answered:
        words = next((ln.strip() for _, ln in answer.lines if _UNREACHABLE.search(ln)), None)
        if words:
            return f"cannot reach the Slurm controller: {words}"
    told = "; ".join(f"{tool} exited {a.rc}: {a.said()}" for tool, a in answered)
    return f"Slurm did not answer ({told or 'no output'})"


# --- state words -------------------------------------------------------------------------

_BASES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "RESERVED",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
# sinfo words (short %t and long %T forms): base state, flags, and whether jobs hold the node.
_SINFO_WORDS: dict[str, tuple[str | None, tuple[str, ...], bool]] = {
    "idle": ("IDLE", (), False),
    "alloc": ("ALLOCATED", (), True),
    "allocated": ("ALLOCATED", (), True),
    "mix": ("MIXED", (), True),
    "mixed": ("MIXED", (), True),
    "down": ("DOWN", (), False),
    "err": ("ERROR", (), False),
    "error": ("ERROR", (), False),
    "futr": ("FUTURE", (), False),
    "future": ("FUTURE", (), False),
    "unk": ("UNKNOWN", (), False),
    "unknown": ("UNKNOWN", (), False),
    "drain": (None, ("DRAIN",), False),
    "drained": (None, ("DRAIN",), False),
    "drng": (None, ("DRAIN",), True),
    "draining": (None, ("DRAIN",), True),
    "comp": (None, ("COMPLETING",), True),
    "completing": (None, ("COMPLETING",), True),
    "fail": (None, ("FAIL",), False),
    "failg": (None, ("FAIL",), True),
    "failing": (None, ("FAIL",), True),
    "maint": (None, ("MAINTENANCE",), False),
    "resv": (None, ("RESERVED",), False),
    "reserved": (None, ("RESERVED",), False),
    "plnd": ("IDLE", ("PLANNED",), False),
    "planned": ("IDLE", ("PLANNED",), False),
    "inval": (None, ("INVALID_REG",), False),
    "invalid": (None, ("INVALID_REG",), False),
    "npc": (None, ("PERFCTRS",), False),
    "perfctrs": (None, ("PERFCTRS",), False),
    "pow_dn": (None, ("POWERED_DOWN",), False),
    "powered_down": (None, ("POWERED_DOWN",), False),
    "powering_down": (None, ("POWERING_DOWN",), False),
    "pow_up": (None, ("POWERING_UP",), False),
    "powering_up": (None, ("POWERING_UP",), False),
    "boot": (None, ("REBOOT_ISSUED",), False),
    "reboot": (None, ("REBOOT_REQUESTED",), False),
    "reboot_requested": (None, ("REBOOT_REQUESTED",), False),
    "reboot_issued": (None, ("REBOOT_ISSUED",), False),
    "blocked": (None, ("BLOCKED",), False),
    "cloud": (None, ("CLOUD",), False),
}


def decode_state(word: str) -> NodeState:
    """Decode an scontrol (`MIXED+DRAIN`, `DOWN*+NOT_RESPONDING`) or sinfo (`drng@`) state.

    Raises:
        ValueError: the word is not a Slurm node state.
    """
    parts = word.strip().split("+")
    head = parts[0].rstrip("".join(_SUFFIX_FLAGS))
    marks = tuple(_SUFFIX_FLAGS[char] for char in parts[0][len(head) :])
    extra = tuple(part.upper() for part in parts[1:] if part)
    if any(not re.fullmatch(r"[A-Z_]+", flag) for flag in extra):
        raise ValueError(f"not a Slurm node state: {word!r}")
    base: str | None
    flags: tuple[str, ...]
    if head.upper() in _BASES:
        base, flags, busy = head.upper(), (), head.upper() in ("ALLOCATED", "MIXED")
    elif head.lower() in _SINFO_WORDS:
        base, flags, busy = _SINFO_WORDS[head.lower()]
    else:
        raise ValueError(f"not a Slurm node state: {word!r}")
    merged = tuple(dict.fromkeys((*flags, *marks, *extra)))
    return NodeState(base_state=base, flags=merged, busy=busy or "COMPLETING" in merged)


# --- shared helpers ----------------------------------------------------------------------

_PROMPT = re.compile(r"^(?:.{0,80}?[$#>]\s*|\+\s+)?(?:sudo\s+)?(?:\S*/)?(?:scontrol|sinfo)\b")
_NOT_FOUND = re.compile(r"^Node \S+ not found$")
_REASON = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^@\]\s]+)@(?P<time>[^\]\s]+)\]\s*$")
_NONE_WORDS = frozenset({"", "none", "(null)", "n/a", "unknown"})


def _clean(text: str) -> list[tuple[int, str]]:
    """Numbered, stripped content lines without paste artefacts or the command's own line."""
    return [
        (line.number, line.text.strip())
        for line in clean_lines(text)
        if line.text.strip() and not _PROMPT.match(line.text.strip())
    ]


def _value(raw: str | None) -> str | None:
    """A printed value, or None for Slurm's spellings of nothing."""
    if raw is None or raw.strip().lower() in _NONE_WORDS:
        return None
    return raw.strip()


def _integer(raw: str | None, line: int, text: str) -> int | None:
    value = _value(raw)
    if value is None:
        return None
    if not value.isdigit():
        raise ProbeParseError(NAME, f"not a number: {value!r}", text, line=line)
    return int(value)


def _gpu_count(gres: str | None) -> int | None:
    """GPUs in a GRES string (`gpu:h100:8(S:0-1),nic:1` -> 8); None when no gpu entry."""
    if gres is None:
        return None
    counts = [
        int(match.group(1))
        for entry in re.split(r",(?![^(]*\))", gres)
        if (match := re.match(r"^gpu(?::[^:(]+)*?:(\d+)(?:\(.*\))?$", entry.strip()))
    ]
    return sum(counts) if counts else None


def _tres_gpus(tres: str | None) -> int | None:
    """`gres/gpu=4` out of a TRES list; None when the list names no GPUs."""
    match = re.search(r"(?:^|,)gres/gpu=(\d+)", tres or "")
    return int(match.group(1)) if match else None


def _split_reason(raw: str | None) -> tuple[str | None, str | None, str | None]:
    """`text [user@time]` -> (text, user, time); a bare text keeps user and time None."""
    reason = _value(raw)
    if reason is None:
        return None, None, None
    match = _REASON.match(reason)
    if match is None:
        return reason, None, None
    return _value(match.group("text")), match.group("user"), match.group("time")


@dataclass(frozen=True, slots=True)
class _Fields:
    """What either source contributes before the derived booleans are computed."""

    source: Source
    name: str
    state: str
    reason: tuple[str | None, str | None, str | None]
    cpus: tuple[int | None, int | None]
    gres: str | None
    gpus: tuple[int | None, int | None]
    partitions: tuple[str, ...]
    boot_time: str | None = None
    slurm_version: str | None = None


def _facts(fields: _Fields, state_line: int, text: str) -> SlurmNodeFacts:
    try:
        decoded = decode_state(fields.state)
    except ValueError as exc:
        raise ProbeParseError(NAME, str(exc), text, line=state_line) from exc
    cpus_alloc, cpus_total = fields.cpus
    gpus_total, gpus_alloc = fields.gpus
    allocated = decoded.base_state in ("ALLOCATED", "MIXED") or decoded.busy
    allocated = allocated or bool(cpus_alloc) or bool(gpus_alloc)
    has_jobs = allocated or "COMPLETING" in decoded.flags
    drain = "DRAIN" in decoded.flags
    reason, user, when = fields.reason
    idle = None if cpus_total is None or cpus_alloc is None else cpus_total - cpus_alloc
    return SlurmNodeFacts(
        source=fields.source,
        name=fields.name,
        state=fields.state,
        base_state=decoded.base_state,
        flags=decoded.flags,
        drained=drain and not has_jobs,
        draining=drain and has_jobs,
        allocated=allocated,
        has_jobs=has_jobs,
        down=decoded.base_state == "DOWN",
        not_responding="NOT_RESPONDING" in decoded.flags,
        reason=reason,
        reason_user=user,
        reason_time=when,
        reason_is_fleetfix=bool(reason and reason.startswith(FLEETFIX_REASON_PREFIX)),
        cpus_alloc=cpus_alloc,
        cpus_idle=idle,
        cpus_total=cpus_total,
        gres=fields.gres,
        gpus_total=gpus_total,
        gpus_alloc=gpus_alloc,
        partitions=fields.partitions,
        boot_time=fields.boot_time,
        slurm_version=fields.slurm_version,
    )


# --- scontrol show node --------------------------------------------------------------------

_KEY = re.compile(r"^([A-Za-z][\w/]*)=(.*)$")
# Values printed on a line of their own that may hold spaces and '=' signs.
_WHOLE_LINE_KEYS = ("Reason=", "OS=", "Comment=", "Extra=")


def _scontrol_pairs(lines: list[tuple[int, str]], text: str) -> dict[str, tuple[int, str]]:
    """`Key=value` pairs of the one node record, each with the line it came from."""
    pairs: dict[str, tuple[int, str]] = {}
    last: str | None = None
    for number, line in lines:
        if _NOT_FOUND.match(line):
            continue
        if line.startswith(_WHOLE_LINE_KEYS):
            key, value = line.split("=", 1)
            pairs[key] = (number, value.strip())
            last = key
            continue
        for token in line.split():
            if (match := _KEY.match(token)) is not None:
                last = match.group(1)
                if last == "NodeName" and "NodeName" in pairs:
                    raise ProbeParseError(
                        NAME, "scontrol printed several nodes; expected one", text, line=number
                    )
                pairs[last] = (number, match.group(2))
            elif last is not None:
                # A value with spaces (one-line `-o` form): the token continues it.
                start, value = pairs[last]
                pairs[last] = (start, f"{value} {token}")
            else:
                raise ProbeParseError(NAME, "unexpected text", text, line=number)
    return pairs


def _scontrol_gpus(pairs: dict[str, tuple[int, str]]) -> tuple[int | None, int | None]:
    """(configured, allocated) GPUs from CfgTRES/AllocTRES, else from Gres/GresUsed.

    An AllocTRES without gres/gpu means "no GPU allocated" only when CfgTRES tracks GPUs;
    otherwise GPUs are not accounted as TRES and 0 would be a made-up number.
    """
    raw = {key: _value(value) for key, (_, value) in pairs.items()}
    configured = _tres_gpus(raw.get("CfgTRES"))
    total = configured if configured is not None else _gpu_count(raw.get("Gres"))
    allocated = _tres_gpus(raw.get("AllocTRES"))
    if allocated is None and configured is not None and "AllocTRES" in pairs:
        allocated = 0
    if allocated is None:
        allocated = _gpu_count(raw.get("GresUsed"))
    return total, allocated


def _parse_scontrol(lines: list[tuple[int, str]], text: str) -> SlurmNodeFacts:
    pairs = _scontrol_pairs(lines, text)
    if "State" not in pairs:
        raise ProbeParseError(NAME, "scontrol node record without State=", text)

    def get(key: str) -> str | None:
        return _value(pairs[key][1]) if key in pairs else None

    def integer(key: str) -> int | None:
        return _integer(pairs[key][1], pairs[key][0], text) if key in pairs else None

    total = integer("CPUEfctv")
    fields = _Fields(
        source=Source.SCONTROL,
        name=pairs["NodeName"][1],
        state=pairs["State"][1],
        reason=_split_reason(get("Reason")),
        cpus=(integer("CPUAlloc"), total if total is not None else integer("CPUTot")),
        gres=get("Gres"),
        gpus=_scontrol_gpus(pairs),
        partitions=tuple((get("Partitions") or "").split(",")) if get("Partitions") else (),
        boot_time=get("BootTime"),
        slurm_version=get("Version"),
    )
    return _facts(fields, pairs["State"][0], text)


# --- sinfo tables ----------------------------------------------------------------------------

_COLUMN = re.compile(r"^[A-Z][A-Z_]*(?:\([A-Z/]+\))?$|^S:C:T$")


def _split_row(line: str, width: int) -> list[str]:
    if "|" in line:
        return [cell.strip() for cell in line.split("|")]
    return line.split(None, width - 1)


def _sinfo_columns(line: str) -> list[str] | None:
    """The column titles when `line` is an sinfo header naming STATE and the nodes."""
    titles = _split_row(line, 64)
    if not all(_COLUMN.match(title) for title in titles) or "STATE" not in titles:
        return None
    return titles if "NODELIST" in titles or "HOSTNAMES" in titles else None


MAX_HOSTLIST_NAMES = 1_000_000
"""A node list naming more is refused before it is expanded (a garbled line must not eat the
controller's memory); the inventory's host ranges have the same cap."""


def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """Slurm hostlist expression -> names: `c[002,008-010]` -> c002, c008, c009, c010.

    Raises:
        ValueError: a bound is not a number, or the list names more than MAX_HOSTLIST_NAMES.
    """
    items = re.split(r",(?![^\[]*\])", hostlist.strip())
    size = sum(_hostlist_size(item) for item in items)
    if size > MAX_HOSTLIST_NAMES:
        raise ValueError(f"node list names {size} nodes, more than {MAX_HOSTLIST_NAMES:,}")
    names: list[str] = []
    for item in items:
        match = _HOSTLIST_ITEM.match(item)
        if match is None:
            names.append(item)
            continue
        head, ranges, tail = match.groups()
        for low, high in _hostlist_ranges(ranges):
            width = len(low)
            for number in range(int(low), int(high) + 1):
                names.extend(expand_hostlist(f"{head}{number:0{width}d}{tail}"))
    return tuple(names)


_HOSTLIST_ITEM = re.compile(r"^([^\[]*)\[([^\]]+)\](.*)$")


def _hostlist_ranges(ranges: str) -> list[tuple[str, str]]:
    bounds = [part.partition("-") for part in ranges.split(",")]
    return [(low, high or low) for low, _, high in bounds]


def _hostlist_size(item: str) -> int:
    """How many names one comma-free item stands for, without expanding it."""
    match = _HOSTLIST_ITEM.match(item)
    if match is None:
        return 1
    _, ranges, tail = match.groups()
    count = sum(max(int(high) - int(low) + 1, 0) for low, high in _hostlist_ranges(ranges))
    return count * _hostlist_size(tail)


def _sinfo_rows(lines: list[tuple[int, str]], text: str) -> list[tuple[int, dict[str, str]]]:
    columns = _sinfo_columns(lines[0][1]) or []
    rows = []
    for number, line in lines[1:]:
        if _sinfo_columns(line):
            continue  # sinfo repeats the header when `-i` iterates; same columns
        cells = _split_row(line, len(columns))
        if len(cells) != len(columns):
            raise ProbeParseError(
                NAME,
                f"sinfo row has {len(cells)} cells for {len(columns)} columns",
                text,
                line=number,
            )
        rows.append((number, dict(zip(columns, cells, strict=True))))
    return rows


def _parse_sinfo(lines: list[tuple[int, str]], text: str) -> SlurmNodeFacts:
    rows = _sinfo_rows(lines, text)
    if not rows:
        raise ProbeParseError(NAME, "sinfo printed its header but no node row", text)
    names = _node_names(rows, text)
    if len(names) > 1:
        raise ProbeParseError(
            NAME,
            f"sinfo output covers {len(names)} nodes ({', '.join(names[:4])}, ...);"
            " slurm_node reads one node: use `scontrol show node NAME` or `sinfo -N -n NAME`",
            text,
            line=rows[0][0],
        )
    return _sinfo_facts(rows, text)


def _node_names(rows: list[tuple[int, dict[str, str]]], text: str) -> list[str]:
    """Every distinct node the rows name (a node shows once per partition)."""
    names: dict[str, None] = {}
    for number, row in rows:
        try:
            names.update(dict.fromkeys(expand_hostlist(row.get("NODELIST") or row["HOSTNAMES"])))
        except (KeyError, ValueError) as exc:
            raise ProbeParseError(NAME, "unreadable node list", text, line=number) from exc
    return list(names)


def _sinfo_facts(rows: list[tuple[int, dict[str, str]]], text: str) -> SlurmNodeFacts:
    number, first = rows[0]
    cpus = (first.get("CPUS(A/I/O/T)") or "").split("/")
    cpus_alloc = _integer(cpus[0], number, text) if len(cpus) == 4 else None
    cpus_total = _integer(cpus[3], number, text) if len(cpus) == 4 else None
    gres = _value(first.get("GRES"))
    partitions = tuple(
        dict.fromkeys(row["PARTITION"].rstrip("*") for _, row in rows if row.get("PARTITION"))
    )
    reason = _value(first.get("REASON"))
    fields = _Fields(
        source=Source.SINFO,
        name=first.get("NODELIST") or first.get("HOSTNAMES") or "",
        state=first["STATE"],
        reason=(reason, _value(first.get("USER")), _value(first.get("TIMESTAMP"))),
        cpus=(cpus_alloc, cpus_total),
        gres=gres,
        gpus=(_gpu_count(gres), _gpu_count(_value(first.get("GRES_USED")))),
        partitions=partitions,
    )
    return _facts(fields, number, text)
