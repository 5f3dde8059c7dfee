"""NVSwitch SXid errors in the kernel log and in Fabric Manager's log, as events (the xid probe's).

Kernel lines come from the nvswitch driver's `NVSWITCH_PRINT_SXID` (code printed `%05d`):

    nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted ...

with the severities Fatal, Non-fatal and Correctable, and `Link NN` for per-link errors. The
same report goes on over lines such as `20034, Severity 1 Engine instance 60 Sub-engine instance
00` and `20034, Data {0x10000000, ...}`: register detail of an error already counted, so they are
not events. Fabric Manager logs the errors it handles as

    detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id 00000000:86:00.0
    physical id 3 port 61

where `port` is the link. A line that names an SXid but cannot be read raises ValueError, for
the probe to list it as unparsed.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from fleetfix.probes.gpu_facts import normalize_bus_id
from fleetfix.probes.kernel_log import Clock, Record


class SxidSeverity(enum.StrEnum):
    """How the switch driver classes an error."""

    FATAL = "fatal"
    NON_FATAL = "non_fatal"
    CORRECTABLE = "correctable"


@dataclass(frozen=True, slots=True)
class SxidEvent:
    """One NVSwitch error report."""

    code: int
    severity: SxidSeverity | None
    """None when the line states no severity (a wording fleetfix has not seen)."""
    fatal: bool | None
    switch: str | None
    """The driver's instance name (`nvswitch3`); None in Fabric Manager's log."""
    physical_id: int | None
    """Fabric Manager's `physical id` of the switch; None in kernel lines."""
    bus_id: str | None
    """The switch's PCI bus id, normalised (`00000000:05:00.0`)."""
    pci: str
    """The switch's PCI id exactly as written."""
    link: int | None
    """The NVLink (Fabric Manager: `port`) the error is on; None for a per-device error."""
    message: str
    timestamp: str | None
    seconds: float | None
    clock: Clock | None
    line: int


_KERNEL = re.compile(
    r"(?:nvidia-(?P<switch>nvswitch\d+): )?SXid \((?P<pci>[^)]*)\): "
    r"(?P<code>\d+)\b,?\s*(?P<rest>.*)$"
)
_SEVERITY = re.compile(
    r"^(?P<sev>Fatal|Non-?fatal|Correctable)\b,?\s*(?:Link (?P<link>\d+)\b)?\s*(?P<text>.*)$",
    re.IGNORECASE,
)
_DETAIL = re.compile(r"^(?:Severity \d+ Engine instance\b|Data \{)")
_FABRIC_MANAGER = re.compile(
    r"detected NVSwitch (?P<sev>fatal|non-fatal) error (?P<code>\d+)\b"
    r"(?: on fid \d+)?(?: on NVSwitch pci bus id (?P<pci>[0-9a-fA-F:.]+))?"
    r"(?: physical id (?P<phys>\d+))?(?: port (?P<port>\d+))?",
    re.IGNORECASE,
)
_MARK = re.compile(r": SXid \(|\bSXid \(PCI:|detected NVSwitch (?:non-)?fatal error", re.I)
_SEVERITIES = {
    "fatal": SxidSeverity.FATAL,
    "non-fatal": SxidSeverity.NON_FATAL,
    "nonfatal": SxidSeverity.NON_FATAL,
    "correctable": SxidSeverity.CORRECTABLE,
}


def names_sxid(message: str) -> bool:
    """Whether a log message is an NVSwitch SXid report (readable or not)."""
    return bool(_MARK.search(message))


def sxid_event(record: Record) -> SxidEvent | None:
    """The SXid event a record reports; None for a detail line of an earlier report.

    Raises:
        ValueError: the record names an SXid but is not in a shape fleetfix reads.
    """
    match = _KERNEL.search(record.message)
    if match is not None:
        return _kernel_event(record, match)
    fm = _FABRIC_MANAGER.search(record.message)
    if fm is not None:
        return _fabric_manager_event(record, fm)
    raise ValueError("malformed SXid line")


def _kernel_event(record: Record, match: re.Match[str]) -> SxidEvent | None:
    rest = match["rest"].strip()
    if _DETAIL.match(rest):
        return None
    severity = _SEVERITY.match(rest)
    link = severity["link"] if severity else None
    return SxidEvent(
        code=int(match["code"]),
        severity=_SEVERITIES[severity["sev"].lower()] if severity else None,
        fatal=severity["sev"].lower() == "fatal" if severity else None,
        switch=match["switch"],
        physical_id=None,
        bus_id=normalize_bus_id(match["pci"]),
        pci=match["pci"],
        link=int(link) if link is not None else None,
        message=severity["text"].strip() if severity else rest,
        timestamp=record.timestamp,
        seconds=record.seconds,
        clock=record.clock,
        line=record.line.number,
    )


def _fabric_manager_event(record: Record, match: re.Match[str]) -> SxidEvent:
    severity = _SEVERITIES[match["sev"].lower()]
    pci = match["pci"] or ""
    return SxidEvent(
        code=int(match["code"]),
        severity=severity,
        fatal=severity is SxidSeverity.FATAL,
        switch=None,
        physical_id=int(match["phys"]) if match["phys"] else None,
        bus_id=normalize_bus_id(pci) if pci else None,
        pci=pci,
        link=int(match["port"]) if match["port"] else None,
        message=record.message.strip(),
        timestamp=record.timestamp,
        seconds=record.seconds,
        clock=record.clock,
        line=record.line.number,
    )
