"""What reading a big job's logs costs (issue 23): fleetfix.joblogs.read_job_logs on a
512-rank job's worth of text.

    .venv/bin/python benchmarks/joblogs_cost.py [--mb 100] [--ranks 512] [--repeats 3]

The text is the real captures of tests/fixtures/job-logs/ (every one, once) spread through
`--mb` MB of lines of the shapes a NCCL_DEBUG=INFO training log is mostly made of: one NCCL
`Init COMPLETE` line per rank (the rank map), NCCL INFO channel chatter, and training-step
lines. Prints MB/s and seconds per 100 MB (best of `--repeats`); never asserts a timing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fleetfix.joblogs import read_job_logs, suspects

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "fixtures" / "job-logs"
CHATTER = (
    "gpu{node:03d}:{pid}:{tid} [{dev}] NCCL INFO Channel 03/0 : {rank}[{dev}] -> {peer}[{dev}]"
    " via P2P/IPC/read\n"
)
STEP = "[rank{rank}]: step 9000 | loss 2.1873 | lr 1.2e-04 | grad_norm 0.84 | 312.5 TFLOP/s\n"
INIT = (
    "gpu{node:03d}:{pid}:{tid} [{dev}] NCCL INFO comm 0x7f57{rank:08x} rank {rank} nranks"
    " {ranks} cudaDev {dev} nvmlDev {dev} busId {dev}b000 commId 0x996ee6f117cb8e1e"
    " - Init COMPLETE\n"
)


def log_text(megabytes: int, ranks: int) -> str:
    """About `megabytes` MB of a `ranks`-rank job's log, the real captures among it."""
    head = "".join(
        INIT.format(node=rank // 8, pid=1000 + rank, tid=2000 + rank, dev=rank % 8, rank=rank,
                    ranks=ranks)
        for rank in range(ranks)
    )  # fmt: skip
    body: list[str] = []
    size, rank = len(head), 0
    captures = [path.read_text(encoding="utf-8") for path in sorted(CAPTURES.glob("*.txt"))]
    every = max(megabytes * 1_000_000 // max(len(captures), 1), 1)
    next_capture = every
    while size < megabytes * 1_000_000:
        line = CHATTER.format(
            node=rank // 8, pid=1000 + rank, tid=2000 + rank, dev=rank % 8, rank=rank,
            peer=(rank + 1) % ranks,
        ) if rank % 4 else STEP.format(rank=rank)  # fmt: skip
        body.append(line)
        size += len(line)
        rank = (rank + 1) % ranks
        if size >= next_capture and captures:
            body.append(captures.pop())
            next_capture += every
    body.extend(captures)
    return head + "".join(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    text = log_text(args.mb, args.ranks)
    megabytes = len(text.encode("utf-8")) / 1_000_000
    best = float("inf")
    for _ in range(args.repeats):
        started = time.perf_counter()
        facts = read_job_logs({"slurm-48213.out": text})
        best = min(best, time.perf_counter() - started)
    started = time.perf_counter()
    found = suspects(facts)
    ranking = time.perf_counter() - started
    print(f"{megabytes:.1f} MB, {facts.lines_read:,} lines, {len(facts.ranks)} ranks placed")
    print(
        f"read_job_logs: {best:.2f} s best of {args.repeats} ({megabytes / best:.1f} MB/s,"
        f" {100 * best / megabytes:.1f} s per 100 MB); suspects: {ranking * 1000:.1f} ms,"
        f" {len(found)} found"
    )
    print(
        f"{len(facts.warnings)} NCCL warnings, {len(facts.timeouts)} watchdog timeouts,"
        f" {len(facts.child_failures)} child failures"
    )


if __name__ == "__main__":
    main()
