"""The `xid` probe: NVRM Xid events from the kernel log, in bursts, joined with the Xid catalog.

Reads `dmesg -T` (fallback `journalctl -k -o short-iso`) and every shape kernel_log.py reads.
Besides `NVRM: Xid` lines it reads:

* the driver's bus-off reports without an Xid line, `NVRM: GPU 0000:3b:00.0: GPU has fallen off
  the bus.` and the probe-time block `NVRM: The NVIDIA GPU 0000:3b:00.0 / (PCI ID: ...) installed
  in this system has / fallen off the bus and is not responding to commands.`: each becomes a
  code-79 event with `source: bus_off` unless an Xid 79 of the same GPU is logged near it (the
  driver prints both for one fault);
* Xid 154 in every driver's wording (knowledge/recovery.py; the hex code decides);
* NVSwitch SXid reports, kernel and Fabric Manager (sxid.py), as separate `sxid_*` facts;
* GPUs the driver could not bring up or lost, Xid or not (`RmInitAdapter failed!`, no power
  cables, not supported by this driver, off the bus; gpu_failures.py), as `gpu_failures` and
  `failed_gpus`: any of them makes the log unhealthy;
* PCIe AER reports (`PCIe Bus Error: severity=...` of any device: a GPU, its root port, a NIC;
  pcie_aer.py) as `aer`, counted per device for the window read (the boot, by default).

An Xid code the catalog does not know counts as critical (`critical_codes`, `unknown_codes`):
NVIDIA's advice for it is CONTACT_SUPPORT.

Lines that are not Xids are ignored, but text that is not a kernel log (HTML, binary, a tool
error) is rejected, and so is a log that could not be read (the command's own marker, dmesg
refused, journalctl's notice to a user who may not read it, or, for the whole boot, a journal
with no kernel message): never "no Xid". A line that names an Xid or SXid but cannot be read
is listed in `unparsed` and the other events stand. Kernel records are line-independent, so a
cut-off log yields the events it holds; `complete` is False when the text did not end with a
newline (the capture was cut).

Per-event `recommended_action` (and `actions`, `reboot_required`, `reset_required_gpus` drawn
from it) is NVIDIA's catalog advice, for reports: knowledge.xid's rule with the latest Xid 154 the
same GPU logged (a 154 whose action fleetfix cannot read leaves the catalog's advice for the other
codes and asks CONTACT_SUPPORT for itself). It is not what fleetfix does: that is decided by
knowledge/remedy.py from the node's current state (`decide`; `from_log` for this log alone).
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from fleetfix.errors import FleetfixError, ProbeParseError
from fleetfix.knowledge.recovery import RecoveryAction, read_recovery_action, read_xid154
from fleetfix.knowledge.xid import XidCatalog, XidInfo, xid_catalog
from fleetfix.probes.base import Probe
from fleetfix.probes.gpu_facts import normalize_bus_id
from fleetfix.probes.gpu_failures import (
    GpuFailure,
    GpuFailureKind,
    GpuLines,
    Sighting,
    gpu_failures,
)
from fleetfix.probes.kernel_log import (
    UNREADABLE_MARKER,
    Clock,
    LogFormat,
    Record,
    check_kernel_log,
    only_notes,
    records,
    source_format,
)
from fleetfix.probes.pcie_aer import AerFacts, parse_aer
from fleetfix.probes.sxid import SxidEvent, SxidSeverity, names_sxid, sxid_event

__all__ = [
    "DEFAULT_BURST_WINDOW_S",
    "NAME",
    "PROBE",
    "UNREADABLE_MARKER",
    "Clock",
    "EventSource",
    "GpuFailure",
    "GpuFailureKind",
    "LogFormat",
    "NvlinkDetail",
    "SxidEvent",
    "SxidSeverity",
    "UnparsedLine",
    "XidBurst",
    "XidEvent",
    "XidFacts",
    "bus_to_index",
    "group_bursts",
    "parse",
]

NAME = "xid"
DEFAULT_BURST_WINDOW_S = 180.0
"""NVIDIA Fleet Intelligence's burst rule: related Xids until three minutes of silence."""


