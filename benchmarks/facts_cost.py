"""What gathering facts costs the controller per host (issue 22): the one command's output,
parsed into Ansible's facts and stored as a host's variables.

    .venv/bin/python benchmarks/facts_cost.py [--repeats 20]

The output is a real capture (tests/fixtures/facts/debian12-vm.txt: this machine's, every
section) with its GPU section replaced by eight rows of the real H100 query (NVIDIA's
--query-gpu output for an 8-GPU node, tests/fixtures/facts/gpus-h100-allfields.txt's row,
repeated with its index). Best of `repeats` (min of time.perf_counter_ns). Prints figures;
never asserts a timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fleetfix.facts.parse import parse_facts
from fleetfix.facts.step import prefixed, store_facts

ROOT = Path(__file__).resolve().parent.parent
FACTS = ROOT / "tests" / "fixtures" / "facts"
GPUS = 8


def gpu_node_output() -> str:
    """The VM's capture with an 8-GPU H100 node's nvidia-smi section."""
    text = (FACTS / "debian12-vm.txt").read_text()
    head, _marker, _old = text.partition("@@ff:gpus\n")
    header, row = (FACTS / "gpus-h100-allfields.txt").read_text().splitlines()[1:3]
    rows = [row.replace(", 0, [Requested", f", {i}, [Requested", 1) for i in range(GPUS)]
    return head + "@@ff:gpus\n" + "\n".join([header, *rows]) + "\n"


def facts_cost_ms(repeats: int = 20) -> tuple[float, int]:
    """Best ms to parse one host's output and store its facts; the output's size in bytes."""
    text = gpu_node_output()
    best = None
    for _ in range(repeats):
        started = time.perf_counter_ns()
        host: dict[str, object] = {}
        store_facts(host, prefixed(parse_facts(text), ["all"]))
        took = time.perf_counter_ns() - started
        best = took if best is None else min(best, took)
    return (best or 0) / 1e6, len(text.encode())


def facts_cost_lines(repeats: int = 20) -> list[str]:
    ms, size = facts_cost_ms(repeats)
    return [
        "facts gathering, controller side (benchmarks/facts_cost.py; one GPU node's output,"
        f" {size / 1024:.1f} KB, best of {repeats}):",
        f"  parse + store: {ms:.3f} ms/host (target <= 2 ms); commands per host: 1",
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    options = parser.parse_args(argv)
    print("\n".join(facts_cost_lines(options.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
