"""Reading one node's record out of `scontrol show node` or an `sinfo -N` table, as fields.

scontrol prints `Key=value` pairs over several lines (or one with `-o`); values that may hold
spaces (`Reason=`, `OS=`, `Comment=`, `Extra=`) take the rest of their line. sinfo tables are
read by their column titles, `|`-separated or aligned. Either way the result is NodeFields,
from which slurm_node derives its facts; output about several nodes is refused here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from fleetfix.errors import ProbeParseError
from fleetfix.probes.text import clean_lines

NAME = "slurm_node"


class Source(StrEnum):
    """Which Slurm command printed the parsed text."""

    SCONTROL = "scontrol"
    SINFO = "sinfo"


@dataclass(frozen=True, slots=True)
class NodeFields:
    """What either tool printed about the node, before the facts' booleans are derived."""

    source: Source
    name: str
    state: str
    state_line: int
    """Where the state was printed (for an error about an unknown state word)."""
    reason: tuple[str | None, str | None, str | None]
    cpus: tuple[int | None, int | None]
    gres: str | None
    gpus: tuple[int | None, int | None]
    partitions: tuple[str, ...]
    boot_time: str | None = None
    slurm_version: str | None = None
    reservation: str | None = None
    """scontrol's `ReservationName=` (Slurm >= 23.02 prints it for a node in a reservation)."""


# --- shared helpers ----------------------------------------------------------------------

_PROMPT = re.compile(r"^(?:.{0,80}?[$#>]\s*|\+\s+)?(?:sudo\s+)?(?:\S*/)?(?:scontrol|sinfo)\b")
NOT_FOUND = re.compile(r"^Node \S+ not found$")
_REASON = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^@\]\s]+)@(?P<time>[^\]\s]+)\]\s*$")
_NONE_WORDS = frozenset({"", "none", "(null)", "n/a", "unknown"})


def clean(text: str) -> list[tuple[int, str]]:
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


# --- scontrol show node --------------------------------------------------------------------

_KEY = re.compile(r"^([A-Za-z][\w/]*)=(.*)$")
# Values printed on a line of their own that may hold spaces and '=' signs.
_WHOLE_LINE_KEYS = ("Reason=", "OS=", "Comment=", "Extra=")


def _scontrol_pairs(lines: list[tuple[int, str]], text: str) -> dict[str, tuple[int, str]]:
    """`Key=value` pairs of the one node record, each with the line it came from."""
    pairs: dict[str, tuple[int, str]] = {}
    last: str | None = None
    for number, line in lines:
        if NOT_FOUND.match(line):
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


def read_scontrol(lines: list[tuple[int, str]], text: str) -> NodeFields:
    pairs = _scontrol_pairs(lines, text)
    if "State" not in pairs:
        raise ProbeParseError(NAME, "scontrol node record without State=", text)

    def get(key: str) -> str | None:
        return _value(pairs[key][1]) if key in pairs else None

    def integer(key: str) -> int | None:
        return _integer(pairs[key][1], pairs[key][0], text) if key in pairs else None

    total = integer("CPUEfctv")
    return NodeFields(
        source=Source.SCONTROL,
        name=pairs["NodeName"][1],
        state=pairs["State"][1],
        state_line=pairs["State"][0],
        reason=_split_reason(get("Reason")),
        cpus=(integer("CPUAlloc"), total if total is not None else integer("CPUTot")),
        gres=get("Gres"),
        gpus=_scontrol_gpus(pairs),
        partitions=tuple((get("Partitions") or "").split(",")) if get("Partitions") else (),
        boot_time=get("BootTime"),
        slurm_version=get("Version"),
        reservation=get("ReservationName"),
    )


# --- sinfo tables ----------------------------------------------------------------------------

_COLUMN = re.compile(r"^[A-Z][A-Z_]*(?:\([A-Z/]+\))?$|^S:C:T$")


def _split_row(line: str, width: int) -> list[str]:
    if "|" in line:
        return [cell.strip() for cell in line.split("|")]
    return line.split(None, width - 1)


def sinfo_columns(line: str) -> list[str] | None:
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
    columns = sinfo_columns(lines[0][1]) or []
    rows = []
    for number, line in lines[1:]:
        if sinfo_columns(line):
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


def read_sinfo(lines: list[tuple[int, str]], text: str) -> NodeFields:
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
    return _sinfo_fields(rows, text)


def _node_names(rows: list[tuple[int, dict[str, str]]], text: str) -> list[str]:
    """Every distinct node the rows name (a node shows once per partition)."""
    names: dict[str, None] = {}
    for number, row in rows:
        try:
            names.update(dict.fromkeys(expand_hostlist(row.get("NODELIST") or row["HOSTNAMES"])))
        except (KeyError, ValueError) as exc:
            raise ProbeParseError(NAME, "unreadable node list", text, line=number) from exc
    return list(names)


def _sinfo_fields(rows: list[tuple[int, dict[str, str]]], text: str) -> NodeFields:
    number, first = rows[0]
    cpus = (first.get("CPUS(A/I/O/T)") or "").split("/")
    cpus_alloc = _integer(cpus[0], number, text) if len(cpus) == 4 else None
    cpus_total = _integer(cpus[3], number, text) if len(cpus) == 4 else None
    gres = _value(first.get("GRES"))
    partitions = tuple(
        dict.fromkeys(row["PARTITION"].rstrip("*") for _, row in rows if row.get("PARTITION"))
    )
    reason = _value(first.get("REASON"))
    return NodeFields(
        source=Source.SINFO,
        name=first.get("NODELIST") or first.get("HOSTNAMES") or "",
        state=first["STATE"],
        state_line=number,
        reason=(reason, _value(first.get("USER")), _value(first.get("TIMESTAMP"))),
        cpus=(cpus_alloc, cpus_total),
        gres=gres,
        gpus=(_gpu_count(gres), _gpu_count(_value(first.get("GRES_USED")))),
        partitions=partitions,
    )
