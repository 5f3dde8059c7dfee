"""PCIe Advanced Error Reporting (AER) in the kernel log: which device reported which error.

The AER driver (drivers/pci/pcie/aer.c) prints one report per error it reads from a device's
AER registers, each line prefixed with the driver and bus id of the device it read:

    pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction
        Layer, (Requester ID)                                    [one line in the log]
    pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000
    pcieport 0000:00:03.0:    [ 5] SDES
    pcieport 0000:00:03.0:    [14] CmpltTO                (First)

Kernels since 5.x put `AER: ` after the bus id on every line; older ones say
`id=00e5(Receiver ID)` and spell the bits out (`Receiver Error`); newer ones say
`Correctable`/`Uncorrectable (Non-Fatal)` where older ones say `Corrected`/`Uncorrected`.
Around the reports: `AER: [Multiple ]<severity> error [message ]received from|: <bus id>`
(the port that was told), `AER: can't recover (no error_detected callback)` (a driver, such as
nvidia's, that cannot take part in recovery) and `AER: device recovery failed`.

This module reads those lines, whatever prefix the log put before them (dmesg's `[ 123.4]`,
`-H`'s `[  +0.000844]`, a printk caller id `[  T291]`, syslog's or journalctl's host and
`kernel:`), into one `AerReport` per `PCIe Bus Error` line and a count per device. An
uncorrected error on a device is a fault of that device (or its link); corrected errors are a
rate to watch (issue 23). Lines that are not AER are ignored: the kernel log holds much else.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

_BDF = r"(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_HEAD = r"(?P<driver>[\w.-]+) " + _BDF + r": (?:AER: )?"
_REPORT = re.compile(
    _HEAD + r"PCIe Bus Error: severity=(?P<severity>[^,]+), type=(?P<layer>[^,]+), "
    r"(?:id=\w+)?\((?P<agent>[^)]*)\)"
)
_DEVICE = re.compile(
    _HEAD + r"\s*device \[(?P<ids>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\] "
    r"error status/mask=(?P<status>[0-9a-fA-F]+)/(?P<mask>[0-9a-fA-F]+)"
)
_BIT = re.compile(
    _HEAD + r"\s*\[\s*(?P<bit>\d+)\]\s*(?P<name>[A-Za-z][\w -]*?)\s*(?P<first>\(First\))?\s*$"
)
_CANNOT_RECOVER = re.compile(_HEAD + r"can't recover \(no error_detected callback\)")
_RECOVERY_FAILED = re.compile(_HEAD + r"device recovery failed")
_DETAIL_LINES = 40
"""How far after a report (or its last detail) its device and bit lines may come: other
devices' lines can interleave, a report never spans more."""


class Severity(enum.StrEnum):
    CORRECTED = "corrected"
    NONFATAL = "uncorrected_nonfatal"
    FATAL = "uncorrected_fatal"


def _severity(text: str) -> Severity | None:
    """`Corrected`/`Correctable`, `Uncorrected (Non-Fatal)`/`Uncorrectable (Non-Fatal)`,
    `Uncorrected (Fatal)`/`Uncorrectable (Fatal)`; None for anything else."""
    word = text.strip().lower()
    if word.startswith("correct"):
        return Severity.CORRECTED
    if word.startswith("uncorrect"):
        return Severity.NONFATAL if "non-fatal" in word else Severity.FATAL
    return None


@dataclass(frozen=True, slots=True)
class AerReport:
    """One `PCIe Bus Error` the AER driver read from a device's registers."""

    bus_id: str
    """The device whose AER registers held the error (lower case, `0000:03:00.0`)."""
    driver: str
    severity: Severity
    layer: str  # Physical Layer, Data Link Layer, Transaction Layer
    agent: str  # Receiver ID, Transmitter ID, Requester ID, Completer ID
    line: int
    ids: str | None = None  # [vendor:device], e.g. 10de:2330 for an H100 SXM
    status: str | None = None
    errors: tuple[str, ...] = ()
    """The status bits named (`RxErr`, `Timeout`, `CmpltTO`, ...), in the order printed."""
    first: str | None = None
    """The bit marked `(First)`: the error the device logged first."""

    @property
    def uncorrected(self) -> bool:
        return self.severity is not Severity.CORRECTED


