"""What each node showed and what was tried on it in this run, kept from the events, and the
RMA verdict: a drain fleetfix made whose Slurm reason says the node needs RMA.

Per event this keeps references to data the run already holds (parsed probe facts, the text
`collect_evidence` kept); parsing that text and writing a ticket happens only for a node that
needs RMA.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetfix.errors import ProbeParseError
from fleetfix.events import ActionStarted, ActionTaken, CommandRan
from fleetfix.knowledge import remedy
from fleetfix.notify.model import EVIDENCE_CHARS, Attempt, Gpu, Rma, XidSeen
from fleetfix.probes import nvidia_smi, slurm_node, xid
from fleetfix.probes.base import Probe, verdict
from fleetfix.report.text import clean
from fleetfix.results import CommandResult, Status, StepResult

Facts = Mapping[str, Any]

RMA_MARK = "RMA"
DRAIN = "slurm_drain"
COLLECT = "collect_evidence"
KEEP = 4
"""Reads kept per node and kind: the first ones show the fault, the last ones what is left."""
MESSAGE_CHARS = 300
XID_LINES = 10

# A GPU's board serial as the driver logs it next to its UUID (before an Xid 79, 48, ...):
#   NVRM: GPU at PCI:0000:1b:00: GPU-20912934-ab21-f47d-9001-e7ec46fac30a
#   NVRM: GPU Board Serial Number: 1652133664289
_BOARD_SERIAL = re.compile(
    r"NVRM: GPU at PCI:\S+ (?P<uuid>GPU-[0-9a-fA-F-]{36})\b.*\n"
    r".*NVRM: GPU Board Serial Number: (?P<serial>[0-9A-Za-z]+)"
)


@dataclass(slots=True)
class _Attempt:
    action: str
    step: str
    at: float
    outcome: str = "no outcome"
    message: str = ""


@dataclass(slots=True)
class _Acting:
    """An action step under way on a host: its latest action, where its attempts begin, and
    the command its gates ran last before the first intent (a drain's: the Slurm read)."""

    action: str
    first: int
    before: CommandResult | None


@dataclass(slots=True)
class NodeEvidence:
    """One node's parsed readings (plain probe data) and attempts, in run order."""

    smi: deque[Facts] = field(default_factory=lambda: deque(maxlen=KEEP))
    xid: deque[Facts] = field(default_factory=lambda: deque(maxlen=KEEP))
    kernel_logs: deque[str] = field(default_factory=lambda: deque(maxlen=KEEP))
    """The kernel log text of reads that found Xids (for the GPUs' board serials)."""
    kept: deque[str] = field(default_factory=lambda: deque(maxlen=KEEP))
    """What `collect_evidence` kept (kernel log excerpt, nvidia-smi -q), parsed for a ticket."""
    attempts: list[_Attempt] = field(default_factory=list)


class EvidenceTracker:
    """Follows the run's steps and actions per node; writes an RMA ticket on demand."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeEvidence] = {}
        self._acting: dict[tuple[str, str], _Acting] = {}
        self._last: dict[str, tuple[str, CommandResult]] = {}

    def command_ran(self, event: CommandRan) -> None:
        """Remember each host's latest command (one reference: this runs for every command)."""
        if not event.planned_only:
            self._last[event.host] = (event.step, event.result)

    def action_started(self, event: ActionStarted) -> None:
        node = self._node(event.host)
        key = (event.host, event.step)
        acting = self._acting.get(key)
        if acting is None:
            before = self._latest(event.host, event.step)
            acting = self._acting[key] = _Acting(event.action, len(node.attempts), before)
        acting.action = event.action  # an escalation rung: the step's latest action
        node.attempts.append(_Attempt(event.action, event.step, event.at))

    def action_taken(self, event: ActionTaken) -> None:
        node = self._nodes.get(event.host)
        for attempt in reversed(node.attempts if node is not None else []):
            if attempt.action == event.action and attempt.step == event.step:
                attempt.outcome = "failed" if event.failed else "ok"
                return

    def step_finished(self, result: StepResult) -> str | None:
        """Keep what the step read; the drain reason if it drained the node for RMA."""
        facts = result.data.get("facts")
        if isinstance(facts, Mapping):
            self._keep_facts(result, facts)
        acting = self._acting.pop((result.host, result.step), None)
        if acting is None:
            return None
        node = self._node(result.host)
        _settle(node.attempts[acting.first :], result)
        if acting.action == COLLECT:
            node.kept.extend(c.stdout for c in result.commands if c.stdout)
        after = self._latest(result.host, result.step)
        if acting.action == DRAIN and result.status in (Status.OK, Status.CHANGED) and after:
            return rma_reason(acting.before, after)
        return None

    def _latest(self, host: str, step: str) -> CommandResult | None:
        last = self._last.get(host)
        return last[1] if last is not None and last[0] == step else None

    def rma(self, host: str, reason: str) -> Rma:
        """The ticket for `host`: its GPUs, Xids, what was tried, an evidence excerpt."""
        node = self._nodes.get(host) or NodeEvidence()
        smi, xids, logs = list(node.smi), list(node.xid), list(node.kernel_logs)
        for text in node.kept:
            smi.extend(_parsed(nvidia_smi.PROBE, text))
            found = _parsed(xid.PROBE, text)
            if found:
                xids.extend(found)
                logs.append(text)
        events = _xid_events(xids)
        tried = tuple(Attempt(a.action, a.step, a.outcome, a.at, a.message) for a in node.attempts)
        return Rma(
            node=host,
            reason=reason,
            gpus=gpu_list(smi, events, board_serials(logs)),
            xids=xids_seen(events),
            tried=tried,
            evidence=evidence_text(reason, events, list(node.smi) or smi, tried),
        )

    def _node(self, host: str) -> NodeEvidence:
        node = self._nodes.get(host)
        if node is None:
            node = self._nodes[host] = NodeEvidence()
        return node

    def _keep_facts(self, result: StepResult, facts: Facts) -> None:
        # Registered data does not name its probe; these keys are each probe's own.
        if "lost_gpus" in facts and "gpus" in facts:
            self._node(result.host).smi.append(facts)
        elif "sxid_events" in facts and facts.get("events"):
            node = self._node(result.host)
            node.xid.append(facts)
            node.kernel_logs.extend(c.stdout for c in result.commands[-1:])


def _settle(attempts: list[_Attempt], result: StepResult) -> None:
    """Each rung of the step's escalation ladder ended as the engine judged it (verification
    included): match the ladder to the step's attempts in order, by action. A rung that sent
    nothing (held, refused) has no attempt and is skipped."""
    ladder = result.data.get("ladder")
    if not isinstance(ladder, list):
        return
    rungs = iter(r for r in ladder if isinstance(r, Mapping))
    for attempt in (a for a in attempts if a.step == result.step):
        for rung in rungs:
            if rung.get("action") == attempt.action:
                attempt.outcome = "failed" if rung.get("failed") else "ok"
                if rung.get("failed"):
                    attempt.message = clean(str(rung.get("msg") or ""))[:MESSAGE_CHARS]
                break


def rma_reason(before: CommandResult | None, after: CommandResult) -> str | None:
    """The drain reason when the drain's verification read of Slurm (its last command) says
    `fleetfix: ... RMA candidate` (or `needs RMA`) and the read its gates made before it did not
    say the same:
    a verdict of this run, not a past one read again."""
    if RMA_MARK not in after.stdout:
        return None
    reason = _reason(after.stdout)
    if reason is None or not remedy.is_rma_reason(reason):
        return None
    return None if before is not None and _reason(before.stdout) == reason else reason


def _reason(text: str) -> str | None:
    try:
        facts = slurm_node.PROBE.read(text)
    except ProbeParseError:
        return None
    return facts.reason if facts.reason_is_fleetfix else None


def _parsed(probe: Probe[Any], text: str) -> list[Facts]:
    """The probe's plain data for `text`, or nothing when `text` is not that tool's output."""
    parsed = verdict(probe, text)
    return [parsed.data] if parsed.error is None and isinstance(parsed.data, Mapping) else []


def _xid_events(reads: Iterable[Facts]) -> list[Facts]:
    """Every Xid of every read once (a later read of the same log repeats the earlier ones)."""
    seen: dict[tuple[Any, ...], Facts] = {}
    for facts in reads:
        for event in facts.get("events") or ():
            key = (
                event.get("code"),
                event.get("bus_id"),
                event.get("timestamp"),
                event.get("message"),
            )
            seen.setdefault(key, event)
    return list(seen.values())


def board_serials(kernel_logs: Iterable[str]) -> dict[str, str]:
    """GPU UUID -> board serial, from the lines the driver logs before an Xid."""
    return {
        found["uuid"].lower(): found["serial"]
        for text in kernel_logs
        for found in _BOARD_SERIAL.finditer(text)
    }


def gpu_list(
    smi_reads: Sequence[Facts], events: Sequence[Facts], serials: Mapping[str, str]
) -> tuple[Gpu, ...]:
    """The node's GPUs from every nvidia-smi read and every Xid, one entry per bus id."""
    entries: dict[str, dict[str, Any]] = {}
    listed: set[str] = set()
    lost: set[str] = set()
    for facts in smi_reads:
        for gpu in facts.get("gpus") or ():
            key = gpu.get("bus_id") or gpu.get("uuid")
            if key:
                listed.add(key)
                _fill(entries.setdefault(key, {"xids": []}), gpu)
        lost.update(g.get("bus_id") for g in facts.get("lost_gpus") or () if g.get("bus_id"))
    for event in events:
        key = event.get("bus_id") or event.get("uuid")
        if key:
            entry = entries.setdefault(key, {"xids": []})
            _fill(entry, {"bus_id": event.get("bus_id"), "uuid": event.get("uuid")})
            if event.get("code") not in entry["xids"]:
                entry["xids"].append(event.get("code"))
    gpus = [
        _gpu(key, entry, serials, lost=key in lost or bool(listed and key not in listed))
        for key, entry in entries.items()
    ]
    return tuple(sorted(gpus, key=lambda g: (g.index is None, g.index or 0, g.bus_id or "")))


def _fill(entry: dict[str, Any], gpu: Facts) -> None:
    for name in ("index", "bus_id", "uuid", "serial", "name"):
        if entry.get(name) is None and gpu.get(name) is not None:
            entry[name] = gpu[name]


def _gpu(key: str, entry: Mapping[str, Any], serials: Mapping[str, str], *, lost: bool) -> Gpu:
    uuid = entry.get("uuid")
    serial = entry.get("serial") or (serials.get(uuid.lower()) if uuid else None)
    return Gpu(
        index=entry.get("index"),
        bus_id=entry.get("bus_id"),
        uuid=uuid,
        serial=serial,
        name=entry.get("name"),
        xids=tuple(sorted(c for c in entry["xids"] if isinstance(c, int))),
        lost=lost,
    )


def xids_seen(events: Sequence[Facts]) -> tuple[XidSeen, ...]:
    by_code: dict[int, list[Facts]] = {}
    for event in events:
        if isinstance(event.get("code"), int):
            by_code.setdefault(event["code"], []).append(event)
    return tuple(
        XidSeen(
            code=code,
            count=len(found),
            mnemonic=found[-1].get("mnemonic"),
            gpus=tuple(sorted({e["bus_id"] for e in found if e.get("bus_id")})),
            last_seen=found[-1].get("timestamp"),
        )
        for code, found in sorted(by_code.items())
    )


def evidence_text(
    reason: str, events: Sequence[Facts], smi_reads: Sequence[Facts], tried: Sequence[Attempt]
) -> str:
    """A short account for the ticket, written from parsed facts, at most EVIDENCE_CHARS."""
    lines = [f"Slurm drain reason: {reason}"]
    lines += [_xid_line(event) for event in events[-XID_LINES:]]
    if len(events) > XID_LINES:
        lines.insert(1, f"({len(events) - XID_LINES} earlier Xid events not shown)")
    if smi_reads:
        lines += _smi_lines(smi_reads[-1])
    lines += [f"{a.step}: {a.outcome}: {a.message}" for a in tried if a.message]
    return bounded(clean("\n".join(lines)), EVIDENCE_CHARS)


def _xid_line(event: Facts) -> str:
    where = event.get("bus_id") or event.get("pci") or "unknown GPU"
    uuid = f" ({event['uuid']})" if event.get("uuid") else ""
    when = f" at {event['timestamp']}" if event.get("timestamp") else ""
    name = f" {event['mnemonic']}" if event.get("mnemonic") else ""
    message = str(event.get("message") or "")[:MESSAGE_CHARS]
    return f"Xid {event.get('code')}{name} on {where}{uuid}{when}: {message}"


def _smi_lines(facts: Facts) -> list[str]:
    expected = facts.get("expected_gpus")
    count = f"nvidia-smi: {facts.get('gpu_count')} GPUs visible"
    lines = [count + (f" ({expected} expected)" if expected is not None else "")]
    lines += [
        f"nvidia-smi could not open {g.get('bus_id') or 'a GPU'}: {g.get('message')}"
        for g in facts.get("lost_gpus") or ()
    ]
    lines += [f"nvidia-smi: {error}" for error in list(facts.get("errors") or ())[:5]]
    need = remedy.decide(facts)
    if need.remedy in (remedy.Remedy.RMA, remedy.Remedy.FIELD_DIAG):
        lines.append(
            f"fleetfix's verdict from nvidia-smi: {need.remedy.word}: {'; '.join(need.why)}"
        )
    return lines


def bounded(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, saying so."""
    if len(text) <= limit:
        return text
    marker = "\n... [cut]"
    return text[: limit - len(marker)] + marker
