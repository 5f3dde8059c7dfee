"""Emulated `dmesg` and `journalctl -k`: the node's kernel log in their real output formats.

dmesg shows the current boot's ring buffer (`[  365.969676] msg`, `-T` ctime, ISO, `-x`
decode); journalctl keeps every boot (`-b -1`) in short, short-iso, short-precise,
short-monotonic and cat modes, like systemd 249 on Ubuntu 22.04. In a container
(lab/environments.py) dmesg may not read the ring buffer: `dmesg: read kernel buffer failed:
Operation not permitted`, exit 1, as util-linux's dmesg says when syslog(2) is refused.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from types import MappingProxyType

from fleetfix.lab.state import Boot, LogLine
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines

LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")
_RELATIVE = re.compile(
    r"^-?(\d+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?)(\s+ago)?$"
)
_UNIT_SECONDS = MappingProxyType({"s": 1, "m": 60, "h": 3600, "d": 86400})


def _stamp(seconds: float, pattern: str) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime(pattern)


def _ctime(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.strftime("%a %b ") + f"{moment.day:2d}" + moment.strftime(" %H:%M:%S %Y")


def _iso_dmesg(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S,") + f"{moment.microsecond:06d}+00:00"


def dmesg(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    boot = ctx.node.boot
    options = _DmesgOptions()
    for arg in argv:
        if not options.take(arg):
            return fail(
                f"dmesg: unrecognized option '{arg}'\nTry 'dmesg --help' for more information."
            )
    if ctx.node.env.dmesg_denied:  # a container: no CAP_SYSLOG, kernel.dmesg_restrict
        return fail("dmesg: read kernel buffer failed: Operation not permitted")
    shown = [line for line in boot.lines[boot.dmesg_from :] if options.wanted(line)]
    text = "".join(options.format(boot, line) + "\n" for line in shown)
    if options.clear:
        boot.dmesg_from = len(boot.lines)
    if options.clear and not options.show_when_clearing:
        text = ""
    return ToolReply(stdout=text, hang=options.follow)


class _DmesgOptions:
    """The dmesg flags that change what is shown and how."""

    def __init__(self) -> None:
        self.time = "mono"
        self.decode = False
        self.levels: set[int] | None = None
        self.clear = False
        self.show_when_clearing = False
        self.follow = False
        self._expect_level = False

    def take(self, arg: str) -> bool:
        if self._expect_level:
            self._expect_level = False
            return self._set_levels(arg)
        simple = {
            "-T": ("time", "ctime"),
            "--ctime": ("time", "ctime"),
            "-t": ("time", "none"),
            "--notime": ("time", "none"),
            "--time-format=iso": ("time", "iso"),
            "--time-format=ctime": ("time", "ctime"),
            "--time-format=raw": ("time", "mono"),
        }
        if arg in simple:
            setattr(self, *simple[arg])
            return True
        return self._take_other(arg)

    def _take_other(self, arg: str) -> bool:
        if arg in ("-x", "--decode"):
            self.decode = True
        elif arg in ("-c", "--read-clear"):
            self.clear = self.show_when_clearing = True
        elif arg in ("-C", "--clear"):
            self.clear = True
        elif arg in ("-w", "--follow", "-W", "--follow-new"):
            self.follow = True
        elif arg in ("-l", "--level"):
            self._expect_level = True
        elif arg.startswith("--level="):
            return self._set_levels(arg.split("=", 1)[1])
        elif arg not in (
            "-k",
            "--kernel",
            "-L",
            "--color",
            "--color=never",
            "-P",
            "--nopager",
            "-H",
            "--human",
        ):
            return False
        return True

    def _set_levels(self, spec: str) -> bool:
        names = [name.strip() for name in spec.split(",")]
        if any(name not in LEVELS for name in names):
            return False
        self.levels = {LEVELS.index(name) for name in names}
        return True

    def wanted(self, line: LogLine) -> bool:
        return self.levels is None or line.level in self.levels

    def format(self, boot: Boot, line: LogLine) -> str:
        prefix = f"kern  :{LEVELS[line.level] + ' ':<6}: " if self.decode else ""
        wall = boot.started + line.uptime
        if self.time == "ctime":
            return indented(f"{prefix}[{_ctime(wall)}] ", line.text)
        if self.time == "iso":
            return indented(f"{prefix}{_iso_dmesg(wall)} ", line.text)
        if self.time == "none":
            return indented(prefix, line.text)
        return indented(f"{prefix}[{line.uptime:12.6f}] ", line.text)


def indented(head: str, text: str) -> str:
    """A record after its prefix; lines of a multi-line record align under its first."""
    first, *rest = text.split("\n")
    return head + first + "".join("\n" + " " * len(head) + more for more in rest)


def journalctl(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    options = _JournalOptions(ctx.now)
    error = options.parse(list(argv))
    if error:
        return fail(error)
    if options.list_boots:
        return ToolReply(stdout=_list_boots(ctx.node.boots))
    if options.unit is not None:
        return ToolReply(stdout="-- No entries --\n")
    boots = _boots(ctx.node.boots, options.boot_offset, options.kernel)
    if boots is None:
        return fail("Data from the specified boot is not available: No such boot ID in journal")
    rows = _journal_rows(ctx, boots, options)
    if not rows:
        return ToolReply(stdout="-- No entries --\n")
    header = [] if options.quiet else [_journal_header(ctx)]
    return ToolReply(stdout=lines(*header, *rows))


def _boots(boots: list[Boot], offset: int | None, kernel: bool) -> list[Boot] | None:
    if offset is None:
        return [boots[-1]] if kernel else boots
    index = len(boots) - 1 + offset if offset <= 0 else offset - 1
    return [boots[index]] if 0 <= index < len(boots) else None


def _journal_rows(ctx: ToolContext, boots: list[Boot], options: _JournalOptions) -> list[str]:
    rows: list[str] = []
    for number, boot in enumerate(boots):
        if number:
            rows.append(f"-- Boot {boot.boot_id.replace('-', '')} --")
        for line in boot.lines:
            wall = boot.started + line.uptime
            if options.since <= wall <= options.until and options.matches(line):
                rows.append(options.format(ctx.node.name, line, wall))
    if options.reverse:
        rows.reverse()
    return rows[-options.count :] if options.count else rows


def _journal_header(ctx: ToolContext) -> str:
    first = ctx.node.boots[0].started
    return (
        f"-- Journal begins at {_stamp(first, '%a %Y-%m-%d %H:%M:%S UTC')}, "
        f"ends at {_stamp(ctx.now, '%a %Y-%m-%d %H:%M:%S UTC')}. --"
    )


def _list_boots(boots: list[Boot]) -> str:
    rows = []
    for index, boot in enumerate(boots):
        offset = index - len(boots) + 1
        start = _stamp(boot.started, "%a %Y-%m-%d %H:%M:%S UTC")
        last = boot.started + (boot.lines[-1].uptime if boot.lines else 0.0)
        end = _stamp(last, "%a %Y-%m-%d %H:%M:%S UTC")
        rows.append(f"{offset:>3} {boot.boot_id.replace('-', '')} {start}—{end}")
    return lines(*rows)


class _JournalOptions:
    """journalctl's selection and output options."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.kernel = False
        self.boot_offset: int | None = None
        self.output = "short"
        self.quiet = False
        self.reverse = False
        self.count = 0
        self.since = 0.0
        self.until = float("inf")
        self.unit: str | None = None
        self.grep: re.Pattern[str] | None = None
        self.list_boots = False

    def parse(self, items: list[str]) -> str | None:
        while items:
            error = self._take(items.pop(0), items)
            if error:
                return error
        if self.output not in _OUTPUT_MODES:
            return f"Unknown output format '{self.output}'."
        return None

    def _take(self, arg: str, rest: list[str]) -> str | None:
        name, eq, inline = arg.partition("=")
        if arg in ("-k", "--dmesg"):
            self.kernel = True
        elif arg in (
            "-q",
            "--quiet",
            "--no-pager",
            "--utc",
            "--no-hostname",
            "-a",
            "--all",
            "-x",
            "--catalog",
        ):
            self.quiet = self.quiet or arg in ("-q", "--quiet")
        elif arg in ("-r", "--reverse"):
            self.reverse = True
        elif arg == "--list-boots":
            self.list_boots = True
        elif arg == "_TRANSPORT=kernel":
            pass  # a journal match: every boot's kernel messages, the only ones the lab keeps
        elif name in ("-b", "--boot"):
            return self._take_boot(inline if eq else None, rest)
        elif name in _VALUED:
            value = inline if eq else (rest.pop(0) if rest else None)
            return self._set(_VALUED[name], value, arg)
        else:
            return f"journalctl: unrecognized option '{arg}'"
        return None

    def _take_boot(self, inline: str | None, rest: list[str]) -> str | None:
        value = inline
        if value is None and rest and re.fullmatch(r"[+-]?\d+", rest[0]):
            value = rest.pop(0)
        self.boot_offset = int(value) if value is not None else 0
        return None

    def _set(self, key: str, value: str | None, arg: str) -> str | None:
        if value is None:
            return f"journalctl: option '{arg}' requires an argument"
        if key in ("since", "until"):
            moment = parse_time(value, self.now)
            if moment is None:
                return f"Failed to parse timestamp: {value}"
            setattr(self, key, moment)
        elif key == "count":
            if not value.isdigit():
                return f"Failed to parse lines '{value}'"
            self.count = int(value)
        elif key == "grep":
            self.grep = re.compile(value)
        else:
            setattr(self, key, value)
        return None

    def matches(self, line: LogLine) -> bool:
        return self.unit is None and (self.grep is None or bool(self.grep.search(line.text)))

    def format(self, host: str, line: LogLine, wall: float) -> str:
        pattern, precise = _OUTPUT_MODES[self.output]
        if self.output == "cat":
            return line.text
        if self.output == "short-monotonic":
            return indented(f"[{line.uptime:12.6f}] {host} kernel: ", line.text)
        stamp = _stamp(wall, pattern)
        if precise:
            stamp = stamp.replace("µ", f"{int(wall * 1e6) % 1000000:06d}")
        return indented(f"{stamp} {host} kernel: ", line.text)


