"""The `ib` probe: InfiniBand/RoCE HCA ports from `ibstat` (or `ibstatus`, or `ibv_devinfo`).

Three real formats are read, detected from their first record line:

* `ibstat`: `CA 'mlx5_0'` blocks with `Key: value` lines and `Port N:` sub-blocks;
* `ibstatus`: `Infiniband device 'mlx5_0' port 1 status:` blocks (`state: 4: ACTIVE`);
* `ibv_devinfo`: `hca_id: mlx5_0` blocks (no rate nor physical state: those stay None).

Noise that real runs and pastes carry is skipped: `ibwarn:` lines, shell prompts and `+ ibstat`
traces, a poster's `...` elisions; `...` as a value is a redaction and reads as None.
`ibpanic:` lines (ibstat gave up on a device, exit 255) are kept as `errors` and the device they
name goes to `failed_cas`. Output that names no CA at all is refused, even a lone ibpanic: no
data must never look like "no port down".

Truncation: a port is complete when its last field (`Link layer`) was printed; a CA when it
printed its port count (ibstat and ibv_devinfo print it before anything that can be cut) and shows
that many complete ports. A last line cut mid-key or mid-value (no final newline, not readable, or
a key with no value) is the cut itself, not garbage: it is dropped and the output is `truncated`.
`complete` is False when anything is truncated or after an ibpanic; what was read is kept (a
`Down` port seen before the cut still matters).

A node without ibstat and ibstatus (no InfiniBand there) is ToolNotInstalled, from the command's
marker or a shell's "command not found"; not a fault of the node.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import Probe
from fleetfix.probes.not_installed import MARKER, missing_tool
from fleetfix.probes.text import clean_lines

NAME = "ib"
TOOL = "ibstat"


class PortState(StrEnum):
    """Logical port state, as ibstat spells it."""

    DOWN = "Down"
    INITIALIZING = "Initializing"
    ARMED = "Armed"
    ACTIVE = "Active"


class PhysicalState(StrEnum):
    """Physical link state, as ibstat spells it."""

    SLEEP = "Sleep"
    POLLING = "Polling"
    DISABLED = "Disabled"
    TRAINING = "PortConfigurationTraining"
    LINK_UP = "LinkUp"
    ERROR_RECOVERY = "LinkErrorRecovery"
    PHY_TEST = "PhyTest"


class LinkLayer(StrEnum):
    """What the port speaks: native InfiniBand or Ethernet (RoCE)."""

    INFINIBAND = "InfiniBand"
    ETHERNET = "Ethernet"


class Source(StrEnum):
    """Which tool printed the parsed text."""

    IBSTAT = "ibstat"
    IBSTATUS = "ibstatus"
    IBV_DEVINFO = "ibv_devinfo"


@dataclass(frozen=True, slots=True)
class Port:
    """One HCA port. None means the tool did not print the value (or it was redacted)."""

    number: int
    state: PortState | None = None
    physical_state: PhysicalState | None = None
    rate_gbps: float | None = None
    link_layer: LinkLayer | None = None
    base_lid: int | None = None
    sm_lid: int | None = None
    lmc: int | None = None
    port_guid: str | None = None
    capability_mask: str | None = None
    complete: bool = False
    """False when the output stops before the port's last field."""


