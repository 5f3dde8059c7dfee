"""The `ib_counters` probe: InfiniBand port error and traffic counters, per HCA port.

Two forms are read, detected from their lines:

* sysfs, what the probe's command prints first: each `/sys/class/infiniband/CA/ports/N/counters/*`
  file as a `CA/ports/N/counters/NAME:VALUE` line (`grep -H .` run inside
  /sys/class/infiniband; an absolute path before `CA/` is accepted too). `N/A (no PMA)`, which
  a device without a performance management agent prints (iWARP, some RoCE), reads as not
  available, not as zero.
* `perfquery` (infiniband-diags), the command's fallback where sysfs has no counters: blocks
  headed `# Port counters: Lid L port N` or `# Port extended counters: ...` with dotted
  `Name:....value` lines. The command runs `perfquery -x` and plain `perfquery` per port, each
  pair after a `### fleetfix ib_counters ca=CA port=N` marker (perfquery's own header names the
  LID, not the CA); without a marker (a pasted capture) the CA is None. For a port read both
  ways, the extended block's 64-bit data counters win over the plain one's 32-bit ones.

Counters are keyed by their sysfs names (`symbol_error`, `link_downed`, `port_rcv_errors`, ...),
perfquery's spellings mapped onto them; a name neither knows is kept in `other`. Most error
counters are narrow and stop at their maximum instead of wrapping (IBTA PortCounters:
SymbolErrorCounter 16 bits, LinkDownedCounter 8, LocalLinkIntegrityErrors 4 ...): a value at
its width's maximum is listed in `saturated`, since it no longer counts. Data counters count
octets divided by 4, as the tools print them.

Bad input: a line that is neither form raises ProbeParseError with its line; an output whose
last line has no newline was cut there, so that line is dropped and the facts are not
`complete`, as is a perfquery header with no counter after it. A node without sysfs counters
and without perfquery is ToolNotInstalled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import Probe
from fleetfix.probes.not_installed import MARKER, missing_tool
from fleetfix.probes.text import clean_lines

NAME = "ib_counters"
TOOL = "perfquery"
PORT_MARKER = "### fleetfix ib_counters "


class Source(StrEnum):
    """Where the counters were read."""

    SYSFS = "sysfs"
    PERFQUERY = "perfquery"


@dataclass(frozen=True, slots=True)
class CounterSpec:
    """A counter fleetfix knows: its sysfs and perfquery names and its width in PortCounters."""

    name: str
    perfquery: str
    bits: int
    """Width in the plain PortCounters attribute (sysfs reads it there for error counters)."""
    error: bool
    """An error counter (the others count traffic or waiting)."""


COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("symbol_error", "SymbolErrorCounter", 16, True),
    CounterSpec("link_error_recovery", "LinkErrorRecoveryCounter", 8, True),
    CounterSpec("link_downed", "LinkDownedCounter", 8, True),
    CounterSpec("port_rcv_errors", "PortRcvErrors", 16, True),
    CounterSpec("port_rcv_remote_physical_errors", "PortRcvRemotePhysicalErrors", 16, True),
    CounterSpec("port_rcv_switch_relay_errors", "PortRcvSwitchRelayErrors", 16, True),
    CounterSpec("port_xmit_discards", "PortXmitDiscards", 16, True),
    CounterSpec("port_xmit_constraint_errors", "PortXmitConstraintErrors", 8, True),
    CounterSpec("port_rcv_constraint_errors", "PortRcvConstraintErrors", 8, True),
    CounterSpec("local_link_integrity_errors", "LocalLinkIntegrityErrors", 4, True),
    CounterSpec("excessive_buffer_overrun_errors", "ExcessiveBufferOverrunErrors", 4, True),
    CounterSpec("vl15_dropped", "VL15Dropped", 16, True),
    CounterSpec("port_xmit_wait", "PortXmitWait", 32, False),
    CounterSpec("port_xmit_data", "PortXmitData", 32, False),
    CounterSpec("port_rcv_data", "PortRcvData", 32, False),
    CounterSpec("port_xmit_packets", "PortXmitPkts", 32, False),
    CounterSpec("port_rcv_packets", "PortRcvPkts", 32, False),
    CounterSpec("unicast_xmit_packets", "PortUnicastXmitPkts", 64, False),
    CounterSpec("unicast_rcv_packets", "PortUnicastRcvPkts", 64, False),
    CounterSpec("multicast_xmit_packets", "PortMulticastXmitPkts", 64, False),
    CounterSpec("multicast_rcv_packets", "PortMulticastRcvPkts", 64, False),
)
"""Every counter fleetfix names, errors first (the order facts keep)."""

SPECS: Mapping[str, CounterSpec] = MappingProxyType({spec.name: spec for spec in COUNTERS})
_BY_PERFQUERY = {spec.perfquery: spec.name for spec in COUNTERS}
_BY_SYSFS = {spec.name: spec.name for spec in COUNTERS} | {"VL15_dropped": "vl15_dropped"}
_TRAFFIC = frozenset(("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"))
_SELECTORS = frozenset(("PortSelect", "CounterSelect", "CounterSelect2"))
_MAX64 = (1 << 64) - 1


def canonical_name(counter: str) -> str | None:
    """The sysfs name fleetfix keys a counter by, from either spelling; None when unknown."""
    return _BY_SYSFS.get(counter) or _BY_PERFQUERY.get(counter)


@dataclass(frozen=True, slots=True)
class PortCounters:
    """One HCA port's counters as read."""

    ca: str | None
    """The HCA (`mlx5_0`); None for perfquery output without the command's marker."""
    port: int
    lid: int | None
    """The LID perfquery's header names; None from sysfs."""
    counters: Mapping[str, int]
    """Known counters (sysfs names, see COUNTERS) -> value."""
    other: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Counters fleetfix does not know (`QP1Dropped`, `port_rcv_discards`), kept as named."""
    unavailable: tuple[str, ...] = ()
    """Counters the device cannot read (`N/A (no PMA)`)."""
    saturated: tuple[str, ...] = ()
    """Counters stuck at their width's maximum: they stopped counting and need a reset."""
    complete: bool = True

    def get(self, counter: str) -> int | None:
        """A counter's value by either spelling (`symbol_error`, `SymbolErrorCounter`)."""
        name = canonical_name(counter) or counter
        return self.counters.get(name, self.other.get(name))


