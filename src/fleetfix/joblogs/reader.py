"""read_job_logs: a job's log files in, what they say about its ranks out.

Each file is read line by line with a cheap substring test before any regex (`"NCCL" in
line`, `"Watchdog caught" in line`, ...): a 512-rank job's logs can be 100 MB. A line longer
than MAX_LINE is read up to it (binary junk and progress bars make such lines); nothing in a
log raises: text that says none of this gives empty facts.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from fleetfix.joblogs import nccl, torchrun, watchdog
from fleetfix.joblogs.model import (
    ChildFailure,
    EventKind,
    JobLogFacts,
    LogEvent,
    Progress,
    RankInfo,
    Timeout,
)

MAX_LINE = 64 * 1024
_RANK_PREFIX = re.compile(r"^\s*\[rank(\d+)\]:")


@dataclass(slots=True)
class _Placement:
    """Where an init line put a rank of a communicator of one size."""

    host: str | None
    pid: int | None
    cuda_dev: int
    bus_id: str | None
    where: str


@dataclass(slots=True)
class _State:
    """What the files said so far; facts() resolves ranks, peers and progress at the end."""

    placements: dict[int, dict[int, _Placement]] = field(default_factory=dict)
    """nranks -> rank -> placement: sub-communicators number their ranks from 0 too."""
    addresses: dict[str, str] = field(default_factory=dict)
    events: list[LogEvent] = field(default_factory=list)
    timeouts: list[Timeout] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)
    failures: list[ChildFailure] = field(default_factory=list)
    lines_read: int = 0
    long_lines: int = 0


def read_job_logs(texts: Mapping[str, str]) -> JobLogFacts:
    """What the logs (file name -> text) say about the job's ranks, warnings, timeouts and
    failed children. Never raises on a log's content."""
    state = _State()
    for name, text in texts.items():
        _read_file(state, name, text)
    return _facts(state)


def _read_file(state: _State, name: str, text: str) -> None:
    report = torchrun.ReportReader(name)
    last_error = False
    for number, raw in enumerate(io.StringIO(text, newline=None), 1):
        line = raw.rstrip("\r\n")
        if len(line) > MAX_LINE:
            state.long_lines += 1
            line = line[:MAX_LINE]
        if last_error and line.strip():
            # NCCL's `Last error:` in PyTorch's DistBackendError: the next line is NCCL's last
            # warning, without its prefix (`Net : Connection closed by remote peer x<port>`).
            state.events.append(_bare_event(name, number, line))
            last_error = False
        elif "NCCL" in line or "nccl" in line:
            _read_nccl(state, name, number, line)
        elif "Last error:" in line:
            last_error = line.rstrip().endswith("Last error:")
        elif watchdog.maybe_watchdog(line):
            _read_watchdog(state, name, number, line)
        elif torchrun.maybe_report(line):
            report.feed(number, line)
        state.lines_read += 1
    state.failures.extend(report.finish())


def _prefix_rank(line: str) -> int | None:
    match = _RANK_PREFIX.match(line) if "[rank" in line else None
    return int(match.group(1)) if match else None


def _read_nccl(state: _State, name: str, number: int, line: str) -> None:
    if watchdog.maybe_watchdog(line):
        _read_watchdog(state, name, number, line)
        return
    parsed = nccl.read_line(line) if nccl.worth_reading(line) else None
    if parsed is None:
        if nccl.carries_nccl_error(line):
            state.events.append(_bare_event(name, number, line))
        return
    init = nccl.read_init(parsed)
    if init is not None:
        where = f"{name}:{number}"
        placement = _Placement(parsed.host, parsed.pid, init.cuda_dev, init.bus_id, where)
        state.placements.setdefault(init.nranks, {}).setdefault(init.rank, placement)
        return
    address = nccl.read_address(parsed)
    if address is not None and parsed.host is not None:
        state.addresses.setdefault(address, parsed.host)
        return
    kind = nccl.event_kind(parsed)
    if kind is not None:
        state.events.append(_event(name, number, line, parsed, kind))


def _event(name: str, number: int, line: str, parsed: nccl.NcclLine, kind: EventKind) -> LogEvent:
    return LogEvent(
        file=name,
        line=number,
        host=parsed.host,
        rank=_prefix_rank(line),
        kind=kind,
        text=parsed.message,
        peer=nccl.peer(parsed.message),
        topic=nccl.topic(parsed.message),
        cuda_dev=parsed.dev,
        pid=parsed.pid,
        peer_rank=nccl.peer_rank(parsed.message),
    )


def _bare_event(name: str, number: int, line: str) -> LogEvent:
    text = line.strip()
    return LogEvent(
        file=name,
        line=number,
        host=None,
        rank=_prefix_rank(line),
        kind=EventKind.ERROR,
        text=text,
        peer=nccl.peer(text),
        topic=nccl.topic(text),
    )


