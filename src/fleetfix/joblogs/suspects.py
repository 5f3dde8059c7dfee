"""suspects(facts): the hosts, GPUs and links a job's logs point at, strongest first.

Evidence, by weight:
- torchrun's root cause (the first child that failed): its host and GPU;
- a rank behind in the collectives: the others timed out at SeqNum N while its last entered
  collective is below N (it never entered N), or it reported nothing while most others timed
  out (a rank stuck before the collective has nothing outstanding for its watchdog);
- a host named as the peer of NCCL warnings by other hosts: counted by distinct reporters, so
  one host named by many is the suspect, not the many. NET/IB errors make it a link suspect,
  a closed socket a node suspect. A host whose InfiniBand warnings name no peer is a weaker
  link suspect itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from fleetfix.joblogs.model import (
    JobLogFacts,
    LogEvent,
    RankInfo,
    Suspect,
    SuspectKind,
    Topic,
)

ROOT_CAUSE = 100
BEHIND = 90
SILENT = 80
PEER = 50
PEER_PER_REPORTER = 10
OWN_LINK = 30
MAX_EVIDENCE = 20


def suspects(facts: JobLogFacts) -> list[Suspect]:
    """Suspects from `facts`, highest score first (then by host and rank)."""
    found = [
        *_root_cause(facts),
        *_behind(facts),
        *_silent(facts),
        *_named_peers(facts),
        *_own_links(facts),
    ]
    return sorted(found, key=lambda s: (-s.score, s.host or "", -1 if s.rank is None else s.rank))


def _gpu(info: RankInfo | None) -> str | None:
    if info is None or info.cuda_dev is None:
        return None
    bus = f" (busId {info.bus_id})" if info.bus_id else ""
    return f"cuda {info.cuda_dev}{bus}"


def _root_cause(facts: JobLogFacts) -> list[Suspect]:
    root = facts.root_cause
    if root is None:
        return []
    info = facts.ranks.get(root.rank) if root.rank is not None else None
    how = f"killed by {root.signal}" if root.signal else f"exited {root.exit_code}"
    return [
        Suspect(
            kind=SuspectKind.GPU if _gpu(info) else SuspectKind.NODE,
            host=root.host or (info.host if info else None),
            rank=root.rank,
            gpu=_gpu(info),
            reason=f"torchrun's root cause: rank {root.rank} {how} first",
            evidence=(root.where,),
            score=ROOT_CAUSE,
        )
    ]


def _reached(facts: JobLogFacts) -> int | None:
    """The highest SeqNum any rank entered."""
    seqs = [info.last_entered[0] for info in facts.ranks.values() if info.last_entered]
    return max(seqs, default=None)


def _lagging(values: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Ranks whose value is below the highest: rank -> (its value, the highest)."""
    top = max(values.values(), default=None)
    return {rank: (value, top) for rank, value in values.items() if top is not None and value < top}


def _behind(facts: JobLogFacts) -> list[Suspect]:
    """Like is compared with like: the work each rank timed out on, and (where the watchdog
    printed it) the last work each rank enqueued; a rank that has only one of the two lines is
    not held against another's other number."""
    timed_out: dict[int, int] = {}
    for timeout in facts.timeouts:
        timed_out[timeout.rank] = max(timed_out.get(timeout.rank, timeout.seq), timeout.seq)
    enqueued: dict[int, int] = {}
    for seen in facts.progress:
        enqueued[seen.rank] = max(enqueued.get(seen.rank, seen.enqueued), seen.enqueued)
    lagging = _lagging(timed_out) | _lagging(enqueued)
    found = []
    for rank, (seq, top) in sorted(lagging.items()):
        info = facts.ranks.get(rank)
        lines = [t.where for t in facts.timeouts if t.rank == rank]
        lines += [p.where for p in facts.progress if p.rank == rank]
        found.append(
            Suspect(
                kind=SuspectKind.GPU,
                host=info.host if info else None,
                rank=rank,
                gpu=_gpu(info),
                reason=f"rank {rank} last entered collective SeqNum {seq};"
                f" other ranks reached {top}",
                evidence=tuple(lines[:MAX_EVIDENCE]),
                score=BEHIND,
            )
        )
    return found


def _silent(facts: JobLogFacts) -> list[Suspect]:
    """Ranks the init lines placed that said nothing while other ranks timed out: only when
    they are fewer than the ranks that did (the odd ones out; logs of only some nodes leave
    most ranks silent, which names no one)."""
    if not facts.timeouts:
        return []
    reported = {t.rank for t in facts.timeouts} | {p.rank for p in facts.progress}
    silent = [info for info in facts.ranks.values() if info.rank not in reported and info.where]
    if len(silent) >= len(reported):
        return []
    top = _reached(facts)
    return [
        Suspect(
            kind=SuspectKind.GPU,
            host=info.host,
            rank=info.rank,
            gpu=_gpu(info),
            reason=f"rank {info.rank} reported no watchdog timeout while other ranks timed out"
            f" at SeqNum {top}: it never entered that collective",
            evidence=tuple(x for x in (info.where,) if x)
            + tuple(t.where for t in facts.timeouts[:MAX_EVIDENCE]),
            score=SILENT,
        )
        for info in silent
    ]


def _named_peers(facts: JobLogFacts) -> list[Suspect]:
    named: dict[str, list[LogEvent]] = defaultdict(list)
    for event in facts.warnings:
        if event.peer is not None and event.peer != event.host:
            named[event.peer].append(event)
    found = []
    for peer, events in named.items():
        reporters = sorted({event.host or "(host not named)" for event in events})
        ib = any(event.topic is Topic.NET_IB for event in events)
        found.append(
            Suspect(
                kind=SuspectKind.LINK if ib else SuspectKind.NODE,
                host=peer,
                rank=_rank_on(facts, peer),
                gpu=None,
                reason=f"named as the failing peer by {len(reporters)} host(s):"
                f" {', '.join(reporters)}" + (" (NET/IB errors)" if ib else " (connection lost)"),
                evidence=_lines(events),
                score=PEER + PEER_PER_REPORTER * len(reporters),
            )
        )
    return found


def _own_links(facts: JobLogFacts) -> list[Suspect]:
    """Hosts whose InfiniBand warnings name no other host: their own port or NIC."""
    own: dict[str, list[LogEvent]] = defaultdict(list)
    for event in facts.warnings:
        if event.topic is Topic.NET_IB and event.host and event.peer in (None, event.host):
            own[event.host].append(event)
    return [
        Suspect(
            kind=SuspectKind.LINK,
            host=host,
            rank=None,
            gpu=None,
            reason=f"{len(events)} NET/IB warning(s) naming no other host",
            evidence=_lines(events),
            score=OWN_LINK,
        )
        for host, events in own.items()
    ]


def _rank_on(facts: JobLogFacts, host: str) -> int | None:
    """The rank on `host` when exactly one is there (a one-GPU-per-host job)."""
    ranks = [info.rank for info in facts.ranks.values() if info.host == host]
    return ranks[0] if len(ranks) == 1 else None


def _lines(events: Iterable[LogEvent]) -> tuple[str, ...]:
    return tuple(event.where for event in events)[:MAX_EVIDENCE]
