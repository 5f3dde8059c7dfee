"""The logs a lab job wrote: NCCL_DEBUG=INFO init lines and PyTorch's watchdog timeouts.

A hung data-parallel job looks like this in its `slurm-JOB.out`: every rank's communicator
initialised (`NCCL INFO comm 0x... rank R nranks N cudaDev D nvmlDev D - Init COMPLETE`, one
line per rank, printed by the host and process that owns it), then, ten minutes after one rank
stopped entering collectives, every *other* rank's ProcessGroupNCCL watchdog reports the
collective it waits in (`[Rank R] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=S, OpType=ALLREDUCE, ...)` and `last enqueued NCCL work: S, last completed NCCL
work: S-1`). The rank that never entered SeqNum S prints no timeout: it is the suspect.

The line shapes follow real captures (tests/fixtures/job-logs/MANIFEST.md: NVIDIA/nccl#1409,
XPixelGroup/BasicSR#737, NVIDIA/nccl-tests#29); the values are the lab's (its hosts, its HGX
bus ids, deterministic PIDs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from fleetfix.errors import LabError
from fleetfix.lab.boards import HGX_BUS_NUMBERS
from fleetfix.lab.scenario import Scenario, node_names

TIMEOUT_MS = 600_000
"""PyTorch's default NCCL timeout (10 minutes)."""


@dataclass(frozen=True, slots=True)
class Hang:
    """The collective the job hangs in, and the rank that never entered it."""

    seq: int
    op: str
    node: str
    gpu: int


def job_logs(
    job_id: int, nodes: Sequence[str], bus_ids: Sequence[str], hang: Hang | None, stamp: str
) -> dict[str, str]:
    """`slurm-JOB.out` of a job on `nodes`, a rank per GPU (`bus_ids` in index order, as
    nvidia-smi prints them: `00000000:1B:00.0`); `stamp` is the watchdog's `MMDD HH:MM:SS`."""
    nranks = len(nodes) * len(bus_ids)
    lines: list[str] = []
    for n, node in enumerate(nodes):
        for gpu, bus in enumerate(bus_ids):
            rank = n * len(bus_ids) + gpu
            pid, tid = _pid(job_id, rank), _pid(job_id, rank) + 93
            lines.append(
                f"{node}:{pid}:{tid} [{gpu}] NCCL INFO comm 0x{_comm(job_id, rank)} rank {rank} "
                f"nranks {nranks} cudaDev {gpu} nvmlDev {gpu} busId {_nccl_bus(bus)} "
                f"commId 0x{job_id:016x} - Init COMPLETE"
            )
    if hang is not None:
        for n, node in enumerate(nodes):
            for gpu in range(len(bus_ids)):
                if (node, gpu) == (hang.node, hang.gpu):
                    continue  # it never entered SeqNum seq: nothing to time out
                rank = n * len(bus_ids) + gpu
                lines.extend(_timeout(rank, hang, stamp))
    return {f"slurm-{job_id}.out": "".join(line + "\n" for line in lines)}


def _timeout(rank: int, hang: Hang, stamp: str) -> list[str]:
    head = f"[rank{rank}]:[E{stamp}.{rank * 1733 % 1_000_000:06d}000"
    return [
        f"{head} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation "
        f"timeout: WorkNCCL(SeqNum={hang.seq}, OpType={hang.op}, NumelIn=9801523, "
        f"NumelOut=9801523, Timeout(ms)={TIMEOUT_MS}) ran for {TIMEOUT_MS + 20} milliseconds "
        "before timing out.",
        f"{head} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
        f"Exception (either an error or timeout) detected by watchdog at work: {hang.seq}, "
        f"last enqueued NCCL work: {hang.seq}, last completed NCCL work: {hang.seq - 1}.",
    ]


def _pid(job_id: int, rank: int) -> int:
    return 20_000 + (job_id * 7 + rank * 13) % 40_000


def _comm(job_id: int, rank: int) -> str:
    return f"{0x55D5AA8CA000 + job_id * 0x1000 + rank * 0x100:012x}"


def _nccl_bus(bus: str) -> str:
    """NCCL's busId: the bus and device of `00000000:1B:00.0` as `1b000`."""
    _, bus_part, rest = bus.lower().rsplit(":", 2)
    return f"{bus_part}{rest.replace('.', '')}".lstrip("0") or "0"


def scenario_job_logs(scenario: Scenario, job_id: int, now: float) -> dict[str, str]:
    """The logs of job `job_id` as the scenario sets it up: the nodes whose `slurm:` names it
    (in node order), a rank per GPU, and the hang of the node with `nccl_hang`, if any
    (reported by the other ranks' watchdogs at `now`)."""
    nodes = [
        name
        for name in node_names(scenario.fleet)
        if scenario.faults_of(name).slurm.state == "alloc"
        and scenario.faults_of(name).slurm.job_id == job_id
    ]
    if not nodes:
        raise LabError(f"scenario {scenario.name!r} runs no job {job_id}")
    gpus = min(scenario.hardware_of(name).gpus for name in nodes)
    bus_ids = [f"00000000:{bus:02X}:00.0" for bus in HGX_BUS_NUMBERS[:gpus]]
    hang = next(
        (
            Hang(spec.seq, spec.op, name, spec.gpu)
            for name in nodes
            if (spec := scenario.faults_of(name).nccl_hang) is not None
        ),
        None,
    )
    stamp = datetime.fromtimestamp(now, tz=UTC).strftime("%m%d %H:%M:%S")
    return job_logs(job_id, nodes, bus_ids, hang, stamp)