def _read_watchdog(state: _State, name: str, number: int, line: str) -> None:
    timeout = watchdog.read_timeout(line)
    if timeout is not None:
        state.timeouts.append(
            Timeout(
                name,
                number,
                timeout.rank,
                timeout.seq,
                timeout.op,
                timeout.timeout_ms,
                timeout.ran_ms,
            )
        )
        return
    seen = watchdog.read_progress(line, _prefix_rank(line))
    if seen is not None:
        state.progress.append(
            Progress(
                name,
                number,
                seen.rank,
                seen.enqueued,
                seen.completed,
                seen.failed_at,
                seen.process_group,
            )
        )


# --- after every file: ranks, hosts, peers ---------------------------------------------------


def _facts(state: _State) -> JobLogFacts:
    nranks = max(state.placements, default=None)
    placed = state.placements.get(nranks, {}) if nranks is not None else {}
    by_process = {
        (p.host, p.pid, p.cuda_dev): rank for rank, p in placed.items() if p.pid is not None
    }  # one process may drive several GPUs: the device tells its ranks apart
    hosts = {p.host for p in placed.values() if p.host} | {e.host for e in state.events if e.host}
    hosts |= {f.host for f in state.failures if f.host}
    placed_hosts = {rank: p.host for rank, p in placed.items()}
    events = tuple(
        _resolve(event, by_process, state.addresses, hosts, placed_hosts) for event in state.events
    )
    roots = [failure for failure in state.failures if failure.root_cause]
    return JobLogFacts(
        ranks=MappingProxyType(_ranks(state, placed)),
        warnings=events,
        timeouts=tuple(state.timeouts),
        progress=tuple(state.progress),
        child_failures=tuple(state.failures),
        root_cause=roots[0] if roots else None,
        nranks=nranks,
        host_addresses=MappingProxyType(dict(state.addresses)),
        lines_read=state.lines_read,
        long_lines=state.long_lines,
    )


def _resolve(
    event: LogEvent,
    by_process: Mapping[tuple[str | None, int, int], int],
    addresses: Mapping[str, str],
    hosts: set[str],
    placed_hosts: Mapping[int, str | None],
) -> LogEvent:
    """The event with its rank (from the process that logged it) and its peer as a host name
    where the logs tell which host has that address or name."""
    rank = event.rank
    if rank is None and event.pid is not None and event.cuda_dev is not None:
        rank = by_process.get((event.host, event.pid, event.cuda_dev))
    peer = _peer_host(event.peer, addresses, hosts)
    if peer is None and event.peer_rank is not None:
        peer = placed_hosts.get(event.peer_rank)
    return replace(event, rank=rank, peer=peer)


def _peer_host(peer: str | None, addresses: Mapping[str, str], hosts: set[str]) -> str | None:
    if peer is None:
        return None
    if peer in addresses:
        return addresses[peer]
    short = peer.split(".", 1)[0]
    if short in hosts and not peer.replace(".", "").isdigit():
        return short
    return peer


def _ranks(state: _State, placed: Mapping[int, _Placement]) -> dict[int, RankInfo]:
    ranks = {
        rank: RankInfo(rank, p.host, p.pid, p.cuda_dev, p.bus_id, where=p.where)
        for rank, p in placed.items()
    }
    for failure in state.failures:
        if failure.rank is not None and failure.rank not in ranks:
            ranks[failure.rank] = RankInfo(failure.rank, failure.host, failure.pid)
    entered = _last_entered(state)
    completed: dict[int, int] = {}
    for seen in state.progress:
        completed[seen.rank] = max(completed.get(seen.rank, seen.completed), seen.completed)
    for rank in entered.keys() | completed.keys():
        info = ranks.get(rank, RankInfo(rank))
        ranks[rank] = replace(
            info, last_entered=entered.get(rank), last_completed=completed.get(rank)
        )
    return dict(sorted(ranks.items()))


def _last_entered(state: _State) -> dict[int, tuple[int, str | None]]:
    """Per rank: the highest SeqNum it enqueued, with its op where a timeout line names it."""
    ops: dict[tuple[int, int], str | None] = {}
    highest: dict[int, int] = {}
    for timeout in state.timeouts:
        ops[(timeout.rank, timeout.seq)] = timeout.op
        highest[timeout.rank] = max(highest.get(timeout.rank, timeout.seq), timeout.seq)
    for seen in state.progress:
        highest[seen.rank] = max(highest.get(seen.rank, seen.enqueued), seen.enqueued)
    return {rank: (seq, ops.get((rank, seq))) for rank, seq in highest.items()}
