"""The `slurm_node` probe: one node's Slurm state, drain reason, allocation and reservation.

Reads `scontrol show node NAME` (the multi-line form, and the `-o` one-line form) and, as the
fallback, an `sinfo` table with a header line (`sinfo -N -n NAME -o '%N|%P|%T|...'`, or any
default sinfo layout: columns are found by their titles, `|`-separated or aligned).

The facts describe exactly one node: a runbook's `when:` on drain state must never blur two
nodes together. An sinfo partition summary that covers several nodes (`drain compute[001-003]`)
is therefore refused with the node count; so are sinfo outputs without a header (the columns
would be guesses), `sinfo -s`/count summaries and `Node X not found`.

State words follow Slurm (slurm_node_state): `drained` means DRAIN is set and nothing runs any
more (DRAINED in sinfo's words); `draining` means DRAIN is set while jobs still hold the node,
including `IDLE+COMPLETING+DRAIN` (an epilog still runs: Slurm itself calls that DRAINING).
A node in a reservation shows RESERVED (and MAINTENANCE for a MAINT one); scontrol names the
reservation (`ReservationName=`, Slurm >= 23.02), and one whose name starts with `fleetfix-`
is fleetfix's own (`reserved_by: fleetfix`).

When scontrol fails, the command prints each tool's answer after a `### fleetfix <tool> rc=N`
marker, so a failure is read as one: both tools failing is a ProbeParseError that says why
(controller unreachable, node unknown, their words), never facts that look idle. Both not
found (exit 127) is ToolNotInstalled: a node outside Slurm, not a fault of the node; its message
says how to mark such a host (`fleetfix_slurm: false`).

Reading the records is slurm_node_records' job, decoding state words slurm_node_state's; their
public names are importable from here too.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import Probe
from fleetfix.probes.not_installed import missing_tool
from fleetfix.probes.slurm_node_records import (
    MAX_HOSTLIST_NAMES,
    NAME,
    NOT_FOUND,
    NodeFields,
    Source,
    clean,
    expand_hostlist,
    read_scontrol,
    read_sinfo,
    sinfo_columns,
)
from fleetfix.probes.slurm_node_state import NodeState, decode_state

__all__ = [
    "FLEETFIX_REASON_PREFIX",
    "FLEETFIX_RESERVATION_PREFIX",
    "FLEETFIX_RUN_TAG",
    "MAX_HOSTLIST_NAMES",
    "NAME",
    "PROBE",
    "SINFO_FORMAT",
    "TOOL",
    "NodeState",
    "SlurmNodeFacts",
    "SlurmNotInstalled",
    "Source",
    "command",
    "decode_state",
    "expand_hostlist",
    "parse",
]

TOOL = "slurm"
FLEETFIX_REASON_PREFIX = "fleetfix:"
FLEETFIX_RESERVATION_PREFIX = "fleetfix-"
FLEETFIX_RUN_TAG = re.compile(r"\(run ([A-Za-z0-9._:@-]+)\)")
"""How a fleetfix drain reason names the run that set it: `(run 20260101-120000-3f2a9c)`."""
"""Reservations fleetfix creates are named `fleetfix-<node>` (actions/slurm.py)."""
SINFO_FORMAT = "%N|%P|%T|%C|%G|%u|%H|%E"
"""The fallback's sinfo format: node, partition, long state, CPUs A/I/O/T, GRES, reason
user, reason time, reason (last, so a reason may contain anything)."""


@dataclass(frozen=True, slots=True)
class SlurmNodeFacts:
    """One node as Slurm sees it, with the booleans drain/resume runbooks gate on."""

    source: Source
    name: str
    state: str
    """The state exactly as printed, e.g. `IDLE+DRAIN`, `drng@`."""
    base_state: str | None
    """IDLE, ALLOCATED, MIXED, DOWN, ERROR, FUTURE, UNKNOWN; None when sinfo's word hides it."""
    flags: tuple[str, ...]
    drained: bool
    """DRAIN set and no job left: not allocated, not COMPLETING (no epilog still running)."""
    draining: bool
    allocated: bool
    has_jobs: bool
    """Allocated, or COMPLETING: some job still holds the node."""
    completing: bool
    """A job's epilog still runs (COMPLETING)."""
    down: bool
    not_responding: bool
    reason: str | None
    reason_user: str | None
    reason_time: str | None
    reason_is_fleetfix: bool
    fleetfix_run: str | None
    """The run a fleetfix drain reason names (`... (run ID)`), None when it names none."""
    reserved: bool
    """An active reservation holds the node (RESERVED, MAINTENANCE, or a reservation name)."""
    maint: bool
    """The reservation is a maintenance one (MAINTENANCE; sinfo `maint` or a `$` mark)."""
    reservation: str | None
    """The reservation's name, when scontrol printed it (ReservationName=, Slurm >= 23.02)."""
    reserved_by: str | None
    """`fleetfix` (a `fleetfix-` reservation), `someone else`, `unknown` (reserved, but the
    output does not name the reservation), or None when no reservation holds the node."""
    reservation_is_fleetfix: bool
    cpus_alloc: int | None
    cpus_idle: int | None
    """CPUs not allocated to any job (total minus allocated)."""
    cpus_total: int | None
    gres: str | None
    gpus_total: int | None
    gpus_alloc: int | None
    partitions: tuple[str, ...]
    boot_time: str | None
    slurm_version: str | None


