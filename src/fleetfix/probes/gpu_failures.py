"""GPUs the NVIDIA driver could not bring up, or lost, as its kernel log says without an Xid
(the xid probe's).

The driver's own words, as its sources print them (NVIDIA/open-gpu-kernel-modules,
`src/nvidia/arch/nvalloc/unix/src/osinit.c`, `osapi.c`, `kernel-open/nvidia/nv.c`):

* `NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x24:0x65:1426)`: the GPU did not
  initialise; older drivers print `NVRM: RmInitAdapter failed! (0x26:0x56:1474)` without the
  bus, and the GPU is the one the NVRM lines just before named (`NVRM: GPU at PCI:...`,
  `NVRM: GPU 0000:..: ...`, `NVRM: The NVIDIA GPU ...`);
* `NVRM: GPU 0000:3b:00.0: GPU does not have the necessary power cables connected.`;
* `NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:2330)` / `installed in this system is not
  supported by ...` (this driver release, or the open kernel module), over several lines;
* the same header then `... fallen off the bus and is not responding to commands.`, and
  `NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.`: the xid probe reads these as Xid 79;
* `NVRM: The NVIDIA probe routine failed for 1 device(s).`, counted only when nothing else in
  the log says which GPU failed.

Other NVRM lines (`failed to enable MSI`, GSP detail before `RmInitAdapter failed!`) are not
failures of their own.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleetfix.probes.gpu_facts import normalize_bus_id
from fleetfix.probes.kernel_log import Record


class GpuFailureKind(enum.StrEnum):
    """What the driver said happened to a GPU."""

    INIT_FAILED = "init_failed"
    """`RmInitAdapter failed!`: the driver could not initialise the GPU."""
    NO_POWER = "no_power"
    """The GPU lacks its auxiliary power cables."""
    UNSUPPORTED = "unsupported"
    """This driver (release, or the open kernel module) does not support the GPU."""
    FELL_OFF_BUS = "fell_off_bus"
    """The GPU stopped answering on PCIe (Xid 79, or the driver's bus-off report)."""
    PROBE_FAILED = "probe_failed"
    """The driver's probe failed for some device, and no line says which or why."""


@dataclass(frozen=True, slots=True)
class Sighting:
    """One log record that reports a GPU failure."""

    kind: GpuFailureKind
    pci: str
    """The GPU as written (`0000:3b:00.0`, `PCI:0000:3b:00`); "" when no line names it."""
    message: str
    record: Record
    """The record it was read from (for a block: the one that carries its time)."""


@dataclass(frozen=True, slots=True)
class GpuFailure:
    """One GPU's failure of one kind, however many times the log repeats it."""

    kind: GpuFailureKind
    bus_id: str | None
    """Normalised `dddddddd:bb:dd.f`; None when no line names the GPU."""
    pci: str
    message: str
    """The driver's words, from the first report."""
    line: int
    """Line of the first report."""
    timestamp: str | None
    count: int
    last_line: int


_BUS = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_DEVICE_LINE = re.compile(rf"NVRM: GPU (?P<pci>{_BUS}): (?P<text>.*)$")
_INIT_FAILED = re.compile(r"NVRM: (?:GPU \S+: )?(?P<text>RmInitAdapter failed! \(.*)$")
_NO_POWER = re.compile(
    rf"NVRM: (?:GPU (?P<pci>{_BUS}): )?(?P<text>GPU does not have the necessary power cables.*)$"
)
_BUS_OFF_LINE = re.compile(rf"NVRM: GPU (?P<pci>{_BUS}): (?P<text>GPU has fallen off the bus\b.*)$")
_BLOCK_HEADER = re.compile(rf"NVRM: The NVIDIA v?GPU (?P<pci>{_BUS})\b")
_BUS_OFF_TAIL = re.compile(r"(?P<text>fallen off the bus and is not responding to commands.*)$")
_UNSUPPORTED = re.compile(r"\bnot supported by\b")
_PROBE_FAILED = re.compile(r"NVRM: (?P<text>The NVIDIA probe routine failed for \d+ device.*)$")
_UUID_LINE = re.compile(
    r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]{36})\b"
)
_NAMED_AT = re.compile(rf"NVRM: GPU at PCI:(?P<pci>{_BUS})")
BLOCK_REACH = 3
"""A block's continuation lines name no GPU: they belong to a header this many records up."""
NAMED_REACH = 8
"""A bus-less `RmInitAdapter failed!` is about a GPU an NVRM line named at most this far up..."""
NAMED_WITHIN_S = 10.0
"""... and at most this many seconds before."""
BLOCK_WITHIN_S = 1.0
"""A block's lines are printed together: each stamped within this of its header."""
_SENTENCE_END = re.compile(r"\.(?=\s|$)")


