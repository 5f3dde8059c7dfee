"""Parse cost per KB of every built-in probe, on the samples its fixture cases name (issue 10).

    .venv/bin/python benchmarks/parse_cost.py [--repeats 20] [--probe NAME ... | --workload]

For each probe in the built-in registry, each case under tests/probes/<probe>/*.json that
parses (not the `error` cases) names a sample (under tests/fixtures/samples, or beside the
cases); the probe's `parse` runs on it `repeats` times and the best run counts (min of
`time.perf_counter_ns`). Then nvidia_smi's fast path against its slow path on the lab's
138 KB `nvidia-smi -q -x` output, and what one host costs in the benchmark workload
(benchmarks/workload.py's five probes, each read on what the lab prints for a healthy-1000
node: tests/fixtures/samples/lab-healthy-1000/). `--workload` prints only that. Prints
tables; never asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload import PROBE_NAMES

from fleetfix.probes import BUILTIN_PROBES, nvidia_smi, probe_registry

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "probes"
SAMPLES = ROOT / "tests" / "fixtures" / "samples"
LAB_XML = SAMPLES / "nvidia-smi-xml" / "lab-healthy-1000-8xh100-550.90.07.xml"
LAB_HOST = SAMPLES / "lab-healthy-1000"
"""What the lab prints for one healthy-1000 node, per probe (its MANIFEST.md says how)."""
HEADERS = ("probe", "sample", "KB", "µs/parse", "µs/KB")
WORKLOAD_HEADERS = ("probe", "sample", "KB", "ms/parse")


@dataclass(frozen=True, slots=True)
class Sample:
    """One probe's sample: the file a fixture case names."""

    probe: str
    path: Path
    params: tuple[tuple[str, Any], ...] = ()
    """The case's step parameters (a time window for the kernel log, an expected count)."""

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True, slots=True)
class ParseCost:
    """The best of `repeats` parses of one sample."""

    probe: str
    sample: str
    size_bytes: int
    best_ns: int
    repeats: int

    @property
    def kb(self) -> float:
        return self.size_bytes / 1000

    @property
    def us_per_parse(self) -> float:
        return self.best_ns / 1000

    @property
    def us_per_kb(self) -> float:
        return self.us_per_parse / self.kb if self.size_bytes else 0.0


def probe_samples(
    probes: Sequence[str] = BUILTIN_PROBES, *, cases: Path = CASES, per_probe: int | None = None
) -> list[Sample]:
    """The samples of `probes` their parsing cases name (sorted; `per_probe` first ones)."""
    found: list[Sample] = []
    for probe in probes:
        read: dict[Path, tuple[tuple[str, Any], ...]] = {}
        for case in sorted((cases / probe).glob("*.json")):
            spec = json.loads(case.read_text(encoding="utf-8"))
            if "error" not in spec:
                path = (SAMPLES / spec["sample"]).resolve()
                read.setdefault(path, tuple(sorted((spec.get("params") or {}).items())))
        found.extend(Sample(probe, path, read[path]) for path in sorted(read)[:per_probe])
    return found


def best_ns(function: Callable[[str], Any], text: str, repeats: int) -> int:
    """The fastest of `repeats` calls of `function(text)`, in nanoseconds."""
    best = None
    for _ in range(repeats):
        start = time.perf_counter_ns()
        function(text)
        elapsed = time.perf_counter_ns() - start
        best = elapsed if best is None else min(best, elapsed)
    return best or 0


def _text(path: Path) -> str:
    # As the fixture cases read them: a non-UTF-8 byte must not stop the measurement.
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def parse_costs(samples: Sequence[Sample] | None = None, *, repeats: int = 20) -> list[ParseCost]:
    """Each sample's best parse time through its probe's `read`, the one way output becomes
    facts (terminal escapes stripped first; default: all samples)."""
    registry = probe_registry()
    costs: list[ParseCost] = []
    for sample in probe_samples() if samples is None else samples:
        text = _text(sample.path)
        probe = registry.get(sample.probe).bind(dict(sample.params))
        elapsed = best_ns(probe.read, text, repeats)
        size = len(text.encode("utf-8", "surrogateescape"))
        costs.append(ParseCost(sample.probe, sample.name, size, elapsed, repeats))
    return costs