def command(params: Mapping[str, Any]) -> str:
    """`scontrol show node NODE`, falling back to a one-node `sinfo -N` table; when scontrol
    fails, both tools' answers (stderr included) follow `### fleetfix <tool> rc=N` markers and
    the command exits with sinfo's status."""
    node = str(params.get("node", "")).strip()
    target = shlex.quote(node) if node else "$(hostname -s)"
    return (
        f'node={target}; d=$(mktemp -d) || exit 1; scontrol show node "$node" >"$d/o" 2>"$d/e";'
        ' rc=$?; if [ $rc -eq 0 ]; then cat "$d/o"; else'
        f' echo "{_MARKER}scontrol rc=$rc"; cat "$d/o" "$d/e";'
        f' sinfo -N -n "$node" -o {shlex.quote(SINFO_FORMAT)} >"$d/o" 2>"$d/e"; rc=$?;'
        f' echo "{_MARKER}sinfo rc=$rc"; cat "$d/o"; [ $rc -eq 0 ] || cat "$d/e"; fi;'
        ' rm -rf "$d"; exit $rc'
    )


def parse(text: str) -> SlurmNodeFacts:
    """Parse scontrol or sinfo output (auto-detected) describing one node.

    Raises:
        SlurmNotInstalled: neither scontrol nor sinfo is on the node.
        ProbeParseError: not scontrol/sinfo node output, or output about several nodes.
    """
    if any(line.startswith(_MARKER) for line in text.splitlines()):
        return _parse_fallback(text)
    return _parse_one(text, text)


def _parse_one(text: str, shown: str) -> SlurmNodeFacts:
    """Facts from one tool's output; `shown` is the whole output, for error excerpts."""
    lines = clean(text)
    if any(line.startswith("NodeName=") for _, line in lines):
        return _facts(read_scontrol(lines, shown), shown)
    header = next((i for i, (_, line) in enumerate(lines) if sinfo_columns(line)), None)
    if header is not None:
        return _facts(read_sinfo(lines[header:], shown), shown)
    if missing_tool(text, ("scontrol", "sinfo")) is not None:
        raise SlurmNotInstalled(shown)  # a paste of the shell's words, without the markers
    not_found = next((line for _, line in lines if NOT_FOUND.match(line)), None)
    if not_found:
        raise ProbeParseError(NAME, f"Slurm does not know the node ({not_found})", shown)
    if any(line.startswith("ReservationName=") for _, line in lines):
        raise ProbeParseError(
            NAME,
            "this is `scontrol show reservation` output; slurm_node reads `scontrol show node`"
            " (which names the node's reservation)",
            shown,
        )
    if not text.strip():
        raise ProbeParseError(NAME, "empty output", shown)
    raise ProbeParseError(
        NAME, "not scontrol show node output nor an sinfo table with a header line", shown
    )