@dataclass(slots=True)
class GpuLines:
    """Walks the NVRM records that are no Xid or SXid, once: the failures they report, the
    UUID each GPU was named with, and which GPU the nearest lines are about."""

    sightings: list[Sighting] = field(default_factory=list)
    uuids: dict[str, str] = field(default_factory=dict)
    header: tuple[str, Record, int] | None = None
    """A `The NVIDIA GPU` block's GPU as written, its record, and records since."""
    named: tuple[str, Record, int] | None = None
    """The GPU the latest NVRM line named, that line, and records since."""
    unsupported: tuple[str, Record, list[str]] | None = None
    """A `not supported` block still being read: its GPU, header record and words so far."""

    def feed(self, record: Record) -> None:
        """Read one record (call for every record, in order, so the blocks age right; then
        `finish`)."""
        self._age()
        message = record.message
        if self.unsupported is not None and not self._continues(record):
            self.finish()
        if "NVRM:" not in message:
            return
        if (uuid := _UUID_LINE.search(message)) is not None:
            bus = normalize_bus_id(uuid["pci"])
            if bus is not None:
                self.uuids[bus] = uuid["uuid"]
        self._block(record)
        self._line(record)
        self._name(record)

    def finish(self) -> None:
        """The end of the log (or of a block): a `not supported` report read so far is one."""
        if self.unsupported is not None:
            pci, header, words = self.unsupported
            self._add(GpuFailureKind.UNSUPPORTED, pci, " ".join(words), header)
            self.unsupported = None

    def failures_of(self, kind: GpuFailureKind) -> list[Sighting]:
        return [s for s in self.sightings if s.kind is kind]

    def pass_over(self) -> None:
        """A record read elsewhere (an Xid, an SXid): the blocks still age by it."""
        self._age()

    def _block(self, record: Record) -> None:
        """`The NVIDIA GPU <bus>` (or `GPU at PCI:<bus>`) then, within a few lines, why: off
        the bus, or not supported. A bus-off tail with no header names no GPU."""
        message = record.message
        header = _BLOCK_HEADER.search(message) or _NAMED_AT.search(message)
        if header is not None:
            self.header = (header["pci"], record, 0)
        pci, named, _ = self.header or ("", record, 0)
        if (tail := _BUS_OFF_TAIL.search(message)) is not None:
            # The block's continuation lines may carry no time stamp; its first line does.
            stamped = record if record.seconds is not None else named
            self._add(GpuFailureKind.FELL_OFF_BUS, pci, tail["text"], stamped)
            self.header = None
        elif self.unsupported is not None:
            self._say(_words(message))
        elif self.header is not None and _UNSUPPORTED.search(message):
            said = [_words(named.message)] if record is not named else []
            self.unsupported = (pci, named, said)
            self.header = None
            self._say(_words(message))

    def _say(self, words: str) -> None:
        """Add a line's words to the `not supported` report; its first sentence ends it."""
        assert self.unsupported is not None
        end = _SENTENCE_END.search(words)
        self.unsupported[2].append(words[: end.end()] if end else words)
        if end:
            self.finish()

    def _continues(self, record: Record) -> bool:
        """Whether a record goes on with the block above: an NVRM line stamped like its
        header, or not stamped at all (a pasted block's indented lines)."""
        if self.unsupported is None or "NVRM:" not in record.message:
            return False
        if _BLOCK_HEADER.search(record.message):
            return False
        header = self.unsupported[1]
        if record.seconds is None or header.seconds is None:
            return True
        return abs(record.seconds - header.seconds) <= BLOCK_WITHIN_S

    def _line(self, record: Record) -> None:
        """One-line reports: `RmInitAdapter failed!`, power cables, `GPU has fallen off the bus.`"""
        message = record.message
        if (init := _INIT_FAILED.search(message)) is not None:
            self._add(GpuFailureKind.INIT_FAILED, self._gpu(record), init["text"], record)
        elif (power := _NO_POWER.search(message)) is not None:
            pci = power["pci"] or self._gpu(record)
            self._add(GpuFailureKind.NO_POWER, pci, power["text"], record)
        elif (off := _BUS_OFF_LINE.search(message)) is not None:
            self._add(GpuFailureKind.FELL_OFF_BUS, off["pci"], off["text"], record)
        elif (probe := _PROBE_FAILED.search(message)) is not None:
            self._add(GpuFailureKind.PROBE_FAILED, "", probe["text"], record)

    def _gpu(self, record: Record) -> str:
        """The GPU a line is about: the one it names, else the one named just before (a few
        lines up, at about the same time)."""
        if (device := _DEVICE_LINE.search(record.message)) is not None:
            return device["pci"]
        if self.named is None:
            return ""
        pci, named, _ = self.named
        if None in (record.seconds, named.seconds) or record.clock != named.clock:
            return pci
        assert record.seconds is not None and named.seconds is not None
        return pci if abs(record.seconds - named.seconds) <= NAMED_WITHIN_S else ""

    def _name(self, record: Record) -> None:
        for pattern in (_DEVICE_LINE, _NAMED_AT, _BLOCK_HEADER):
            if (match := pattern.search(record.message)) is not None:
                self.named = (match["pci"], record, 0)
                return

    def _add(self, kind: GpuFailureKind, pci: str, text: str, record: Record) -> None:
        self.sightings.append(Sighting(kind, pci, text.strip(), record))

    def _age(self) -> None:
        if self.header is not None:
            pci, named, age = self.header
            self.header = (pci, named, age + 1) if age < BLOCK_REACH else None
        if self.named is not None:
            pci, named, age = self.named
            self.named = (pci, named, age + 1) if age < NAMED_REACH else None


