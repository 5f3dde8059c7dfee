"""What the journal costs on each backend: SQLite (one machine) and PostgreSQL (a team).

    .venv/bin/python benchmarks/journal_backends.py [--hosts 200] [--steps 5]

For each backend the same run is replayed into a fresh journal under a running event loop (so
writes are batched as in a real run): per host, `steps` probe steps each with the lab's
138 KB `nvidia-smi -q -x` output and its parsed facts, then one action with its write-ahead
intent and outcome. Measured: the controller's CPU and wall time per host, leasing every host
at once, and one repair-budget admission (the fleet lock's round trip). PostgreSQL is a
private cluster started by scripts/team-postgres on its socket (skipped when not installed).
Prints a table; never asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fleetfix.events import ActionStarted, ActionTaken, CommandRan, Event, HostStepFinished
from fleetfix.journal import Journal
from fleetfix.probes import probe_registry
from fleetfix.probes.base import verdict
from fleetfix.results import CommandResult, Status, StepResult

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "team-postgres"
LAB_XML = ROOT / "tests" / "fixtures" / "samples" / "nvidia-smi-xml"
LAB_XML_FILE = LAB_XML / "lab-healthy-1000-8xh100-550.90.07.xml"
HEADERS = ("backend", "hosts", "CPU ms/host", "wall ms/host", "lease all (ms)", "admit (ms)")


@dataclass(frozen=True, slots=True)
class Cost:
    backend: str
    hosts: int
    cpu_ms_per_host: float
    wall_ms_per_host: float
    lease_ms: float
    admit_ms: float


def run_events(hosts: int, steps: int) -> list[Event]:
    """The events of the run replayed into each journal, built once."""
    output = LAB_XML_FILE.read_text()
    smi = probe_registry().get("nvidia_smi")
    command = CommandResult("nvidia-smi -q -x", 0, output, "", 0.2)
    parsed = verdict(smi, output)
    events: list[Event] = []
    for n in range(hosts):
        host = f"gpu{n:05d}"
        for step in range(steps):
            key = f"bench.yml:{step + 3}:7"
            data = {"cmd": command.command, "rc": 0, "stdout": output, "stderr": ""}
            data["facts"] = parsed.data
            result = StepResult(
                host=host, step=f"probe {step}", status=Status.OK, commands=(command,),
                data=data, key=key,
            )  # fmt: skip
            events += [CommandRan(host=host, step=f"probe {step}", result=command)]
            events += [HostStepFinished(result=result)]
        key = f"bench.yml:{steps + 3}:7"
        events += [ActionStarted(host=host, step="drain", key=key, action="slurm_drain")]
        events += [
            ActionTaken(host=host, step="drain", key=key, action="slurm_drain", failed=False)
        ]
    return events


def measure(backend: str, target: Path | str, events: list[Event], hosts: int) -> Cost:
    async def replay() -> tuple[float, float]:
        journal = Journal(target)
        journal.start_run("bench.yml", [], check=False, hosts=hosts)
        cpu, wall = time.process_time(), time.perf_counter()
        for event in events:
            journal(event)
        journal.flush()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        journal.close()
        return cpu, wall

    cpu, wall = asyncio.run(replay())
    journal = Journal(target)
    journal.start_run("lease.yml", [], check=False, hosts=hosts)
    started = time.perf_counter()
    journal.acquire_leases([f"gpu{n:05d}" for n in range(hosts)])
    lease = time.perf_counter() - started
    started = time.perf_counter()
    journal.take_out("gpu00000", "reboot", None)
    admit = time.perf_counter() - started
    journal.release_leases()
    journal.close()
    return Cost(backend, hosts, cpu * 1000 / hosts, wall * 1000 / hosts, lease * 1000, admit * 1000)


@contextmanager
def postgres() -> Iterator[str | None]:
    if not any(Path("/usr/lib/postgresql").glob("*/bin/postgres")):
        yield None
        return
    directory = Path(tempfile.mkdtemp(prefix="fleetfix-pg."))
    try:
        done = subprocess.run(
            [str(SCRIPT), "start", str(directory)], capture_output=True, text=True, check=True
        )
        yield done.stdout.strip()
    finally:
        subprocess.run([str(SCRIPT), "stop", str(directory)], capture_output=True, check=False)
        shutil.rmtree(directory, ignore_errors=True)


def journal_costs(hosts: int, steps: int) -> list[Cost]:
    events = run_events(hosts, steps)
    costs = []
    with tempfile.TemporaryDirectory() as scratch:
        costs.append(measure("sqlite", Path(scratch) / "j.sqlite", events, hosts))
    with postgres() as dsn:
        if dsn is not None:
            costs.append(measure("postgresql", dsn, events, hosts))
    return costs


def table(costs: list[Cost]) -> str:
    rows = [HEADERS] + [
        (
            c.backend,
            str(c.hosts),
            f"{c.cpu_ms_per_host:.2f}",
            f"{c.wall_ms_per_host:.2f}",
            f"{c.lease_ms:.1f}",
            f"{c.admit_ms:.2f}",
        )
        for c in costs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    return "\n".join(
        "  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    print(table(journal_costs(args.hosts, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