_VALUED = MappingProxyType(
    {
        "-o": "output",
        "--output": "output",
        "-n": "count",
        "--lines": "count",
        "-S": "since",
        "--since": "since",
        "-U": "until",
        "--until": "until",
        "-u": "unit",
        "--unit": "unit",
        "-g": "grep",
        "--grep": "grep",
    }
)
_OUTPUT_MODES = MappingProxyType(
    {
        "short": ("%b %d %H:%M:%S", False),
        "short-full": ("%a %Y-%m-%d %H:%M:%S UTC", False),
        "short-iso": ("%Y-%m-%dT%H:%M:%S+0000", False),
        "short-iso-precise": ("%Y-%m-%dT%H:%M:%S.µ+0000", True),
        "short-precise": ("%b %d %H:%M:%S.µ", True),
        "short-monotonic": ("", False),
        "cat": ("", False),
    }
)


def parse_time(value: str, now: float) -> float | None:
    """journalctl's --since/--until: dates, today/yesterday, `-1h`, `10 min ago`, `@epoch`."""
    text = value.strip()
    day = now - now % 86400
    words = {"now": now, "today": day, "yesterday": day - 86400, "tomorrow": day + 86400}
    if text in words:
        return words[text]
    if text.startswith("@") and text[1:].replace(".", "", 1).isdigit():
        return float(text[1:])
    match = _RELATIVE.match(text)
    if match and (text.startswith("-") or match.group(3)):
        return now - int(match.group(1)) * _UNIT_SECONDS[match.group(2)[0]]
    for pattern in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None
