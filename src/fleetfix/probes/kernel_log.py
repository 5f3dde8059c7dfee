"""Kernel log text as records: each line's time prefix split from its message (for the xid probe).

Reads `dmesg -T` and `journalctl -k -o short-iso`, and the shapes operators paste: raw /dev/kmsg
records, monotonic `[ 1234.5678]` and ctime `[Mon Jan ...]` stamps, `dmesg --decode
--time-format=iso`, syslog/journal `host kernel:` prefixes, lines with no timestamp at all, and
NVIDIA Fabric Manager's log (`[Feb 27 2025 15:10:02] [ERROR] [tid 12727] ...`), which carries the
NVSwitch errors. `check_kernel_log` rejects text that is no such log (HTML, binary, a tool error).
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from fleetfix.errors import ProbeParseError
from fleetfix.probes.text import Line, clean_lines, is_elision

UNREADABLE_MARKER = "fleetfix-xid: no readable kernel log"
_PROBE = "xid"  # the probe that reads kernel logs; named in its errors


class Clock(enum.StrEnum):
    """What `seconds` counts: since boot, or POSIX time (naive stamps read as UTC)."""

    MONOTONIC = "monotonic"
    WALL = "wall"


class LogFormat(enum.StrEnum):
    """The line shape a kernel log was written in."""

    DMESG_CTIME = "dmesg-ctime"
    DMESG_MONOTONIC = "dmesg-monotonic"
    DMESG_RELATIVE = "dmesg-relative"
    """`dmesg -H`/`--reltime`: `[Jan21 10:22]` on a minute's first line, `[  +0.000844]` after."""
    DMESG_ISO = "dmesg-iso"
    KMSG = "kmsg"
    JOURNAL = "journal"
    JOURNAL_ISO = "journal-iso"
    KERNEL = "kernel-prefix"
    FABRIC_MANAGER = "fabric-manager"
    BARE = "bare"
    EMPTY = "empty"


@dataclass(frozen=True, slots=True)
class Record:
    """A log line split into its time prefix and its message."""

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
    (
        LogFormat.DMESG_RELATIVE,
        re.compile(
            rf"^{_DECODE}{_LEVEL}\[(?P<ts>[A-Z][a-z]{{2}}\s?\d{{1,2}} \d\d:\d\d|\s*\+\d+\.\d+)\] ?"
        ),
    ),
    (LogFormat.JOURNAL_ISO, re.compile(rf"^(?P<ts>{_ISO}) \S+ kernel: ")),
    (LogFormat.DMESG_ISO, re.compile(rf"^{_DECODE}(?P<ts>{_ISO})(?: |$)")),
    (
        LogFormat.JOURNAL,
        # The month as the host's locale spells it: `Jan`, `jan.`, `févr.` (syslog's %b).
        re.compile(r"^(?P<ts>[^\W\d_]{3,5}\.? [ \d]\d \d\d:\d\d:\d\d) \S+ kernel: "),
    ),
    (LogFormat.KERNEL, re.compile(r"^kernel: ")),
    (
        LogFormat.FABRIC_MANAGER,
        re.compile(
            r"^\[(?P<ts>[A-Z][a-z]{2} [ \d]\d \d{4} \d\d:\d\d:\d\d)\] \[[A-Z]+\] \[tid \d+\] "
        ),
    ),
)
_EMBEDDED_MONOTONIC = re.compile(r"^\[\s*\d+\.\d+\] ?")  # syslog keeping printk time
_JOURNAL_META = re.compile(r"^-- .* --$")  # "-- No entries --", "-- Boot 1a2b... --"
_KMSG_DICT = re.compile(r"^ [A-Z_]+=")  # /dev/kmsg continuation (SUBSYSTEM=pci)
_KNOWN_BARE = (
    "NVRM:",
    "SXid (",
    "nvidia-nvswitch",
    "Message payload details:",
    "PCIe Bus Error",
    ": AER: ",
)
_UNREADABLE = (
    UNREADABLE_MARKER,
    "No journal files were opened",
    "Hint: You are currently not seeing messages",
    "dmesg: read kernel buffer failed",
)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def records(text: str) -> tuple[Record, ...]:
    """Every non-blank line of `text` (paste artefacts removed) as a Record."""
    found = []
    times: dict[tuple[LogFormat, str | None], tuple[float | None, Clock | None]] = {}
    for line in clean_lines(text):
        if line.text.strip() and not is_elision(line.text):
            found.append(_record(line, times))
    return tuple(found)