def _words(message: str) -> str:
    """A message without its `NVRM:` prefix."""
    at = message.find("NVRM:")
    return (message[at + len("NVRM:") :] if at >= 0 else message).strip()


def gpu_failures(sightings: Iterable[Sighting]) -> tuple[GpuFailure, ...]:
    """One failure per GPU and kind, in the order the log first reports them. A probe
    failure counts only when no other report says which GPU failed."""
    found = list(sightings)
    if any(s.kind is not GpuFailureKind.PROBE_FAILED for s in found):
        found = [s for s in found if s.kind is not GpuFailureKind.PROBE_FAILED]
    groups: dict[tuple[GpuFailureKind, str], list[Sighting]] = {}
    for sighting in sorted(found, key=lambda s: s.record.line.number):
        bus = normalize_bus_id(sighting.pci) if sighting.pci else None
        groups.setdefault((sighting.kind, bus or sighting.pci), []).append(sighting)
    return tuple(_failure(group) for group in groups.values())


def _failure(group: list[Sighting]) -> GpuFailure:
    first = group[0]
    return GpuFailure(
        kind=first.kind,
        bus_id=normalize_bus_id(first.pci) if first.pci else None,
        pci=first.pci,
        message=first.message,
        line=first.record.line.number,
        timestamp=first.record.timestamp,
        count=len(group),
        last_line=group[-1].record.line.number,
    )