@dataclass(frozen=True, slots=True)
class Ca:
    """One channel adapter (HCA) and its ports."""

    name: str
    ca_type: str | None = None
    firmware: str | None = None
    hardware_version: str | None = None
    node_guid: str | None = None
    system_image_guid: str | None = None
    port_count: int | None = None
    """Ports the CA announced (`Number of ports`); may exceed len(ports) in a cut-off output."""
    ports: tuple[Port, ...] = ()
    complete: bool = False
    """False when the output stops inside this CA's record (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class PortRef:
    """A port named in a summary list, with the values a runbook filters on."""

    ca: str
    port: int
    state: PortState | None
    physical_state: PhysicalState | None
    link_layer: LinkLayer | None


@dataclass(frozen=True, slots=True)
class IbFacts:
    """Every CA and port the tool printed, plus the summaries runbooks gate on."""

    source: Source
    cas: tuple[Ca, ...]
    ports_down: tuple[PortRef, ...]
    """Every port whose logical state is not Active (Down, Initializing, Armed, unknown)."""
    active_count: int
    port_count: int
    failed_cas: tuple[str, ...]
    """Devices ibstat could not read (named by an `ibpanic:` line)."""
    errors: tuple[str, ...]
    truncated: bool
    """The output stops inside a record: its last CA or port is incomplete, or its last line
    was cut."""
    complete: bool


def command(params: Mapping[str, Any]) -> str:
    """`ibstat` (stderr kept: an ibpanic line is evidence), else `ibstatus` when ibstat is absent,
    else the not-installed marker (exit 0).

    `ibstat || ibstatus` would glue a full ibstatus listing after a partial ibstat that
    panicked (exit 255); choosing the tool up front keeps one format per output.
    """
    ca = str(params.get("ca", "")).strip()
    target = f" {shlex.quote(ca)}" if ca else ""
    return (
        f"if command -v ibstat >/dev/null 2>&1; then ibstat{target} 2>&1; "
        f"elif command -v ibstatus >/dev/null 2>&1; then ibstatus{target} 2>&1; "
        f"else echo {shlex.quote(MARKER + TOOL)}; fi"
    )


def parse(text: str) -> IbFacts:
    """Parse ibstat, ibstatus or ibv_devinfo output (auto-detected) into IbFacts.

    Raises:
        ToolNotInstalled: the node has neither ibstat nor ibstatus (nor ibv_devinfo, when that
            was run).
        ProbeParseError: the text is not one of those outputs, or names no CA.
    """
    lines = _clean(text)
    source = _detect(lines, text)
    cut_line = lines[-1][0] if lines and not text.endswith(("\n", "\r")) else None
    builder = _Builder(text, cut_line)
    for number, line in lines:
        builder.feed(source, number, line)
    return builder.facts(source)


PROBE: Probe[IbFacts] = Probe(
    name=NAME,
    summary="InfiniBand/RoCE HCA ports: state, physical state, rate, link layer (ibstat)",
    command=command,
    parse=parse,
    params={"ca": "only this CA (e.g. mlx5_0); default: all"},
)


# --- line cleaning and format detection -------------------------------------------------

_PROMPT = re.compile(
    r"^(?:.{0,80}?[$#>]\s*|\+\s+)?(?:sudo\s+)?(?:\S*/)?(?:ibstat|ibstatus|ibv_devinfo)\b"
)
# ibwarn debug lines, a poster's `...`/`[...]` elisions and `# comments`: never ibstat data.
_NOISE = re.compile(r"^(?:ibwarn:|\.\.\.$|\[\.\.\.\]$|#)")
_CA_IBSTAT = re.compile(r"^CA '([^']+)'$")
_CA_IBSTATUS = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:$")
_CA_DEVINFO = re.compile(r"^hca_id:\s*(\S+)$")
_PANIC_DEVICE = re.compile(r"IB device '([^']+)'")
_KEY_VALUE = re.compile(r"^([A-Za-z_][A-Za-z _]*?):\s*(.*)$")


def _clean(text: str) -> list[tuple[int, str]]:
    """Numbered, stripped content lines without paste artefacts, tool prompts or ibwarn noise."""
    kept = []
    for line in clean_lines(text):
        stripped = line.text.strip()
        if stripped and not _NOISE.match(stripped) and not _PROMPT.match(stripped):
            kept.append((line.number, stripped))
    return kept


def _detect(lines: list[tuple[int, str]], text: str) -> Source:
    """The tool that printed `lines`, from the first record header; refuses anything else."""
    for _, line in lines:
        if _CA_IBSTAT.match(line):
            return Source.IBSTAT
        if _CA_IBSTATUS.match(line):
            return Source.IBSTATUS
        if _CA_DEVINFO.match(line):
            return Source.IBV_DEVINFO
    missing = missing_tool(text, (TOOL, "ibstatus", "ibv_devinfo"))
    if missing is not None:
        # The old command ran ibstatus only once ibstat was found missing.
        raise ToolNotInstalled(NAME, TOOL if missing == "ibstatus" else missing, text)
    panics = [line for _, line in lines if line.startswith("ibpanic:")]
    if panics:
        raise ProbeParseError(NAME, f"ibstat failed before printing any CA ({panics[0]})", text)
    if not text.strip():
        raise ProbeParseError(NAME, "empty output (no CA listed)", text)
    raise ProbeParseError(NAME, "not ibstat/ibstatus/ibv_devinfo output: no CA found", text)


# --- value conversion ----------------------------------------------------------------------

_STATE_WORDS = {
    "down": PortState.DOWN,
    "port_down": PortState.DOWN,
    "initializing": PortState.INITIALIZING,
    "init": PortState.INITIALIZING,
    "port_init": PortState.INITIALIZING,
    "armed": PortState.ARMED,
    "port_armed": PortState.ARMED,
    "active": PortState.ACTIVE,
    "port_active": PortState.ACTIVE,
}
_PHYS_WORDS = {member.value.lower(): member for member in PhysicalState} | {
    "link up": PhysicalState.LINK_UP,
    "disabled": PhysicalState.DISABLED,
}


def _missing(value: str) -> bool:
    """An empty value or a redaction (`...`) is not data."""
    return value in ("", "...", "N/A")


def _state_word(value: str) -> str:
    """`4: ACTIVE` (ibstatus), `PORT_ACTIVE (4)` (ibv_devinfo) or `Active` -> `active`."""
    word = re.sub(r"^\d+:\s*|\s*\(\d+\)$", "", value.strip())
    return word.lower()


def _port_state(value: str, line: int, text: str) -> PortState | None:
    if _missing(value):
        return None
    state = _STATE_WORDS.get(_state_word(value))
    if state is None:
        raise ProbeParseError(NAME, f"unknown port state {value!r}", text, line=line)
    return state


def _physical_state(value: str, line: int, text: str) -> PhysicalState | None:
    if _missing(value):
        return None
    state = _PHYS_WORDS.get(_state_word(value))
    if state is None:
        raise ProbeParseError(NAME, f"unknown physical state {value!r}", text, line=line)
    return state


def _link_layer(value: str, line: int, text: str) -> LinkLayer | None:
    if _missing(value):
        return None
    for layer in LinkLayer:
        if value.lower() == layer.value.lower():
            return layer
    raise ProbeParseError(NAME, f"unknown link layer {value!r}", text, line=line)


def _number(value: str, line: int, text: str) -> int | None:
    """A decimal (ibstat) or hex `0x..` (ibstatus, ibv_devinfo) integer; None when missing."""
    if _missing(value):
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError as exc:
        raise ProbeParseError(NAME, f"not a number: {value!r}", text, line=line) from exc


def _rate(value: str, line: int, text: str) -> float | None:
    """`200` (ibstat) or `400 Gb/sec (4X NDR)` (ibstatus) -> 200.0 / 400.0 Gb/s."""
    if _missing(value):
        return None
    match = re.match(r"^(\d+(?:\.\d+)?)", value)
    if match is None:
        raise ProbeParseError(NAME, f"not a rate: {value!r}", text, line=line)
    return float(match.group(1))


def _text(value: str) -> str | None:
    return None if _missing(value) else value


# --- the record builder ----------------------------------------------------------------

_CA_FIELDS = {
    # ibstat
    "ca type": "ca_type",
    "firmware version": "firmware",
    "hardware version": "hardware_version",
    "node guid": "node_guid",
    "system image guid": "system_image_guid",
    "number of ports": "port_count",
    # ibv_devinfo
    "fw_ver": "firmware",
    "hw_ver": "hardware_version",
    "node_guid": "node_guid",
    "sys_image_guid": "system_image_guid",
    "phys_port_cnt": "port_count",
    "vendor_part_id": "ca_type",
}
_PORT_FIELDS = {
    "state": "state",
    "physical state": "physical_state",
    "phys state": "physical_state",
    "rate": "rate_gbps",
    "base lid": "base_lid",
    "port_lid": "base_lid",
    "sm lid": "sm_lid",
    "sm_lid": "sm_lid",
    "lmc": "lmc",
    "port_lmc": "lmc",
    "capability mask": "capability_mask",
    "port guid": "port_guid",
    "link layer": "link_layer",
    "link_layer": "link_layer",
}


@dataclass(slots=True)
class _PortDraft:
    number: int
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _CaDraft:
    name: str
    values: dict[str, Any] = field(default_factory=dict)
    ports: list[_PortDraft] = field(default_factory=list)


class _Builder:
    """Accumulates CAs and ports line by line; `facts()` freezes the result."""

    def __init__(self, text: str, cut_line: int | None) -> None:
        self.text = text
        self.cut_line = cut_line
        """The last line's number when the text does not end with a newline: it may be cut."""
        self.cut = False
        self.cas: list[_CaDraft] = []
        self.port: _PortDraft | None = None
        self.errors: list[str] = []
        self.failed: list[str] = []

    def feed(self, source: Source, number: int, line: str) -> None:
        try:
            self._feed(source, number, line)
        except ProbeParseError:
            if number != self.cut_line:
                raise
            self.cut = True  # `State: Acti`, `Port`: the output stops inside this line

    def _feed(self, source: Source, number: int, line: str) -> None:
        if line.startswith("ibpanic:"):
            self._panic(line)
        elif source is Source.IBSTATUS and (match := _CA_IBSTATUS.match(line)):
            self._start_ca(match.group(1), reuse=True)
            self._start_port(match.group(2), number)
        elif match := (_CA_IBSTAT.match(line) or _CA_DEVINFO.match(line)):
            self._start_ca(match.group(1), reuse=False)
        elif match := re.match(r"^(?:Port (\d+):|port:\s*(\d+))$", line):
            self._start_port(match.group(1) or match.group(2), number)
        else:
            self._field(number, line)

    def _panic(self, line: str) -> None:
        self.errors.append(line)
        match = _PANIC_DEVICE.search(line)
        if match:
            self.failed.append(match.group(1))
        self.port = None

    def _start_ca(self, name: str, *, reuse: bool) -> None:
        # ibstatus prints one block per port: later ports of a CA extend the same CA.
        if reuse and self.cas and self.cas[-1].name == name:
            return
        self.cas.append(_CaDraft(name))
        self.port = None

    def _start_port(self, number: str, line: int) -> None:
        if not self.cas:
            raise ProbeParseError(NAME, "port listed before any CA", self.text, line=line)
        self.port = _PortDraft(int(number))
        self.cas[-1].ports.append(self.port)

    def _field(self, number: int, line: str) -> None:
        match = _KEY_VALUE.match(line)
        if match is None or not self.cas:
            raise ProbeParseError(NAME, "unexpected line", self.text, line=number)
        key, value = match.group(1).strip().lower(), match.group(2).strip()
        if not value and number == self.cut_line:
            self.cut = True  # `Link layer:` and nothing after: the value was cut off
            return
        if key in _PORT_FIELDS:
            if self.port is None:
                raise ProbeParseError(NAME, f"{key!r} outside a port block", self.text, line=number)
            self.port.values[_PORT_FIELDS[key]] = _port_value(key, value, number, self.text)
        elif key in _CA_FIELDS:
            self.cas[-1].values[_CA_FIELDS[key]] = _ca_value(key, value, number, self.text)
        # Any other `Key: value` line is tolerated: the tools print fields fleetfix does not
        # expose (ibv_devinfo's transport, MTUs...) and newer versions add some.

    def facts(self, source: Source) -> IbFacts:
        cas = tuple(_freeze_ca(draft, source) for draft in self.cas)
        ports = [(ca, port) for ca in cas for port in ca.ports]
        down = tuple(
            PortRef(ca.name, port.number, port.state, port.physical_state, port.link_layer)
            for ca, port in ports
            if port.state is not PortState.ACTIVE
        )
        truncated = self.cut or (bool(cas) and not cas[-1].complete)
        complete = not self.errors and not truncated and all(ca.complete for ca in cas)
        return IbFacts(
            source=source,
            cas=cas,
            ports_down=down,
            active_count=sum(port.state is PortState.ACTIVE for _, port in ports),
            port_count=len(ports),
            failed_cas=tuple(self.failed),
            errors=tuple(self.errors),
            truncated=truncated,
            complete=complete,
        )


