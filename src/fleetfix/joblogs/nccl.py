"""NCCL_DEBUG lines: `host:pid:tid [dev] [src:line] NCCL INFO|WARN message`, whatever precedes
them (torchrun's or srun -l's prefixes, `[rank3]:`, a timestamp, pdsh's `host: `).

NCCL prints the CUDA device in the brackets (`[3]`); a WARN line adds the source location
before `NCCL WARN`. Three kinds of lines matter here: the init lines that place a rank
(`comm 0x... rank 3 nranks 16 cudaDev 3 [nvmlDev 3] [busId 1b000] ... - Init START|COMPLETE`,
or `comm 0x... rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3`), the bootstrap lines that
say which address a host has (`Bootstrap : Using eth0:10.0.0.1<0>`, `OOB eth0:10.0.0.1<0>`),
and warnings or errors, with the peer they name (`from peer 10.0.0.12<45678>`, `Connection
closed by remote peer gpu012<...>`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetfix.joblogs.model import EventKind, Topic

_LINE = re.compile(
    r"(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):\d+ )?\[(?P<dev>\d+)\] "
    r"(?:[\w./-]+:\d+ )?NCCL (?P<level>INFO|WARN|ERROR) (?P<msg>.*?)\s*$"
)
_INIT = re.compile(
    r"\bcomm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda>\d+)"
    r"(?: nvmlDev \d+)?(?: busId (?P<bus>[0-9a-fA-F]+))?"
)
_INIT_LOCAL = re.compile(
    r"\bcomm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes \d+"
    r" localRanks \d+ localRank \d+"
)
_ADDRESS = re.compile(r"(?:Bootstrap ?: Using|OOB) [\w.-]+:(?P<address>[0-9A-Fa-f.:]+)<\d+>")
_PEER = re.compile(r"(?P<peer>[^\s<>()\[\]]+)<(?P<port>\d+)>")
_ERROR_INFO = re.compile(
    r"\bnccl(?:Remote|System|Internal|InvalidUsage|InvalidArgument|Unhandled\w*)Error\b"
    r"|NET/(?:IB|Socket)\w* ?: .*\b(?:error|failed)\b|\bCall to \w+ failed",
    re.IGNORECASE,
)
_NCCL_ERROR_WORD = re.compile(r"\bnccl(?:Remote|System|Internal|Unhandled\w*)Error\b")
_TOPICS = (
    (re.compile(r"NET/IB|\bibv_|\bIB\b|\bGID\b|\bQP\b", re.IGNORECASE), Topic.NET_IB),
    (re.compile(r"/dev/shm|\bshm\b|shared memory|posix_fallocate", re.IGNORECASE), Topic.SHM),
    (re.compile(r"\bCuda failure\b|\bCUDA\b|cudaError", re.IGNORECASE), Topic.CUDA),
    (
        re.compile(
            r"NET/Socket|socket|\bNet : |Connection closed|Call to (?:recv|send|connect)",
            re.IGNORECASE,
        ),
        Topic.NET_SOCKET,
    ),
    (re.compile(r"\bProxy\b|proxy", re.IGNORECASE), Topic.PROXY),
)


@dataclass(frozen=True, slots=True)
class NcclLine:
    host: str | None
    pid: int | None
    dev: int
    level: str
    message: str


@dataclass(frozen=True, slots=True)
class Init:
    """An init line: where a rank of a communicator of `nranks` ranks runs."""

    rank: int
    nranks: int
    cuda_dev: int
    bus_id: str | None


def worth_reading(line: str) -> bool:
    """Cheap test before the regex: a WARN line, or an INFO line that may place a rank, name
    an address or carry an error (most INFO lines are channel and topology chatter)."""
    if "NCCL WARN" in line or "NCCL ERROR" in line:
        return True
    return "NCCL INFO" in line and (
        "comm 0x" in line
        or "Using" in line
        or "OOB" in line
        or "rror" in line
        or "failed" in line
        or "NET/" in line
    )


def read_line(line: str) -> NcclLine | None:
    """The NCCL line inside `line`, or None when it holds none."""
    match = _LINE.search(line)
    if match is None:
        return None
    pid = match.group("pid")
    return NcclLine(
        host=match.group("host"),
        pid=int(pid) if pid else None,
        dev=int(match.group("dev")),
        level=match.group("level"),
        message=match.group("msg"),
    )


def read_init(nccl: NcclLine) -> Init | None:
    if "comm 0x" not in nccl.message:
        return None
    match = _INIT.search(nccl.message)
    if match is not None:
        return Init(
            rank=int(match.group("rank")),
            nranks=int(match.group("nranks")),
            cuda_dev=int(match.group("cuda")),
            bus_id=match.group("bus"),
        )
    local = _INIT_LOCAL.search(nccl.message)
    if local is None:
        return None
    return Init(int(local.group("rank")), int(local.group("nranks")), nccl.dev, None)


def read_address(nccl: NcclLine) -> str | None:
    """The address a bootstrap line says this host uses."""
    match = _ADDRESS.search(nccl.message) if "<" in nccl.message else None
    return match.group("address") if match else None


def event_kind(nccl: NcclLine) -> EventKind | None:
    """WARN (and ERROR) lines, and INFO lines that carry an error; None for the rest."""
    if nccl.level != "INFO":
        return EventKind.WARN
    return EventKind.ERROR if _ERROR_INFO.search(nccl.message) else None


def carries_nccl_error(line: str) -> bool:
    """A line without NCCL's prefix that names an NCCL error (PyTorch's DistBackendError)."""
    return "Error" in line and _NCCL_ERROR_WORD.search(line) is not None


def peer(message: str) -> str | None:
    """The other end a message names: `10.0.0.12` of `from peer 10.0.0.12<45678>`."""
    for match in _PEER.finditer(message):
        if match.group("port") != "0":
            return match.group("peer")
    return None


_PEER_RANK = re.compile(r"\b(?:from|to|peer) rank (\d+)\b")


def peer_rank(message: str) -> int | None:
    """The remote rank a message names: `9` of `Failed to execute operation Connect from rank
    9`."""
    match = _PEER_RANK.search(message) if "rank " in message else None
    return int(match.group(1)) if match else None


def topic(message: str) -> Topic:
    return next((name for pattern, name in _TOPICS if pattern.search(message)), Topic.OTHER)