def check_kernel_log(text: str, found: tuple[Record, ...]) -> None:
    """Raise ProbeParseError unless `text` reads as a kernel (or Fabric Manager) log."""
    if not found:
        return
    if _looks_binary(text):
        raise ProbeParseError(_PROBE, "binary data, not kernel log text", text)
    for record in found:
        if record.message.startswith(_UNREADABLE) or record.line.text.startswith(_UNREADABLE):
            raise ProbeParseError(_PROBE, "kernel log not readable", text, line=record.line.number)
    first = found[0].line.text.lstrip()
    if first.startswith("<") and not re.match(r"<\d+>", first):
        raise ProbeParseError(
            _PROBE, "HTML/XML, not kernel log text", text, line=found[0].line.number
        )
    _check_record_mix(text, found)


def only_notes(found: tuple[Record, ...]) -> bool:
    """Whether the records are only journalctl's own notes (`-- No entries --`), no message."""
    return bool(found) and all(_JOURNAL_META.match(r.line.text.strip()) for r in found)


def source_format(found: tuple[Record, ...]) -> LogFormat:
    """The line shape most records were written in."""
    if not found:
        return LogFormat.EMPTY
    formats = Counter(r.fmt for r in found if r.fmt is not None)
    return formats.most_common(1)[0][0] if formats else LogFormat.BARE


def _record(
    line: Line, times: dict[tuple[LogFormat, str | None], tuple[float | None, Clock | None]]
) -> Record:
    """The record of `line`; `times` keeps each stamp's seconds (many lines share one)."""
    for fmt, pattern in _PREFIXES:
        match = pattern.match(line.text)
        if match:
            stamp = match.groupdict().get("ts")
            if (fmt, stamp) not in times:
                times[fmt, stamp] = _seconds(fmt, stamp)
            seconds, clock = times[fmt, stamp]
            message = line.text[match.end() :]
            if message.startswith("["):
                message = _EMBEDDED_MONOTONIC.sub("", message, count=1)
            return Record(line, fmt, stamp, seconds, clock, message)
    return Record(line, None, None, None, None, line.text)


def _seconds(fmt: LogFormat, stamp: str | None) -> tuple[float | None, Clock | None]:
    if stamp is None or fmt in (LogFormat.JOURNAL, LogFormat.DMESG_RELATIVE):
        # syslog stamps carry no year; dmesg -H's are deltas and minutes without a year
        return None, None
    if fmt is LogFormat.KMSG:
        return int(stamp) / 1_000_000, Clock.MONOTONIC
    if fmt is LogFormat.DMESG_MONOTONIC:
        return float(stamp), Clock.MONOTONIC
    if fmt is LogFormat.DMESG_CTIME:
        _, month, day, clock, year = stamp.split()
        return _wall_seconds(year, month, day, clock), Clock.WALL
    if fmt is LogFormat.FABRIC_MANAGER:
        month, day, year, clock = stamp.split()
        return _wall_seconds(year, month, day, clock), Clock.WALL
    return _iso_seconds(stamp), Clock.WALL


def _wall_seconds(year: str, month: str, day: str, clock: str) -> float | None:
    # Parsed by hand: strptime's %b follows the controller's locale, the tools print English.
    if month not in _MONTHS:
        return None
    hour, minute, second = (int(part) for part in clock.split(":"))
    try:
        moment = datetime(
            int(year), _MONTHS.index(month) + 1, int(day), hour, minute, second, tzinfo=UTC
        )
    except ValueError:  # a corrupt stamp (Feb 31, 25:00) costs the time, not the line
        return None
    return moment.timestamp()


def _iso_seconds(stamp: str) -> float | None:
    try:
        moment = datetime.fromisoformat(stamp.replace(",", "."))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _check_record_mix(text: str, found: tuple[Record, ...]) -> None:
    stamped = sum(1 for r in found if r.fmt is not None)
    other = [r for r in found if r.fmt is None and not _is_known_bare(r.line.text)]
    if stamped == 0 and len(other) == len(found):
        raise ProbeParseError(
            _PROBE,
            "no kernel log records (no timestamps, no NVRM lines)",
            text,
            line=found[0].line.number,
        )
    if stamped and len(other) > stamped:
        raise ProbeParseError(
            _PROBE, "most lines are not kernel log records", text, line=other[0].line.number
        )


def _is_known_bare(text: str) -> bool:
    return any(mark in text for mark in _KNOWN_BARE) or bool(
        _JOURNAL_META.match(text) or _KMSG_DICT.match(text)
    )


_LINE_CONTROLS = str.maketrans("", "", "\n\r\t")


def _looks_binary(text: str) -> bool:
    if "\x00" in text:
        return True
    if text.translate(_LINE_CONTROLS).isprintable():  # the usual case, at C speed
        return False
    odd = sum(1 for ch in text if not ch.isprintable() and ch not in "\n\r\t")
    return odd > max(8, len(text) // 50)