@dataclass(frozen=True, slots=True)
class IbCountersFacts:
    """Every port read, in the order the output listed them."""

    source: Source
    ports: tuple[PortCounters, ...]
    errors: tuple[str, ...]
    """perfquery's `ibwarn:`/`ibpanic:`/`iberror` lines."""
    complete: bool

    def port(self, ca: str | None, number: int) -> PortCounters | None:
        """The port `number` of `ca`, or None when it was not read."""
        for port in self.ports:
            if port.ca == ca and port.port == number:
                return port
        return None


# --- the command ------------------------------------------------------------------------

_SYSFS_COMMAND = (
    "if cd /sys/class/infiniband 2>/dev/null && set -- */ports/*/counters/* && "
    '[ -e "$1" ]; then grep -H . "$@" 2>/dev/null; exit 0; fi; '
)
_PERFQUERY_COMMAND = (
    "if command -v perfquery >/dev/null 2>&1; then "
    "cas=$(ibstat -l 2>/dev/null); "
    'if [ -z "$cas" ]; then perfquery -x 2>&1; perfquery 2>&1; exit 0; fi; '
    "for ca in $cas; do "
    "n=$(ibstat \"$ca\" 2>/dev/null | sed -n 's/^[[:space:]]*Number of ports: *//p'); "
    'p=1; while [ "$p" -le "${n:-1}" ]; do '
    f'echo "{PORT_MARKER}ca=$ca port=$p"; '
    'perfquery -x -C "$ca" -P "$p" 2>&1; perfquery -C "$ca" -P "$p" 2>&1; '
    "p=$((p + 1)); done; done; "
    f"else echo '{MARKER}{TOOL}'; fi"
)


def command(params: Mapping[str, Any]) -> str:
    """The sysfs counters as `CA/ports/N/counters/NAME:VALUE` lines; where sysfs has none,
    `perfquery -x` and `perfquery` for every port of every CA `ibstat -l` lists; with
    neither, the not-installed marker (exit 0). Relative paths keep the output the same
    wherever /sys/class/infiniband really lives."""
    del params
    return _SYSFS_COMMAND + _PERFQUERY_COMMAND