def _facts(fields: NodeFields, text: str) -> SlurmNodeFacts:
    try:
        decoded = decode_state(fields.state)
    except ValueError as exc:
        raise ProbeParseError(NAME, str(exc), text, line=fields.state_line) from exc
    cpus_alloc, cpus_total = fields.cpus
    gpus_total, gpus_alloc = fields.gpus
    allocated = decoded.base_state in ("ALLOCATED", "MIXED") or decoded.busy
    allocated = allocated or bool(cpus_alloc) or bool(gpus_alloc)
    completing = "COMPLETING" in decoded.flags
    has_jobs = allocated or completing
    drain = "DRAIN" in decoded.flags
    reason, user, when = fields.reason
    idle = None if cpus_total is None or cpus_alloc is None else cpus_total - cpus_alloc
    return SlurmNodeFacts(
        source=fields.source,
        name=fields.name,
        state=fields.state,
        base_state=decoded.base_state,
        flags=decoded.flags,
        drained=drain and not has_jobs,
        draining=drain and has_jobs,
        allocated=allocated,
        has_jobs=has_jobs,
        completing=completing,
        down=decoded.base_state == "DOWN",
        not_responding="NOT_RESPONDING" in decoded.flags,
        reason=reason,
        reason_user=user,
        reason_time=when,
        reason_is_fleetfix=bool(reason and reason.startswith(FLEETFIX_REASON_PREFIX)),
        fleetfix_run=_fleetfix_run(reason),
        reserved=_reserved(decoded, fields.reservation),
        maint="MAINTENANCE" in decoded.flags,
        reservation=fields.reservation,
        reserved_by=_reserved_by(decoded, fields.reservation),
        reservation_is_fleetfix=_reserved_by(decoded, fields.reservation) == "fleetfix",
        cpus_alloc=cpus_alloc,
        cpus_idle=idle,
        cpus_total=cpus_total,
        gres=fields.gres,
        gpus_total=gpus_total,
        gpus_alloc=gpus_alloc,
        partitions=fields.partitions,
        boot_time=fields.boot_time,
        slurm_version=fields.slurm_version,
    )


def _fleetfix_run(reason: str | None) -> str | None:
    if not reason or not reason.startswith(FLEETFIX_REASON_PREFIX):
        return None
    named = FLEETFIX_RUN_TAG.findall(reason)
    return named[-1] if named else None


def _reserved(decoded: NodeState, reservation: str | None) -> bool:
    return reservation is not None or bool({"RESERVED", "MAINTENANCE"} & set(decoded.flags))


def _reserved_by(decoded: NodeState, reservation: str | None) -> str | None:
    if reservation is not None:
        ours = reservation.startswith(FLEETFIX_RESERVATION_PREFIX)
        return "fleetfix" if ours else "someone else"
    return "unknown" if _reserved(decoded, None) else None


PROBE: Probe[SlurmNodeFacts] = Probe(
    name=NAME,
    summary="Slurm state of this node: state flags, drain reason (fleetfix or human), jobs,"
    " reservation",
    command=command,
    parse=parse,
    params={"node": "Slurm node name; default: this host's short hostname"},
)


class SlurmNotInstalled(ToolNotInstalled):
    """Neither scontrol nor sinfo is on the node; the message says how to mark a host that is
    outside Slurm, so that the engine's Slurm gate stops asking for it."""

    def __init__(self, text: str) -> None:
        # ToolNotInstalled's own message, plus the advice the operator needs here.
        ProbeParseError.__init__(
            self,
            NAME,
            f"{TOOL} is not installed on this node; for hosts outside Slurm set the host var"
            " fleetfix_slurm: false",
            text,
        )
        self.tool = TOOL