class EventSource(enum.StrEnum):
    """What kind of kernel line an Xid event was read from."""

    XID = "xid"
    """An `NVRM: Xid (...)` line."""
    BUS_OFF = "bus_off"
    """A bus-off report without an Xid line, read as Xid 79."""


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
    """One Xid: an NVRM Xid line, or a bus-off line read as Xid 79 (see `source`)."""

    code: int
    bus_id: str | None
    """Normalised `dddddddd:bb:dd.f` (lower case), None when the bus was elided."""
    pci: str
    """The GPU identifier exactly as written (`PCI:0000:3b:00`, `0000:3b:00.0`); "" if none."""
    pid: int | None
    process: str | None
    message: str
    channel: int | None
    caused_by: int | None
    """Xid 45: the earlier Xid it names ("caused by previous Xid 149")."""
    recovery_action: str | None
    """Xid 154: the action the driver changed to, as a fact name (`reset`, `reboot`,
    `drain_and_reset`, ..., `unknown` when neither code nor wording is known)."""
    recovery_code: int | None
    """Xid 154: the NVML value the message printed (`0x2` -> 2)."""
    recovery_text: str | None
    """Xid 154: the driver's wording as printed (`OS Reboot`, `Node Reboot Required`)."""
    nvlink: NvlinkDetail | None
    uuid: str | None
    """From a preceding `NVRM: GPU at PCI:...: GPU-...` line for the same bus."""
    timestamp: str | None
    seconds: float | None
    clock: Clock | None
    line: int
    source: EventSource
    mnemonic: str | None
    immediate_action: str | None
    severity: str | None
    recommended_action: str
    """NVIDIA's catalog advice for this event (a bucket name), not what fleetfix does."""


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
class UnparsedLine:
    """A line that names an Xid or SXid but that fleetfix could not read."""

    line: int
    text: str
    reason: str


@dataclass(frozen=True, slots=True)
class XidFacts:
    """Everything the kernel log says about Xids and NVSwitch SXids."""

    events: tuple[XidEvent, ...]
    count: int
    codes: tuple[int, ...]
    counts: Mapping[int, int]
    """Events per code (`facts.counts['79']` in a `when:`; keys become text there)."""
    bursts: tuple[XidBurst, ...]
    gpus: tuple[str, ...]
    """Bus ids with at least one Xid."""
    recovery_actions: Mapping[str, str]
    """Bus id -> the recovery action (fact name) of that GPU's latest Xid 154."""
    actions: tuple[str, ...]
    """Distinct recommended actions (NVIDIA's catalog buckets), sorted."""
    reboot_required: bool
    """NVIDIA's catalog advises RESTART_BM for an event (fleetfix decides with remedy.from_log)."""
    reset_required_gpus: tuple[str, ...]
    """Bus ids NVIDIA's catalog advises resetting (advice; fleetfix decides with remedy)."""
    critical_codes: tuple[int, ...]
    """Codes fleetfix's catalog calls critical, and every code it does not know: NVIDIA's
    advice for an unknown code is CONTACT_SUPPORT, so it fails closed."""
    unknown_codes: tuple[int, ...]
    """Codes not in the Xid catalog fleetfix ships (a newer driver's); also in critical_codes."""
    gpu_failures: tuple[GpuFailure, ...]
    """GPUs the driver reports failed to initialise, unsupported, without power or fallen off
    the bus, with or without an Xid line: any of them makes the kernel log unhealthy."""
    failed_gpus: tuple[str, ...]
    """Bus ids named by gpu_failures (a failure that names no GPU is only in gpu_failures)."""
    sxid_events: tuple[SxidEvent, ...]
    sxid_count: int
    sxid_codes: tuple[int, ...]
    sxid_counts: Mapping[int, int]
    sxid_fatal_codes: tuple[int, ...]
    """SXid codes reported at least once as Fatal."""
    sxid_switches: tuple[str, ...]
    """Bus ids of the NVSwitches with at least one SXid."""
    unparsed: tuple[UnparsedLine, ...]
    """Xid/SXid lines fleetfix could not read (a new wording, a cut line): never silence."""
    source_format: LogFormat
    complete: bool
    aer: AerFacts = field(default_factory=AerFacts)
    """PCIe AER reports in the same log, per device (health reads them: knowledge/health.py)."""