def parse(text: str) -> IbCountersFacts:
    """Parse the sysfs `path:value` lines or perfquery output (auto-detected).

    Raises:
        ToolNotInstalled: the node has neither sysfs counters nor perfquery.
        ProbeParseError: empty output, or a line that is neither form.
    """
    lines = [(line.number, line.text.strip()) for line in clean_lines(text)]
    lines = [(number, line) for number, line in lines if line]
    cut_line = lines[-1][0] if lines and not text.endswith(("\n", "\r")) else None
    source = _detect(lines, text)
    builder = _Builder(text, source, cut_line)
    for number, line in lines:
        builder.feed(number, line)
    return builder.facts()


PROBE: Probe[IbCountersFacts] = Probe(
    name=NAME,
    summary="InfiniBand port error and traffic counters (sysfs, or perfquery -x)",
    command=command,
    parse=parse,
)


# --- detection ----------------------------------------------------------------------------

_SYSFS_LINE = re.compile(
    r"^(?:.*/)?(?P<ca>[^/\s:]+)/ports/(?P<port>\d+)/counters/(?P<name>[^/\s:]+):(?P<value>.*)$"
)
_SYSFS_PORT = re.compile(r"^(?:.*/)?(?P<ca>[^/\s:]+)/ports/(?P<port>\d+)/")
_HEADER = re.compile(
    r"^# (?P<what>[A-Za-z]+) (?P<kind>extended )?counters: Lid (?P<lid>\d+) port (?P<port>\d+)\b"
)
_OTHER_HEADER = re.compile(r"^#.*\bcounters\b.*:")
_MARKER_LINE = re.compile(r"^### fleetfix ib_counters ca=(?P<ca>\S+) port=(?P<port>\d+)$")
_DOTTED = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_]*):\.*(?P<value>.*)$")
_TOOL_NOISE = re.compile(r"^(?:ibwarn:|ibpanic:|\S*perfquery: iberror|.*\biberror\b)")


def _detect(lines: list[tuple[int, str]], text: str) -> Source:
    for _, line in lines:
        if _SYSFS_LINE.match(line):
            return Source.SYSFS
        if _HEADER.match(line) or _MARKER_LINE.match(line) or _OTHER_HEADER.match(line):
            return Source.PERFQUERY
    missing = missing_tool(text, (TOOL, "ibstat"))
    if missing is not None:
        raise ToolNotInstalled(NAME, TOOL if missing == "ibstat" else missing, text)
    if not lines:
        raise ProbeParseError(NAME, "empty output (no counters listed)", text)
    errors = [line for _, line in lines if _TOOL_NOISE.match(line)]
    if errors:
        raise ProbeParseError(
            NAME, f"perfquery failed before printing counters ({errors[0]})", text
        )
    raise ProbeParseError(NAME, "not sysfs counters nor perfquery output", text, line=lines[0][0])


# --- values -------------------------------------------------------------------------------

_NOT_AVAILABLE = re.compile(r"^N/A\b")


def _value(raw: str, number: int, text: str) -> int | None:
    """A counter's decimal value; None for `N/A (no PMA)`."""
    value = raw.strip()
    if _NOT_AVAILABLE.match(value):
        return None
    if not value.isdigit():
        raise ProbeParseError(NAME, f"not a counter value: {value!r}", text, line=number)
    return int(value)


def _limit(name: str, source: Source, extended: bool) -> int:
    """A counter's maximum: 64 bits in an extended perfquery block and for sysfs's traffic
    counters (the kernel reads those from PortCountersExtended), else its PortCounters width
    (sysfs reads the error counters and PortXmitWait there)."""
    if extended or (source is Source.SYSFS and name in _TRAFFIC):
        return _MAX64
    return (1 << SPECS[name].bits) - 1


# --- the builder --------------------------------------------------------------------------


