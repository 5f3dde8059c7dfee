"""PyTorch ProcessGroupNCCL's watchdog lines: which collective each rank timed out on, and how
far each rank's work got.

    [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1234,
        OpType=ALLREDUCE, NumelIn=..., Timeout(ms)=600000) ran for 600010 milliseconds
        before timing out.                                        [one line in the log]
    [PG 0 (default_pg) Rank 3] Exception (either an error or timeout) detected by watchdog
        at work: 1234, last enqueued NCCL work: 1235, last completed NCCL work: 1233.
    [PG ID 1 PG GUID 1 Rank 1]  failure detected by watchdog at work sequence id: 1 PG
        status: last enqueued work: 547, last completed work: 546

Older PyTorch prints `[E ProcessGroupNCCL.cpp:458] [Rank 0] ...` and `Timeout at NCCL work:
N, last enqueued NCCL work: ...`; newer ones put `[rank3]:[E1206 18:44:12.7 ...]` first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TIMEOUT = re.compile(
    r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: "
    r"WorkNCCL\((?P<work>.*?)\) ran for (?P<ran>\d+) milliseconds"
)
_SEQ = re.compile(r"\bSeqNum=(\d+)")
_OP = re.compile(r"\bOpType=(\w+)")
_LIMIT = re.compile(r"\bTimeout\(ms\)=(\d+)")
_PROGRESS = re.compile(
    r"last enqueued (?:NCCL )?work: (?P<enqueued>\d+),? last completed (?:NCCL )?work: "
    r"(?P<completed>\d+)"
)
_RANK = re.compile(r"\bRank (?P<rank>\d+)\]")
_AT = re.compile(r"\bat (?:NCCL )?work(?: sequence id)?: (?P<at>\d+)")
_GROUP = re.compile(r"\[PG (?:ID )?(?P<group>\d+)")


@dataclass(frozen=True, slots=True)
class TimeoutLine:
    rank: int
    seq: int
    op: str | None
    timeout_ms: int | None
    ran_ms: int


@dataclass(frozen=True, slots=True)
class ProgressLine:
    rank: int
    enqueued: int
    completed: int
    failed_at: int | None
    process_group: str | None


def maybe_watchdog(line: str) -> bool:
    """Cheap test before the regexes: the line may be one of the watchdog's."""
    return "Watchdog caught" in line or "last enqueued" in line


def read_timeout(line: str) -> TimeoutLine | None:
    match = _TIMEOUT.search(line)
    if match is None:
        return None
    work = match.group("work")
    seq = _SEQ.search(work)
    if seq is None:
        return None
    op, limit = _OP.search(work), _LIMIT.search(work)
    return TimeoutLine(
        rank=int(match.group("rank")),
        seq=int(seq.group(1)),
        op=op.group(1) if op else None,
        timeout_ms=int(limit.group(1)) if limit else None,
        ran_ms=int(match.group("ran")),
    )


def read_progress(line: str, prefix_rank: int | None) -> ProgressLine | None:
    """A `last enqueued ... last completed ...` line; its rank from `Rank N]`, else from a
    `[rankN]:` prefix (`prefix_rank`)."""
    match = _PROGRESS.search(line)
    if match is None:
        return None
    named = _RANK.search(line)
    rank = int(named.group("rank")) if named else prefix_rank
    if rank is None:
        return None
    at, group = _AT.search(line), _GROUP.search(line)
    return ProgressLine(
        rank=rank,
        enqueued=int(match.group("enqueued")),
        completed=int(match.group("completed")),
        failed_at=int(at.group("at")) if at else None,
        process_group=group.group("group") if group else None,
    )