def nvidia_smi_paths(path: Path = LAB_XML, *, repeats: int = 20) -> list[ParseCost]:
    """nvidia_smi's fast path (`parse`) and slow path (clean the paste, defusedxml) on `path`."""
    text = _text(path)
    size = len(text.encode("utf-8", "surrogateescape"))
    paths = (("nvidia_smi fast", nvidia_smi.parse), ("nvidia_smi slow", nvidia_smi._parse_pasted))
    return [
        ParseCost(name, path.name, size, best_ns(function, text, repeats), repeats)
        for name, function in paths
    ]


def workload_samples() -> list[Sample]:
    """One host's output for each probe of the benchmark workload, as the lab prints it (the
    nvidia_smi one is the lab's -q -x sample, which the lab renders byte for byte)."""
    return [
        Sample(probe, LAB_XML if probe == "nvidia_smi" else LAB_HOST / f"probe-{probe}.txt")
        for probe in PROBE_NAMES
    ]


def workload_costs(*, repeats: int = 20) -> list[ParseCost]:
    """Each workload probe's best read of its lab output, then one row for the host: the
    five together (`sample` says how many)."""
    costs = parse_costs(workload_samples(), repeats=repeats)
    size = sum(cost.size_bytes for cost in costs)
    elapsed = sum(cost.best_ns for cost in costs)
    return [*costs, ParseCost("per host", f"{len(costs)} probes", size, elapsed, repeats)]


def cost_table(costs: Sequence[ParseCost]) -> list[str]:
    """The costs as aligned text lines, a header first."""
    rows = [HEADERS] + [
        (c.probe, c.sample, f"{c.kb:.1f}", f"{c.us_per_parse:.1f}", f"{c.us_per_kb:.1f}")
        for c in costs
    ]
    return _aligned(rows)


def workload_table(costs: Sequence[ParseCost]) -> list[str]:
    """The workload's costs in milliseconds, as aligned text lines, a header first."""
    rows = [WORKLOAD_HEADERS] + [
        (c.probe, c.sample, f"{c.kb:.1f}", f"{c.us_per_parse / 1000:.3f}") for c in costs
    ]
    return _aligned(rows)


def _aligned(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if column < 2 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]


def probe_totals(costs: Sequence[ParseCost]) -> list[ParseCost]:
    """One row per probe: all its samples together (`sample` says how many)."""
    totals: list[ParseCost] = []
    for probe in dict.fromkeys(cost.probe for cost in costs):
        mine = [cost for cost in costs if cost.probe == probe]
        size = sum(cost.size_bytes for cost in mine)
        elapsed = sum(cost.best_ns for cost in mine)
        totals.append(ParseCost(probe, f"{len(mine)} samples", size, elapsed, mine[0].repeats))
    return totals


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="parses per sample (best)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--probe", action="append", help="only this probe (repeatable)")
    which.add_argument(
        "--workload", action="store_true", help="only one host of the benchmark workload"
    )
    args = parser.parse_args(argv)
    if not args.workload:
        _print_probes(tuple(args.probe or BUILTIN_PROBES), args.repeats)
    if args.workload or not args.probe:
        print("\n".join(workload_table(workload_costs(repeats=args.repeats))))
    return 0


def _print_probes(probes: tuple[str, ...], repeats: int) -> None:
    costs = parse_costs(probe_samples(probes), repeats=repeats)
    print("\n".join(cost_table(costs)))
    print()
    print("\n".join(cost_table(probe_totals(costs))))
    if "nvidia_smi" in probes:
        print()
        print("\n".join(cost_table(nvidia_smi_paths(repeats=repeats))))
    print()


if __name__ == "__main__":
    sys.exit(main())