@dataclass(slots=True)
class _PortDraft:
    ca: str | None
    port: int
    lid: int | None = None
    counters: dict[str, int] = field(default_factory=dict)
    extended: set[str] = field(default_factory=set)
    """Counters read from an extended perfquery block (not overwritten by a plain one)."""
    other: dict[str, int] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    saturated: set[str] = field(default_factory=set)
    empty_header: bool = False
    cut: bool = False


class _Builder:
    """Accumulates ports line by line; `facts()` freezes them."""

    def __init__(self, text: str, source: Source, cut_line: int | None) -> None:
        self.text = text
        self.source = source
        self.cut_line = cut_line
        self.ports: dict[tuple[str | None, int], _PortDraft] = {}
        self.marker: tuple[str, int] | None = None
        self.block: _PortDraft | None = None
        self.block_extended = False
        self.errors: list[str] = []

    def feed(self, number: int, line: str) -> None:
        if number == self.cut_line:
            self._cut(number, line)
            return
        if self.source is Source.SYSFS:
            self._sysfs(number, line)
        else:
            self._perfquery(number, line)

    def _cut(self, number: int, line: str) -> None:
        """The last line lacks its newline: the output stops inside it; drop it."""
        target = self.block
        match = _SYSFS_PORT.match(line)
        if match and self.source is Source.SYSFS:
            target = self._port(match["ca"], int(match["port"]))
        if target is not None:
            target.cut = True
        else:
            self.errors.append(f"output cut at line {number}")

    def _port(self, ca: str | None, port: int) -> _PortDraft:
        draft = self.ports.get((ca, port))
        if draft is None:
            draft = self.ports[(ca, port)] = _PortDraft(ca, port)
        return draft

    def _sysfs(self, number: int, line: str) -> None:
        match = _SYSFS_LINE.match(line)
        if match is None:
            raise ProbeParseError(NAME, "not a sysfs counter line", self.text, line=number)
        draft = self._port(match["ca"], int(match["port"]))
        name = match["name"]
        known = _BY_SYSFS.get(name)
        self._store(draft, known or name, known is not None, match["value"], number)

    def _store(self, draft: _PortDraft, name: str, known: bool, raw: str, number: int) -> None:
        value = _value(raw, number, self.text)
        if value is None:
            draft.unavailable.append(name)
        elif not known:
            draft.other[name] = value
        elif name in draft.extended and not self.block_extended:
            return  # a plain block after the extended one: its 64-bit value stays
        else:
            draft.counters[name] = value
            if self.block_extended:
                draft.extended.add(name)
            if value == _limit(name, self.source, self.block_extended):
                draft.saturated.add(name)
            else:
                draft.saturated.discard(name)

    def _perfquery(self, number: int, line: str) -> None:
        if match := _MARKER_LINE.match(line):
            self._close_block()
            self.marker = (match["ca"], int(match["port"]))
            self.block = None
        elif match := _HEADER.match(line):
            self._header(match)
        elif _TOOL_NOISE.match(line):
            self.errors.append(line)
        elif _OTHER_HEADER.match(line):
            raise ProbeParseError(NAME, "not a per-port perfquery header", self.text, line=number)
        elif line.startswith("#"):
            return  # a pasted prompt (`# perfquery -x 10 1`) or a comment
        elif match := _DOTTED.match(line):
            self._dotted(match, number)
        else:
            raise ProbeParseError(NAME, "not a perfquery counter line", self.text, line=number)

    def _header(self, match: re.Match[str]) -> None:
        self._close_block()
        port = int(match["port"])
        ca = self.marker[0] if self.marker and self.marker[1] == port else None
        key_ca = ca if ca is not None else f"lid {match['lid']}"
        draft = self.ports.get((key_ca, port))
        if draft is None:
            draft = self.ports[(key_ca, port)] = _PortDraft(ca, port)
        draft.lid = int(match["lid"])
        draft.empty_header = True
        self.block = draft
        self.block_extended = match["kind"] is not None

    def _close_block(self) -> None:
        self.block = None
        self.block_extended = False

    def _dotted(self, match: re.Match[str], number: int) -> None:
        if self.block is None:
            if self.marker is None:
                raise ProbeParseError(
                    NAME, "counter before any port header", self.text, line=number
                )
            self.block = self._port(self.marker[0], self.marker[1])  # a headerless paste
        name = match["name"]
        self.block.empty_header = False
        if name in _SELECTORS:
            return
        known = _BY_PERFQUERY.get(name)
        self._store(self.block, known or name, known is not None, match["value"], number)

    def facts(self) -> IbCountersFacts:
        ports = tuple(_freeze(draft) for draft in self.ports.values())
        if not ports:
            raise ProbeParseError(NAME, "no port counters in the output", self.text)
        fatal = [e for e in self.errors if not e.startswith("ibwarn:")]
        complete = not fatal and all(port.complete for port in ports)
        return IbCountersFacts(
            source=self.source, ports=ports, errors=tuple(self.errors), complete=complete
        )


