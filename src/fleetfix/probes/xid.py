"""The `xid` probe: NVRM Xid events from the kernel log, in bursts, joined with the Xid catalog.

Reads `dmesg -T` (fallback `journalctl -k -o short-iso`), and also the shapes operators paste: raw
/dev/kmsg records, monotonic `[ 1234.5678]` and ctime `[Mon Jan ...]` stamps, `dmesg --decode
--time-format=iso`, syslog/journal `host kernel:` prefixes, and lines with no timestamp at all.
Lines that are not Xids are ignored, but text that is not a kernel log (HTML, binary, a tool error)
is rejected. Kernel records are line-independent, so a cut-off log yields the events it holds;
`complete` is False when the text did not end with a newline (the capture was cut).

Per-event `recommended_action` applies knowledge.xid's rule using the latest Xid 154 the same GPU
logged; a playbook holding nvidia-smi's live recovery action should call
`knowledge.xid.recommended_action` itself with it.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from fleetfix.errors import FleetfixError, ProbeParseError
from fleetfix.knowledge.xid import XidCatalog, parse_recovery_action, xid_catalog
from fleetfix.probes.base import Probe
from fleetfix.probes.gpu_facts import normalize_bus_id
from fleetfix.probes.text import Line, clean_lines, is_elision

NAME = "xid"
DEFAULT_BURST_WINDOW_S = 180.0
"""NVIDIA Fleet Intelligence's burst rule: related Xids until three minutes of silence."""
UNREADABLE_MARKER = "fleetfix-xid: no readable kernel log"


class Clock(enum.StrEnum):
    """What `seconds` counts: since boot, or POSIX time (naive stamps read as UTC)."""

    MONOTONIC = "monotonic"
    WALL = "wall"


class LogFormat(enum.StrEnum):
    """The line shape a kernel log was written in."""

    DMESG_CTIME = "dmesg-ctime"
    DMESG_MONOTONIC = "dmesg-monotonic"
    DMESG_ISO = "dmesg-iso"
    KMSG = "kmsg"
    JOURNAL = "journal"
    JOURNAL_ISO = "journal-iso"
    KERNEL = "kernel-prefix"
    BARE = "bare"
    EMPTY = "empty"


@dataclass(frozen=True, slots=True)
class NvlinkDetail:
    """Sub-fields of an NVLink5 Xid (144-150): `<unit> <Fatal|Nonfatal> XC<n> i<n> Link <n> (regs)`.

    Example: `SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 ...)`.
    """

    unit: str
    fatal: bool
    cross_contain: str | None
    injected: bool | None
    link: int | None
    registers: tuple[int, ...]
    """intrInfo, errorStatus, then debug data; empty when the poster elided them."""
    intr_info: int | None
    error_status: int | None


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One NVRM Xid line."""

    code: int
    bus_id: str | None
    """Normalised `dddd:bb:dd.f` (lower case), None when the bus was elided."""
    pci: str
    """The GPU identifier exactly as written between the parentheses."""
    pid: int | None
    process: str | None
    message: str
    channel: int | None
    caused_by: int | None
    """Xid 45: the earlier Xid it names ("caused by previous Xid 149")."""
    recovery_action: str | None
    """Xid 154: the recovery action the driver changed to."""
    nvlink: NvlinkDetail | None
    uuid: str | None
    """From a preceding `NVRM: GPU at PCI:...: GPU-...` line for the same bus."""
    timestamp: str | None
    seconds: float | None
    clock: Clock | None
    line: int
    mnemonic: str | None
    immediate_action: str | None
    severity: str | None
    recommended_action: str


@dataclass(frozen=True, slots=True)
class XidBurst:
    """Events of one code on one GPU with no gap longer than the burst window."""

    code: int
    bus_id: str | None
    pci: str
    count: int
    first_line: int
    last_line: int
    first_timestamp: str | None
    last_timestamp: str | None
    span_s: float | None


@dataclass(frozen=True, slots=True)
class XidFacts:
    """Everything the kernel log says about Xids."""

    events: tuple[XidEvent, ...]
    count: int
    codes: tuple[int, ...]
    counts: Mapping[int, int]
    """Events per code (`facts.counts['79']` in a `when:`; keys become text there)."""
    bursts: tuple[XidBurst, ...]
    gpus: tuple[str, ...]
    """Bus ids with at least one Xid."""
    recovery_actions: Mapping[str, str]
    """Bus id -> the recovery action of that GPU's latest Xid 154."""
    actions: tuple[str, ...]
    """Distinct recommended actions, sorted."""
    reboot_required: bool
    reset_required_gpus: tuple[str, ...]
    critical_codes: tuple[int, ...]
    source_format: LogFormat
    complete: bool


