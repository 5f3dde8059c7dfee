"""Measure the lab at scale: start-up time and server memory for a 1,000-node fleet, idle and
under a fan-out of SSH commands (every node answering `nvidia-smi -q -x`).

    .venv/bin/python benchmarks/lab_start.py [--scenario healthy-1000] [--nodes N]
        [--concurrency 200] [--command 'nvidia-smi -q -x']

Prints one line per figure; targets (DESIGN 12, lab brief): start < 10 s, RSS < 2 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import asyncssh

from fleetfix.lab.control import LabHandle, start_lab


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of a process, in KiB."""
    found = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0])
    return found


async def fan_out(lab: LabHandle, command: str, concurrency: int) -> tuple[float, int, int]:
    """Run `command` once on every node; returns (seconds, successes, output bytes)."""
    limit = asyncio.Semaphore(concurrency)
    sizes: list[int] = []

    async def one(address: str) -> bool:
        async with limit:
            try:
                async with asyncssh.connect(
                    address,
                    port=lab.port,
                    username="root",
                    client_keys=[str(lab.client_key)],
                    known_hosts=str(lab.known_hosts),
                ) as conn:
                    done = await conn.run(command, timeout=60)
            except (OSError, asyncssh.Error):
                return False
            sizes.append(len(str(done.stdout or "")))
            return done.exit_status == 0

    started = time.perf_counter()
    results = await asyncio.gather(*(one(a) for a in lab.hosts.values()))
    return time.perf_counter() - started, sum(results), sum(sizes)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="healthy-1000")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--command", default="nvidia-smi -q -x")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fleetfix-lab-bench-") as scratch:
        started = time.perf_counter()
        lab = start_lab(args.scenario, Path(scratch), port=0, nodes=args.nodes)
        try:
            ready = time.perf_counter() - started
            idle = memory_kib(lab.pid)
            print(f"nodes                 {len(lab.hosts)}")
            print(f"sandbox               {lab.sandbox}")
            print(f"start (spawn->ready)  {ready:.2f} s")
            print(f"server RSS idle       {idle['VmRSS'] / 1024:.1f} MiB")
            seconds, ok, size = asyncio.run(fan_out(lab, args.command, args.concurrency))
            busy = memory_kib(lab.pid)
            print(
                f"fan-out '{args.command}' x{len(lab.hosts)} (concurrency {args.concurrency}): "
                f"{seconds:.2f} s, {ok} ok, {size / 1e6:.1f} MB output"
            )
            rss, peak = busy["VmRSS"] / 1024, busy["VmHWM"] / 1024
            print(f"server RSS after      {rss:.1f} MiB (peak {peak:.1f} MiB)")
        finally:
            lab.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