def _freeze(draft: _PortDraft) -> PortCounters:
    order = [spec.name for spec in COUNTERS]
    counters = {name: draft.counters[name] for name in order if name in draft.counters}
    return PortCounters(
        ca=draft.ca,
        port=draft.port,
        lid=draft.lid,
        counters=MappingProxyType(counters),
        other=MappingProxyType(dict(draft.other)),
        unavailable=tuple(draft.unavailable),
        saturated=tuple(name for name in order if name in draft.saturated),
        complete=not draft.cut and not draft.empty_header,
    )


# --- deltas between two reads -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CounterChange:
    """One counter between two reads of a port."""

    counter: str
    before: int
    after: int
    rise: int
    """How much it rose; after a reset, `after` (at least that many since the reset)."""
    reset: bool
    """It went down: the counters were cleared between the reads (never a negative rise)."""
    saturated: bool
    """It is at its maximum now: it stopped counting, the real rise may be larger."""


@dataclass(frozen=True, slots=True)
class PortDelta:
    """One port's counters between two reads."""

    ca: str | None
    port: int
    lid: int | None
    changes: tuple[CounterChange, ...]
    """Every known counter read both times, in COUNTERS order."""

    @property
    def reset(self) -> bool:
        """Some counter went down: the port's counters were cleared between the reads."""
        return any(change.reset for change in self.changes)

    def rise(self, counter: str) -> int | None:
        """A counter's rise by either spelling; None when it was not read both times."""
        name = canonical_name(counter) or counter
        return next((c.rise for c in self.changes if c.counter == name), None)

    def risen(self) -> tuple[CounterChange, ...]:
        """The counters that rose (or were reset with a count since)."""
        return tuple(change for change in self.changes if change.rise > 0)


@dataclass(frozen=True, slots=True)
class CounterDeltas:
    """Two reads of a node's counters compared, port by port."""

    ports: tuple[PortDelta, ...]
    appeared: tuple[tuple[str | None, int], ...]
    """(ca, port) read only the second time."""
    vanished: tuple[tuple[str | None, int], ...]
    """(ca, port) read only the first time."""


def deltas(before: IbCountersFacts, after: IbCountersFacts) -> CounterDeltas:
    """Compare two reads of the same node (earlier, later): per port, how much each counter
    rose. A counter lower the second time was reset: it is reported (`reset`) with the count
    since as its rise, never a negative one. Ports are matched by CA and port number (by LID
    and port for perfquery captures without a CA)."""
    earlier = {_key(port): port for port in before.ports}
    later = {_key(port): port for port in after.ports}
    ports = tuple(_port_delta(earlier[key], port) for key, port in later.items() if key in earlier)
    return CounterDeltas(
        ports=ports,
        appeared=tuple((p.ca, p.port) for key, p in later.items() if key not in earlier),
        vanished=tuple((p.ca, p.port) for key, p in earlier.items() if key not in later),
    )


def _key(port: PortCounters) -> tuple[str, int]:
    return (port.ca if port.ca is not None else f"lid {port.lid}", port.port)


def _port_delta(before: PortCounters, after: PortCounters) -> PortDelta:
    changes = []
    for name, value in after.counters.items():
        old = before.counters.get(name)
        if old is None:
            continue
        reset = value < old
        changes.append(
            CounterChange(
                counter=name,
                before=old,
                after=value,
                rise=value if reset else value - old,
                reset=reset,
                saturated=name in after.saturated,
            )
        )
    return PortDelta(after.ca, after.port, after.lid, tuple(changes))