_XID_MARK = "NVRM: Xid"
_XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+)\b[,:]?\s*(?P<rest>.*)$")
_PID = re.compile(r"^pid=(?P<pid>'?<unknown>'?|\d+)(?:,\s*|$)")
_NAME = re.compile(r"^name=(?P<name>[^,]*)(?:,\s*|$)")
_CHANNEL = re.compile(r"\b(?:Ch|channel|Channel ID) (?:0x)?(?P<ch>[0-9a-fA-F]{8})\b")
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<code>\d+)")
_NVLINK = re.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]*) (?P<sev>Nonfatal|Non-fatal|Fatal)\b\s*(?P<xc>XC\d+)?\s*"
    r"(?:i(?P<inj>[01])\s*)?(?:Link (?P<link>\d+))?\s*(?:\((?P<regs>[^)]*)\))?",
    re.IGNORECASE,
)
_DURATION = re.compile(r"^(?P<n>\d+)\s*(?P<unit>s|m|min|h|d)?$")
_REGISTER = re.compile(r"0x[0-9a-fA-F]+")
_DURATION_UNITS = MappingProxyType({"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400})
_RESETS = frozenset({"RESET_GPU", "DRAIN_AND_RESET", "BUS_RESET"})


def parse(text: str) -> XidFacts:
    """Xid facts from kernel log text; raises ProbeParseError if it is not a kernel log."""
    return parse_with(text, {})


def parse_with(text: str, params: Mapping[str, Any]) -> XidFacts:
    """Xid facts from kernel log text read for the step's `since`; ProbeParseError if it is not
    a kernel log, or not a readable one: the probe's own "no readable kernel log", a tool's
    permission error, or, for the whole boot (`since: boot`, the default), journalctl with
    no kernel message at all (a container's journal holds none: never "no Xid"). A window of
    the last minutes may hold none."""
    found = records(text)
    check_kernel_log(text, found)
    if only_notes(found) and _since(params) == "boot":
        reason = "kernel log not readable: the journal has no kernel message for this boot"
        raise ProbeParseError(NAME, reason, text, line=found[0].line.number)
    cut = bool(text) and not text.endswith(("\n", "\r"))
    reader = _Reader(cut=cut, last=_last_line(found))
    for record in found:
        reader.feed(record)
    reader.lines.finish()
    events = _with_recommendations(reader.events(), xid_catalog())
    facts = _facts(events, reader, found, complete=not cut)
    if "PCIe Bus Error" in text or "AER: " in text:  # most logs have none: skip the second pass
        facts = replace(facts, aer=parse_aer(text))
    return facts


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


def _since(params: Mapping[str, Any]) -> str:
    return str(params.get("since", "boot")).strip()


def _command(params: Mapping[str, Any]) -> str:
    since = _since(params)
    fallback = f"echo '{UNREADABLE_MARKER} (dmesg and journalctl failed)'"
    if since == "boot":
        return (
            "dmesg -T 2>/dev/null || journalctl -k -b -o short-iso --no-pager 2>&1 || " + fallback
        )
    if _MOMENT.match(since):
        return _window_command(since, str(params.get("until") or "").strip(), fallback)
    seconds = _duration_seconds(since)
    # journalctl can filter by time; dmesg --since only exists in recent util-linux.
    return (
        f"journalctl -k -o short-iso --no-pager --since '-{seconds}s' 2>&1 || "
        f"dmesg -T --since '-{seconds}s' 2>/dev/null || {fallback}"
    )


_MOMENT = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d)?$")
"""A moment in the node's local time, as Slurm prints a job's start and end (no zone)."""


def _window_command(since: str, until: str, fallback: str) -> str:
    """The kernel log between two moments (a job's start and end), from every boot the journal
    keeps: a node that crashed and rebooted holds the job's errors in the boot before this one
    (`_TRANSPORT=kernel` without `-b`; `-k` would mean this boot only)."""
    if until and not _MOMENT.match(until):
        raise FleetfixError(f"xid: 'until' must be a moment like 2026-12-07T03:10:00: {until!r}")
    window = f"--since '{since.replace('T', ' ')}'"
    if until:
        window += f" --until '{until.replace('T', ' ')}'"
    return (
        f"journalctl _TRANSPORT=kernel -o short-iso --no-pager {window} 2>&1 || "
        f"dmesg -T {window} 2>/dev/null || {fallback}"
    )


def _duration_seconds(since: str) -> int:
    match = _DURATION.match(since.lower())
    if not match:
        raise FleetfixError(
            f"xid: 'since' must be 'boot', a duration like 30m, 6h, 2d, or a moment like "
            f"2026-12-07T03:10:00: {since!r}"
        )
    return int(match["n"]) * _DURATION_UNITS[match["unit"] or "s"]


# --- reading lines ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Reader:
    """Walks the records once: Xid lines, SXids, the driver's GPU failure reports (bus-off
    reports among them), and what it could not read."""

    cut: bool
    """The text stops inside its last line."""
    last: int
    xids: list[XidEvent] = field(default_factory=list)
    xid79s: list[Sighting] = field(default_factory=list)
    sxids: list[SxidEvent] = field(default_factory=list)
    unparsed: list[UnparsedLine] = field(default_factory=list)
    lines: GpuLines = field(default_factory=GpuLines)

    def feed(self, record: Record) -> None:
        try:
            if _XID_MARK in record.message:
                self.lines.pass_over()
                self._xid(record)
            elif _may_name_sxid(record.message) and names_sxid(record.message):
                self.lines.pass_over()
                self._sxid(record)
            else:
                self.lines.feed(record)
        except ValueError as exc:  # a line fleetfix cannot read costs that line, not the log
            cut = self.cut and record.line.number == self.last
            reason = "cut off mid-line" if cut else str(exc)
            self.unparsed.append(UnparsedLine(record.line.number, record.line.text, reason))

    def events(self) -> tuple[XidEvent, ...]:
        """Xid events, plus the bus-off reports no Xid 79 line already accounts for."""
        derived = [event for _, event in self._bus_offs()]
        return tuple(sorted((*self.xids, *derived), key=lambda event: event.line))

    def failures(self) -> tuple[GpuFailure, ...]:
        """Every GPU the driver reports failed or lost: Xid 79 lines and the bus-off reports
        no Xid 79 accounts for, GPUs that did not initialise or are not supported."""
        others = [s for s in self.lines.sightings if s.kind is not GpuFailureKind.FELL_OFF_BUS]
        lost = [sighting for sighting, _ in self._bus_offs()]
        return gpu_failures([*others, *self.xid79s, *lost])

    def _bus_offs(self) -> list[tuple[Sighting, XidEvent]]:
        xid79 = [event for event in self.xids if event.code == 79]
        derived: list[tuple[Sighting, XidEvent]] = []
        for sighting in self.lines.failures_of(GpuFailureKind.FELL_OFF_BUS):
            candidate = _bus_off(sighting, self.lines.uuids)
            if not any(
                _same_fault(other, candidate) for other in (*xid79, *(e for _, e in derived))
            ):
                derived.append((sighting, candidate))
        return derived

    def _xid(self, record: Record) -> None:
        match = _XID.search(record.message)
        if match is None:
            raise ValueError("malformed Xid line")
        event = _event(record, match, self.lines.uuids)
        self.xids.append(event)
        if event.code == 79:
            self.xid79s.append(
                Sighting(GpuFailureKind.FELL_OFF_BUS, event.pci, event.message, record)
            )

    def _sxid(self, record: Record) -> None:
        event = sxid_event(record)
        if event is not None:
            self.sxids.append(event)


def _may_name_sxid(message: str) -> bool:
    """False only for a message sxid.names_sxid would refuse: an ASCII one naming neither
    `SXid (` nor NVSwitch in any case (its pattern, case-blind, needs one of them)."""
    if not message.isascii():
        return True
    lowered = message.lower()
    return "sxid (" in lowered or "nvswitch" in lowered


def _bus_off(sighting: Sighting, uuids: Mapping[str, str]) -> XidEvent:
    """A bus-off report as an Xid 79 event, stamped and numbered as its record."""
    record, pci = sighting.record, sighting.pci
    bus = normalize_bus_id(pci) if pci else None
    return XidEvent(
        code=79,
        bus_id=bus,
        pci=pci,
        pid=None,
        process=None,
        message=sighting.message,
        channel=None,
        caused_by=None,
        recovery_action=None,
        recovery_code=None,
        recovery_text=None,
        nvlink=None,
        uuid=uuids.get(bus) if bus else None,
        timestamp=record.timestamp,
        seconds=record.seconds,
        clock=record.clock,
        line=record.line.number,
        source=EventSource.BUS_OFF,
        mnemonic=None,
        immediate_action=None,
        severity=None,
        recommended_action="",
    )


def _last_line(found: tuple[Record, ...]) -> int:
    return found[-1].line.number if found else 0


def _same_fault(other: XidEvent, candidate: XidEvent) -> bool:
    """Whether a bus-off report is the one fault `other` (an Xid 79) already counts."""
    same_gpu = candidate.bus_id is None or other.bus_id in (None, candidate.bus_id)
    return same_gpu and _near(other, candidate)


def _near(first: XidEvent, second: XidEvent) -> bool:
    if first.seconds is None or second.seconds is None or first.clock != second.clock:
        return True  # two reports fleetfix cannot tell apart count as one fault, not two
    return abs(first.seconds - second.seconds) <= DEFAULT_BURST_WINDOW_S


def _event(record: Record, match: re.Match[str], uuids: Mapping[str, str]) -> XidEvent:
    code = int(match["code"])
    bus_id = normalize_bus_id(match["pci"])
    pid, process, message = _pid_and_name(match["rest"].strip())
    channel = _CHANNEL.search(message)
    caused = _CAUSED_BY.search(message)
    recovery, recovery_code, recovery_text = _recovery(code, message)
    return XidEvent(
        code=code,
        bus_id=bus_id,
        pci=match["pci"],
        pid=pid,
        process=process,
        message=message,
        channel=int(channel["ch"], 16) if channel else None,
        caused_by=int(caused["code"]) if caused else None,
        recovery_action=recovery,
        recovery_code=recovery_code,
        recovery_text=recovery_text,
        nvlink=_nvlink(message) if 144 <= code <= 150 else None,
        uuid=uuids.get(bus_id) if bus_id else None,
        timestamp=record.timestamp,
        seconds=record.seconds,
        clock=record.clock,
        line=record.line.number,
        source=EventSource.XID,
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


def _recovery(code: int, message: str) -> tuple[str | None, int | None, str | None]:
    """Xid 154's new action (fact name), NVML code and wording; `unknown` if unreadable."""
    if code != 154:
        return None, None, None
    change = read_xid154(message)
    if change is None:
        return RecoveryAction.UNKNOWN.fact_name, None, None
    return change.action.fact_name, change.code, change.text


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
    if not words or not all(_REGISTER.fullmatch(w) for w in words):
        return ()  # elided by the poster ("...") or not registers at all
    return tuple(int(w, 16) for w in words)


# --- joining and summarising -----------------------------------------------------------------


def _with_recommendations(
    events: tuple[XidEvent, ...], catalog: XidCatalog
) -> tuple[XidEvent, ...]:
    codes_by_gpu: dict[str, set[int]] = {}
    recovery_by_gpu: dict[str, RecoveryAction | None] = {}
    for event in events:
        gpu = event.bus_id or event.pci
        codes = codes_by_gpu.setdefault(gpu, set())
        codes.add(event.code)
        if event.caused_by is not None:  # "caused by previous Xid N": N counts as seen
            codes.add(event.caused_by)
        if event.recovery_action is not None:
            recovery_by_gpu[gpu] = read_recovery_action(event.recovery_action)
    joined = []
    for event in events:
        gpu = event.bus_id or event.pci
        info = catalog.get(event.code)
        joined.append(
            replace(
                event,
                mnemonic=_mnemonic(event, info),
                immediate_action=info.immediate_action if info else None,
                severity=info.severity.value if info else None,
                recommended_action=_advice(
                    catalog, event.code, recovery_by_gpu.get(gpu), codes_by_gpu[gpu]
                ),
            )
        )
    return tuple(joined)


_PRINTED_MNEMONIC = re.compile(r"^(?P<name>[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")


def _mnemonic(event: XidEvent, info: XidInfo | None) -> str | None:
    """The catalog's name for the code, except for a code the catalog lists as unused (or does
    not list) whose line starts with a name the driver printed: 610 drivers reuse Xid 51 and
    print BAD_TSG, while NVIDIA's catalog sheet still has its old name, unused. Elsewhere a
    leading upper-case word is the unit that failed (`RLW_RXPIPE` on Xid 145), not the Xid."""
    if info is not None and info.description.strip().lower() != "unused":
        return info.mnemonic
    match = _PRINTED_MNEMONIC.match(event.message.strip())
    if match is not None:
        return match["name"]
    return info.mnemonic if info is not None else None


def _advice(
    catalog: XidCatalog, code: int, recovery: RecoveryAction | None, with_codes: set[int]
) -> str:
    if recovery is RecoveryAction.UNKNOWN:
        # The driver asks for an action fleetfix cannot name: it overrides nothing, and the
        # Xid 154 that announced it is a question for support, not "no action".
        if code == 154:
            return "CONTACT_SUPPORT"
        recovery = None
    return catalog.recommended_action(code, recovery, with_codes=with_codes).action


def _facts(
    events: tuple[XidEvent, ...], reader: _Reader, found: tuple[Record, ...], *, complete: bool
) -> XidFacts:
    counts = Counter(e.code for e in events)
    failures = reader.failures()
    recovery = {e.bus_id: e.recovery_action for e in events if e.bus_id and e.recovery_action}
    actions = {e.recommended_action for e in events}
    sxids = tuple(reader.sxids)
    sxid_counts = Counter(e.code for e in sxids)
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
        # An unknown code (no severity) fails closed: NVIDIA's advice for it is CONTACT_SUPPORT.
        critical_codes=tuple(sorted({e.code for e in events if e.severity in ("critical", None)})),
        unknown_codes=tuple(sorted({e.code for e in events if e.severity is None})),
        gpu_failures=failures,
        failed_gpus=tuple(sorted({f.bus_id for f in failures if f.bus_id})),
        sxid_events=sxids,
        sxid_count=len(sxids),
        sxid_codes=tuple(sorted(sxid_counts)),
        sxid_counts=MappingProxyType(dict(sorted(sxid_counts.items()))),
        sxid_fatal_codes=tuple(sorted({e.code for e in sxids if e.fatal})),
        sxid_switches=tuple(sorted({e.bus_id for e in sxids if e.bus_id})),
        unparsed=tuple(reader.unparsed),
        source_format=source_format(found),
        complete=complete,
    )


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
    parse_with=parse_with,
    params={
        "since": "'boot' (default), a duration like 30m, 6h, 2d, or a moment like "
        "2026-12-07T03:10:00 (node local time, as Slurm prints a job's start): what to read",
        "until": "with a moment in `since`: the window's end (a job's end), every boot kept",
    },
)
