"""What a job's logs say about its ranks: the values read_job_logs returns and suspects ranks."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


class EventKind(enum.StrEnum):
    """A `NCCL WARN` line, or another line that carries an NCCL error."""

    WARN = "warn"
    ERROR = "error"


class Topic(enum.StrEnum):
    """What an NCCL warning is about, from its words."""

    NET_IB = "net/ib"
    """InfiniBand/RoCE: completion errors, ibv_* calls, QP/GID failures: a link or its NIC."""
    NET_SOCKET = "net/socket"
    """TCP sockets: a peer closed the connection or did not answer: a process or a node."""
    SHM = "shm"
    CUDA = "cuda"
    PROXY = "proxy"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class RankInfo:
    """One global rank: where it ran (from NCCL's init lines) and how far it got (from the
    watchdog lines)."""

    rank: int
    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    bus_id: str | None = None
    """NCCL's busId as printed (`1b000`): the PCI bus id without domain and function."""
    last_entered: tuple[int, str | None] | None = None
    """(SeqNum, op type) of the last collective the rank enqueued; the op when known."""
    last_completed: int | None = None
    where: str | None = None
    """file:line of the init line that placed the rank."""


@dataclass(frozen=True, slots=True)
class LogEvent:
    """An NCCL warning or error line, with the host it came from and any peer it names."""

    file: str
    line: int
    host: str | None
    rank: int | None
    kind: EventKind
    text: str
    """The message after `NCCL WARN`/`NCCL INFO` (or the whole line when it has no prefix)."""
    peer: str | None = None
    """The other end the line names (`10.0.0.12`, `gpu012`), resolved to a host name where
    the logs said which host has that address; None when it names none."""
    topic: Topic = Topic.OTHER
    cuda_dev: int | None = None
    """The CUDA device NCCL's prefix names (`[3]`)."""
    pid: int | None = None
    peer_rank: int | None = None
    """The remote rank the line names (`Connect from rank 9`); its host becomes `peer` when the
    init lines placed it."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class Timeout:
    """PyTorch's ProcessGroupNCCL watchdog: a rank's collective ran past its timeout."""

    file: str
    line: int
    rank: int
    seq: int
    op: str | None
    timeout_ms: int | None
    ran_ms: int | None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class Progress:
    """`last enqueued NCCL work: E, last completed NCCL work: C` of one rank (flight-recorder
    style watchdog report), with the work it timed out on when the line says."""

    file: str
    line: int
    rank: int
    enqueued: int
    completed: int
    failed_at: int | None = None
    process_group: str | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class ChildFailure:
    """One entry of torchrun's ChildFailedError report."""

    file: str
    line: int
    host: str | None
    rank: int | None
    local_rank: int | None
    exit_code: int | None
    """Negative: killed by that signal (-9 SIGKILL, -6 SIGABRT)."""
    pid: int | None
    time: str | None
    error_file: str | None
    traceback: str | None
    root_cause: bool

    @property
    def signal(self) -> str | None:
        """SIGKILL for -9 and so on; None for a normal exit code."""
        if self.exit_code is None or self.exit_code >= 0:
            return None
        return _SIGNALS.get(-self.exit_code, f"signal {-self.exit_code}")

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


_SIGNALS = {
    1: "SIGHUP",
    2: "SIGINT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    15: "SIGTERM",
}


def _no_ranks() -> Mapping[int, RankInfo]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class JobLogFacts:
    """Everything read_job_logs found; empty (never an error) for logs that say none of it."""

    ranks: Mapping[int, RankInfo] = field(default_factory=_no_ranks)
    warnings: tuple[LogEvent, ...] = ()
    timeouts: tuple[Timeout, ...] = ()
    progress: tuple[Progress, ...] = ()
    child_failures: tuple[ChildFailure, ...] = ()
    root_cause: ChildFailure | None = None
    nranks: int | None = None
    """The communicator size the init lines print (the largest seen)."""
    host_addresses: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Address -> host, from NCCL's `Bootstrap : Using eth0:10.0.0.1<0>` and OOB lines."""
    lines_read: int = 0
    long_lines: int = 0
    """Lines longer than MAX_LINE, read only up to it."""


class SuspectKind(enum.StrEnum):
    NODE = "node"
    GPU = "gpu"
    LINK = "link"


@dataclass(frozen=True, slots=True)
class Suspect:
    """A host, GPU or link the logs point at, why, and the lines that say so."""

    kind: SuspectKind
    host: str | None
    rank: int | None
    gpu: str | None
    """`cuda 3`, with NCCL's busId when known (`cuda 3 (busId 1b000)`)."""
    reason: str
    evidence: tuple[str, ...]
    """file:line of each line that says so."""
    score: int
    """Higher is stronger; suspects() sorts by it."""