@dataclass(frozen=True, slots=True)
class _Record:
    """A kernel log line split into its time prefix and its message."""

    line: Line
    fmt: LogFormat | None
    timestamp: str | None
    seconds: float | None
    clock: Clock | None
    message: str


_DECODE = r"(?:[a-z]+\s*:[a-z]+\s*: ?)?"  # dmesg --decode "kern  :warn  : "
_LEVEL = r"(?:<\d+>)?"  # dmesg -r printk level
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_PREFIXES: tuple[tuple[LogFormat, re.Pattern[str]], ...] = (
    (LogFormat.KMSG, re.compile(r"^\d+,\d+,(?P<ts>\d+),[^;]*;")),
    (
        LogFormat.DMESG_CTIME,
        re.compile(
            rf"^{_DECODE}{_LEVEL}\[(?P<ts>[A-Z][a-z]{{2}} [A-Z][a-z]{{2}} [ \d]\d "
            rf"\d\d:\d\d:\d\d \d{{4}})\] ?"
        ),
    ),
    (LogFormat.DMESG_MONOTONIC, re.compile(rf"^{_DECODE}{_LEVEL}\[\s*(?P<ts>\d+\.\d+)\] ?")),
    (LogFormat.JOURNAL_ISO, re.compile(rf"^(?P<ts>{_ISO}) \S+ kernel: ")),
    (LogFormat.DMESG_ISO, re.compile(rf"^{_DECODE}(?P<ts>{_ISO})(?: |$)")),
    (
        LogFormat.JOURNAL,
        re.compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) \S+ kernel: "),
    ),
    (LogFormat.KERNEL, re.compile(r"^kernel: ")),
)
_EMBEDDED_MONOTONIC = re.compile(r"^\[\s*\d+\.\d+\] ?")  # syslog keeping printk time
_JOURNAL_META = re.compile(r"^-- .* --$")  # "-- No entries --", "-- Boot 1a2b... --"
_KMSG_DICT = re.compile(r"^ [A-Z_]+=")  # /dev/kmsg continuation (SUBSYSTEM=pci)
_UNREADABLE = (
    UNREADABLE_MARKER,
    "No journal files were opened",
    "Hint: You are currently not seeing messages",
    "dmesg: read kernel buffer failed",
)
_XID_MARK = "NVRM: Xid"
_XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+)\b[,:]?\s*(?P<rest>.*)$")
_PID = re.compile(r"^pid=(?P<pid>'?<unknown>'?|\d+)(?:,\s*|$)")
_NAME = re.compile(r"^name=(?P<name>[^,]*)(?:,\s*|$)")
_CHANNEL = re.compile(r"\b(?:Ch|channel|Channel ID) (?:0x)?(?P<ch>[0-9a-fA-F]{8})\b")
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<code>\d+)")
_RECOVERY = re.compile(
    r"recovery action changed from 0x[0-9a-fA-F]+ \((?P<old>[^)]*)\) "
    r"to 0x[0-9a-fA-F]+ \((?P<new>[^)]*)\)",
    re.IGNORECASE,
)
_NVLINK = re.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]*) (?P<sev>Nonfatal|Non-fatal|Fatal)\b\s*(?P<xc>XC\d+)?\s*"
    r"(?:i(?P<inj>[01])\s*)?(?:Link (?P<link>\d+))?\s*(?:\((?P<regs>[^)]*)\))?",
    re.IGNORECASE,
)
_UUID_LINE = re.compile(
    r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]{36})\b"
)
_DURATION = re.compile(r"^(?P<n>\d+)\s*(?P<unit>s|m|min|h|d)?$")
_DURATION_UNITS = MappingProxyType({"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400})
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_RESETS = frozenset({"RESET_GPU", "DRAIN_AND_RESET", "BUS_RESET"})


def parse(text: str) -> XidFacts:
    """Xid facts from kernel log text; raises ProbeParseError if it is not a kernel log."""
    records = _records(text)
    _check_kernel_log(text, records)
    events = _events(records, text)
    events = _with_recommendations(events, xid_catalog())
    return _facts(events, records, complete=not text or text.endswith(("\n", "\r")))


def group_bursts(
    events: Iterable[XidEvent], window_s: float = DEFAULT_BURST_WINDOW_S
) -> tuple[XidBurst, ...]:
    """Group events of the same code on the same GPU whose gaps are at most `window_s`.

    Events whose time is unknown join a burst only with events stamped identically.
    """
    open_bursts: dict[tuple[int, str], list[XidEvent]] = {}
    closed: list[list[XidEvent]] = []
    for event in events:
        key = (event.code, event.bus_id or event.pci)
        current = open_bursts.get(key)
        if current and _same_burst(current[-1], event, window_s):
            current.append(event)
            continue
        if current:
            closed.append(current)
        open_bursts[key] = [event]
    closed.extend(open_bursts.values())
    return tuple(sorted((_burst(group) for group in closed), key=lambda b: b.first_line))


def bus_to_index(
    events: Iterable[XidEvent], gpus: Iterable[tuple[int, str]]
) -> dict[str, int | None]:
    """Map each event's bus id to the GPU index nvidia-smi gives it, None if no GPU matches.

    `gpus` are (index, bus id) pairs as nvidia_smi facts hold them. A GPU that fell off the bus
    is often missing from nvidia-smi, so a None here is a finding, not noise.
    """
    by_bus: dict[str, int] = {}
    for index, bus in gpus:
        normalised = normalize_bus_id(bus)
        if normalised is not None:
            by_bus[normalised] = index
    return {e.bus_id: by_bus.get(e.bus_id) for e in events if e.bus_id is not None}


def _command(params: Mapping[str, Any]) -> str:
    since = str(params.get("since", "boot")).strip()
    fallback = f"echo '{UNREADABLE_MARKER} (dmesg and journalctl failed)'"
    if since == "boot":
        return (
            "dmesg -T 2>/dev/null || journalctl -k -b -o short-iso --no-pager 2>&1 || " + fallback
        )
    seconds = _duration_seconds(since)
    # journalctl can filter by time; dmesg --since only exists in recent util-linux.
    return (
        f"journalctl -k -o short-iso --no-pager --since '-{seconds}s' 2>&1 || "
        f"dmesg -T --since '-{seconds}s' 2>/dev/null || {fallback}"
    )


def _duration_seconds(since: str) -> int:
    match = _DURATION.match(since.lower())
    if not match:
        raise FleetfixError(
            f"xid: 'since' must be 'boot' or a duration like 30m, 6h, 2d: {since!r}"
        )
    return int(match["n"]) * _DURATION_UNITS[match["unit"] or "s"]


# --- reading lines ---------------------------------------------------------------------------


def _records(text: str) -> tuple[_Record, ...]:
    records = []
    for line in clean_lines(text):
        if line.text.strip() and not is_elision(line.text):
            records.append(_record(line))
    return tuple(records)


def _record(line: Line) -> _Record:
    for fmt, pattern in _PREFIXES:
        match = pattern.match(line.text)
        if match:
            stamp = match.groupdict().get("ts")
            seconds, clock = _seconds(fmt, stamp)
            message = _EMBEDDED_MONOTONIC.sub("", line.text[match.end() :], count=1)
            return _Record(line, fmt, stamp, seconds, clock, message)
    return _Record(line, None, None, None, None, line.text)


def _seconds(fmt: LogFormat, stamp: str | None) -> tuple[float | None, Clock | None]:
    if stamp is None or fmt is LogFormat.JOURNAL:  # syslog stamps carry no year
        return None, None
    if fmt is LogFormat.KMSG:
        return int(stamp) / 1_000_000, Clock.MONOTONIC
    if fmt is LogFormat.DMESG_MONOTONIC:
        return float(stamp), Clock.MONOTONIC
    if fmt is LogFormat.DMESG_CTIME:
        return _ctime_seconds(stamp), Clock.WALL
    return _iso_seconds(stamp), Clock.WALL


def _ctime_seconds(stamp: str) -> float | None:
    # Parsed by hand: strptime's %a/%b follow the controller's locale, dmesg -T prints English.
    _, month, day, clock, year = stamp.split()
    if month not in _MONTHS:
        return None
    hour, minute, second = (int(part) for part in clock.split(":"))
    moment = datetime(
        int(year), _MONTHS.index(month) + 1, int(day), hour, minute, second, tzinfo=UTC
    )
    return moment.timestamp()


def _iso_seconds(stamp: str) -> float | None:
    try:
        moment = datetime.fromisoformat(stamp.replace(",", "."))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _check_kernel_log(text: str, records: tuple[_Record, ...]) -> None:
    if not records:
        return
    if _looks_binary(text):
        raise ProbeParseError(NAME, "binary data, not kernel log text", text)
    for record in records:
        if record.message.startswith(_UNREADABLE) or record.line.text.startswith(_UNREADABLE):
            raise ProbeParseError(NAME, "kernel log not readable", text, line=record.line.number)
    first = records[0].line.text.lstrip()
    if first.startswith("<") and not re.match(r"<\d+>", first):
        raise ProbeParseError(
            NAME, "HTML/XML, not kernel log text", text, line=records[0].line.number
        )
    _check_record_mix(text, records)


def _check_record_mix(text: str, records: tuple[_Record, ...]) -> None:
    stamped = sum(1 for r in records if r.fmt is not None)
    other = [r for r in records if r.fmt is None and not _is_known_bare(r.line.text)]
    if stamped == 0 and len(other) == len(records):
        raise ProbeParseError(
            NAME,
            "no kernel log records (no timestamps, no NVRM lines)",
            text,
            line=records[0].line.number,
        )
    if stamped and len(other) > stamped:
        raise ProbeParseError(
            NAME, "most lines are not kernel log records", text, line=other[0].line.number
        )


def _is_known_bare(text: str) -> bool:
    return "NVRM:" in text or bool(_JOURNAL_META.match(text) or _KMSG_DICT.match(text))


def _looks_binary(text: str) -> bool:
    if "\x00" in text:
        return True
    odd = sum(1 for ch in text if not ch.isprintable() and ch not in "\n\r\t")
    return odd > max(8, len(text) // 50)


# --- Xid lines -------------------------------------------------------------------------------


def _events(records: tuple[_Record, ...], text: str) -> tuple[XidEvent, ...]:
    uuids: dict[str, str] = {}
    events: list[XidEvent] = []
    last = records[-1].line.number if records else 0
    for record in records:
        uuid_line = _UUID_LINE.search(record.message)
        if uuid_line:
            bus = normalize_bus_id(uuid_line["pci"])
            if bus is not None:
                uuids[bus] = uuid_line["uuid"]
        if _XID_MARK not in record.message:
            continue
        match = _XID.search(record.message)
        if match is None:
            if record.line.number == last and not text.endswith(("\n", "\r")):
                continue  # the capture was cut inside this line; `complete` says so
            raise ProbeParseError(NAME, "malformed Xid line", text, line=record.line.number)
        events.append(_event(record, match, uuids, text))
    return tuple(events)


def _event(record: _Record, match: re.Match[str], uuids: Mapping[str, str], text: str) -> XidEvent:
    code = int(match["code"])
    bus_id = normalize_bus_id(match["pci"])
    pid, process, message = _pid_and_name(match["rest"].strip())
    channel = _CHANNEL.search(message)
    caused = _CAUSED_BY.search(message)
    return XidEvent(
        code=code,
        bus_id=bus_id,
        pci=match["pci"],
        pid=pid,
        process=process,
        message=message,
        channel=int(channel["ch"], 16) if channel else None,
        caused_by=int(caused["code"]) if caused else None,
        recovery_action=_recovery(code, message, record, text),
        nvlink=_nvlink(message) if 144 <= code <= 150 else None,
        uuid=uuids.get(bus_id) if bus_id else None,
        timestamp=record.timestamp,
        seconds=record.seconds,
        clock=record.clock,
        line=record.line.number,
        mnemonic=None,
        immediate_action=None,
        severity=None,
        recommended_action="",
    )


def _pid_and_name(rest: str) -> tuple[int | None, str | None, str]:
    pid: int | None = None
    process: str | None = None
    pid_match = _PID.match(rest)
    if pid_match:
        pid = int(pid_match["pid"]) if pid_match["pid"].isdigit() else None
        rest = rest[pid_match.end() :]
        name_match = _NAME.match(rest)
        if name_match:
            name = name_match["name"].strip()
            process = None if name in ("", "<unknown>") else name
            rest = rest[name_match.end() :]
    return pid, process, rest.strip()


def _recovery(code: int, message: str, record: _Record, text: str) -> str | None:
    if code != 154:
        return None
    match = _RECOVERY.search(message)
    if match is None:
        return None
    try:
        action = parse_recovery_action(match["new"])
    except FleetfixError as exc:
        raise ProbeParseError(NAME, str(exc), text, line=record.line.number) from exc
    return action.value if action is not None else None


def _nvlink(message: str) -> NvlinkDetail | None:
    match = _NVLINK.match(message)
    if match is None:
        return None
    registers = _registers(match["regs"] or "")
    injected = match["inj"]
    return NvlinkDetail(
        unit=match["unit"],
        fatal=match["sev"].lower() == "fatal",
        cross_contain=match["xc"],
        injected=None if injected is None else injected == "1",
        link=int(match["link"]) if match["link"] is not None else None,
        registers=registers,
        intr_info=registers[0] if registers else None,
        error_status=registers[1] if len(registers) > 1 else None,
    )


def _registers(text: str) -> tuple[int, ...]:
    words = text.split()
    if not words or not all(re.fullmatch(r"0x[0-9a-fA-F]+", w) for w in words):
        return ()  # elided by the poster ("...") or not registers at all
    return tuple(int(w, 16) for w in words)


# --- joining and summarising -----------------------------------------------------------------


def _with_recommendations(
    events: tuple[XidEvent, ...], catalog: XidCatalog
) -> tuple[XidEvent, ...]:
    codes_by_gpu: dict[str, set[int]] = {}
    recovery_by_gpu: dict[str, str] = {}
    for event in events:
        gpu = event.bus_id or event.pci
        codes = codes_by_gpu.setdefault(gpu, set())
        codes.add(event.code)
        if event.caused_by is not None:  # "caused by previous Xid N": N counts as seen
            codes.add(event.caused_by)
        if event.recovery_action is not None:
            recovery_by_gpu[gpu] = event.recovery_action
    joined = []
    for event in events:
        gpu = event.bus_id or event.pci
        info = catalog.get(event.code)
        advice = catalog.recommended_action(
            event.code, recovery_by_gpu.get(gpu), with_codes=codes_by_gpu[gpu]
        )
        joined.append(
            replace(
                event,
                mnemonic=info.mnemonic if info else None,
                immediate_action=info.immediate_action if info else None,
                severity=info.severity.value if info else None,
                recommended_action=advice.action,
            )
        )
    return tuple(joined)


def _facts(
    events: tuple[XidEvent, ...], records: tuple[_Record, ...], *, complete: bool
) -> XidFacts:
    counts = Counter(e.code for e in events)
    recovery = {e.bus_id: e.recovery_action for e in events if e.bus_id and e.recovery_action}
    actions = {e.recommended_action for e in events}
    return XidFacts(
        events=events,
        count=len(events),
        codes=tuple(sorted(counts)),
        counts=MappingProxyType(dict(sorted(counts.items()))),
        bursts=group_bursts(events),
        gpus=tuple(sorted({e.bus_id for e in events if e.bus_id})),
        recovery_actions=MappingProxyType(recovery),
        actions=tuple(sorted(actions)),
        reboot_required="RESTART_BM" in actions,
        reset_required_gpus=tuple(
            sorted({e.bus_id for e in events if e.bus_id and e.recommended_action in _RESETS})
        ),
        critical_codes=tuple(sorted({e.code for e in events if e.severity == "critical"})),
        source_format=_source_format(records),
        complete=complete,
    )


def _source_format(records: tuple[_Record, ...]) -> LogFormat:
    if not records:
        return LogFormat.EMPTY
    formats = Counter(r.fmt for r in records if r.fmt is not None)
    return formats.most_common(1)[0][0] if formats else LogFormat.BARE


def _same_burst(previous: XidEvent, event: XidEvent, window_s: float) -> bool:
    if previous.seconds is not None and event.seconds is not None:
        return previous.clock == event.clock and 0 <= event.seconds - previous.seconds <= window_s
    return previous.timestamp is not None and previous.timestamp == event.timestamp


def _burst(group: list[XidEvent]) -> XidBurst:
    first, last = group[0], group[-1]
    span = (
        last.seconds - first.seconds
        if first.seconds is not None and last.seconds is not None
        else None
    )
    return XidBurst(
        code=first.code,
        bus_id=first.bus_id,
        pci=first.pci,
        count=len(group),
        first_line=first.line,
        last_line=last.line,
        first_timestamp=first.timestamp,
        last_timestamp=last.timestamp,
        span_s=span,
    )


PROBE: Probe[XidFacts] = Probe(
    name=NAME,
    summary="NVRM Xid events from the kernel log (dmesg -T, fallback journalctl -k)",
    command=_command,
    parse=parse,
    params={
        "since": "'boot' (default) or a duration like 30m, 6h, 2d: how far back to read",
    },
)