@dataclass(frozen=True, slots=True)
class DeviceErrors:
    """What the log says of one device: its reports counted by severity."""

    driver: str = ""
    """The driver its reports were printed under (`nvidia`, `pcieport`, `mlx5_core`, `nvme`)."""
    ids: str | None = None
    """[vendor:device] from its first report that printed them."""
    gpu: bool = False
    """An NVIDIA device (vendor 10de, or the nvidia driver): its uncorrected errors are a GPU's."""
    corrected: int = 0
    uncorrected_nonfatal: int = 0
    uncorrected_fatal: int = 0
    errors: tuple[str, ...] = ()
    """Every error name its reports named, once each, in first-seen order."""

    @property
    def uncorrected(self) -> int:
        return self.uncorrected_nonfatal + self.uncorrected_fatal


@dataclass(frozen=True, slots=True)
class AerFacts:
    reports: tuple[AerReport, ...] = ()
    devices: Mapping[str, DeviceErrors] = field(default_factory=dict)
    """bus id -> its errors, for every device a report names."""
    cannot_recover: tuple[str, ...] = ()
    """Devices whose driver cannot take part in AER recovery (nvidia's says so)."""
    cannot_recover_gpus: tuple[str, ...] = ()
    """Of those, the nvidia driver's: GPUs below a port in error, out of service until reset."""
    recovery_failed: tuple[str, ...] = ()
    """Ports whose recovery failed: the devices below them may be gone until a reset."""

    @property
    def uncorrected_devices(self) -> tuple[str, ...]:
        return tuple(bus for bus, seen in self.devices.items() if seen.uncorrected)


def parse_aer(text: str) -> AerFacts:
    """The AER reports of a kernel log (any of the prefixes dmesg, syslog or journalctl put
    before the kernel's text); a log without any gives empty facts."""
    reports: list[AerReport] = []
    cannot: dict[str, str] = {}
    failed: dict[str, None] = {}
    near = 0  # the last line a report or its detail was on: its bits follow it closely
    for number, line in enumerate(text.splitlines(), start=1):
        if "PCIe Bus Error" in line:
            match = _REPORT.search(line)
            severity = _severity(match["severity"]) if match is not None else None
            if match is not None and severity is not None:
                reports.append(_report(match, severity, number))
                near = number
            continue
        if reports and number - near <= _DETAIL_LINES:
            current = reports[-1]
            if "error status/mask" in line and (match := _DEVICE.search(line)) is not None:
                if _same(current, match):
                    reports[-1] = replace(current, ids=match["ids"].lower(), status=match["status"])
                    near = number
                continue
            if (match := _BIT.search(line)) is not None and _same(current, match):
                first = match["name"] if match["first"] else current.first
                reports[-1] = replace(current, errors=(*current.errors, match["name"]), first=first)
                near = number
                continue
        if "AER: " not in line:
            continue
        if (match := _CANNOT_RECOVER.search(line)) is not None:
            cannot[match["bdf"].lower()] = match["driver"]
        elif (match := _RECOVERY_FAILED.search(line)) is not None:
            failed[match["bdf"].lower()] = None
    gpus = tuple(bus for bus, driver in cannot.items() if driver == "nvidia")
    return AerFacts(tuple(reports), _devices(reports), tuple(cannot), gpus, tuple(failed))


def _report(match: re.Match[str], severity: Severity, number: int) -> AerReport:
    return AerReport(
        bus_id=match["bdf"].lower(),
        driver=match["driver"],
        severity=severity,
        layer=match["layer"].strip(),
        agent=match["agent"].strip(),
        line=number,
    )


def _same(report: AerReport, match: re.Match[str]) -> bool:
    """A detail line belongs to the report before it when it names the same device."""
    return match["bdf"].lower() == report.bus_id


NVIDIA_VENDOR = "10de"


def _devices(reports: list[AerReport]) -> dict[str, DeviceErrors]:
    counts: dict[str, dict[Severity, int]] = {}
    names: dict[str, dict[str, None]] = {}
    first: dict[str, AerReport] = {}
    ids: dict[str, str] = {}
    for report in reports:
        seen = counts.setdefault(report.bus_id, dict.fromkeys(Severity, 0))
        seen[report.severity] += 1
        names.setdefault(report.bus_id, {}).update(dict.fromkeys(report.errors))
        first.setdefault(report.bus_id, report)
        if report.ids is not None:
            ids.setdefault(report.bus_id, report.ids)
    return {
        bus: DeviceErrors(
            driver=first[bus].driver,
            ids=ids.get(bus),
            gpu=first[bus].driver == "nvidia" or ids.get(bus, "").startswith(NVIDIA_VENDOR + ":"),
            corrected=seen[Severity.CORRECTED],
            uncorrected_nonfatal=seen[Severity.NONFATAL],
            uncorrected_fatal=seen[Severity.FATAL],
            errors=tuple(names[bus]),
        )
        for bus, seen in counts.items()
    }