def _port_value(key: str, value: str, line: int, text: str) -> Any:
    target = _PORT_FIELDS[key]
    if target == "state":
        return _port_state(value, line, text)
    if target == "physical_state":
        return _physical_state(value, line, text)
    if target == "link_layer":
        return _link_layer(value, line, text)
    if target == "rate_gbps":
        return _rate(value, line, text)
    if target in ("base_lid", "sm_lid", "lmc"):
        return _number(value, line, text)
    return _text(value)


def _ca_value(key: str, value: str, line: int, text: str) -> Any:
    target = _CA_FIELDS[key]
    if target == "port_count":
        return _number(value, line, text)
    if key == "vendor_part_id" and value.isdigit():
        return f"MT{value}"  # ibv_devinfo prints 4129 where ibstat prints MT4129
    if re.fullmatch(r"[0-9a-f]{4}(?::[0-9a-f]{4}){3}", value):
        return "0x" + value.replace(":", "")  # ibv_devinfo's a088:c203:... as ibstat's 0x...
    return _text(value)


def _freeze_ca(draft: _CaDraft, source: Source) -> Ca:
    ports = tuple(
        Port(number=p.number, complete="link_layer" in p.values, **p.values) for p in draft.ports
    )
    return Ca(
        name=draft.name, ports=ports, complete=_ca_complete(draft, ports, source), **draft.values
    )


def _ca_complete(draft: _CaDraft, ports: tuple[Port, ...], source: Source) -> bool:
    if source is not Source.IBSTATUS and "port_count" not in draft.values:
        return False  # ibstat and ibv_devinfo print the port count early: the record was cut
    announced = draft.values.get("port_count")
    expected = announced if announced is not None else len(ports)
    return len(ports) >= expected and all(port.complete for port in ports)