# --- when scontrol failed ----------------------------------------------------------------

_MARKER = "### fleetfix "
_MARKER_LINE = re.compile(r"^### fleetfix (scontrol|sinfo) rc=(\d+)\s*$")
_UNREACHABLE = re.compile(r"Unable to contact slurm controller|Connection refused|connect failure")
_COMMAND_NOT_FOUND = 127


@dataclass(frozen=True, slots=True)
class _Answer:
    """One tool's section: exit status, its lines (numbered as in the whole output)."""

    rc: int
    lines: tuple[tuple[int, str], ...]

    def said(self) -> str:
        return next((line.strip() for _, line in self.lines if line.strip()), "(nothing)")


def _answers(text: str) -> dict[str, _Answer]:
    answers: dict[str, _Answer] = {}
    tool, rc, lines = None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        marker = _MARKER_LINE.match(line)
        if marker is None and line.startswith(_MARKER):
            raise ProbeParseError(NAME, "unknown fleetfix marker", text, line=number)
        if marker is None:
            lines.append((number, line))
            continue
        if tool is not None:
            answers[tool] = _Answer(rc, tuple(lines))
        elif any(line.strip() for _, line in lines):
            raise ProbeParseError(NAME, "output before the first marker", text, line=1)
        tool, rc, lines = marker.group(1), int(marker.group(2)), []
    if tool is not None:
        answers[tool] = _Answer(rc, tuple(lines))
    return answers


def _parse_fallback(text: str) -> SlurmNodeFacts:
    """scontrol failed: sinfo's table when it answered, else why Slurm could not be read."""
    answers = _answers(text)
    scontrol, sinfo = answers.get("scontrol"), answers.get("sinfo")
    if sinfo is not None and sinfo.rc == 0:
        # Blank every other line so errors keep the line numbers of the whole output.
        kept = dict(sinfo.lines)
        only_sinfo = "\n".join(
            kept.get(number, "") for number in range(1, len(text.splitlines()) + 1)
        )
        try:
            return _parse_one(only_sinfo, text)
        except ProbeParseError as exc:
            if scontrol is None:
                raise
            unknown = _node_unknown(scontrol)
            reason = unknown or f"{exc.reason} (scontrol exited {scontrol.rc}: {scontrol.said()})"
            raise ProbeParseError(NAME, reason, text, line=exc.line) from exc
    answered = [a for a in (scontrol, sinfo) if a is not None]
    if answered and all(a.rc == _COMMAND_NOT_FOUND for a in answered):
        raise SlurmNotInstalled(text)
    raise ProbeParseError(NAME, _why_both_failed(scontrol, sinfo), text)


def _node_unknown(answer: _Answer) -> str | None:
    words = next((ln.strip() for _, ln in answer.lines if NOT_FOUND.match(ln.strip())), None)
    return f"Slurm does not know the node ({words})" if words else None


def _why_both_failed(scontrol: _Answer | None, sinfo: _Answer | None) -> str:
    """A typed reason: controller unreachable, node unknown, or their words."""
    answered = [(tool, a) for tool, a in (("scontrol", scontrol), ("sinfo", sinfo)) if a]
    unknown = next((found for _, a in answered if (found := _node_unknown(a))), None)
    if unknown:
        return unknown
    for _, answer in answered:
        words = next((ln.strip() for _, ln in answer.lines if _UNREACHABLE.search(ln)), None)
        if words:
            return f"cannot reach the Slurm controller: {words}"
    told = "; ".join(f"{tool} exited {a.rc}: {a.said()}" for tool, a in answered)
    return f"Slurm did not answer ({told or 'no output'})"
