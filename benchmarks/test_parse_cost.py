"""Tests of benchmarks/parse_cost.py: every probe with samples gets a row, one host of the
benchmark workload gets its five; no timing asserts.

.venv/bin/pytest benchmarks/test_parse_cost.py -q
"""

from __future__ import annotations

import json

import pytest
from parse_cost import (
    CASES,
    HEADERS,
    LAB_XML,
    SAMPLES,
    WORKLOAD_HEADERS,
    ParseCost,
    cost_table,
    main,
    nvidia_smi_paths,
    parse_costs,
    probe_samples,
    probe_totals,
    workload_costs,
)
from workload import PROBE_NAMES

from fleetfix.probes import BUILTIN_PROBES


def _probes_with_parsing_cases() -> set[str]:
    return {
        probe
        for probe in BUILTIN_PROBES
        for case in (CASES / probe).glob("*.json")
        if "error" not in json.loads(case.read_text(encoding="utf-8"))
    }


def test_one_sample_per_probe_gives_a_row_per_probe() -> None:
    samples = probe_samples(per_probe=1)
    costs = parse_costs(samples, repeats=1)
    probes = _probes_with_parsing_cases()
    assert {"nvidia_smi", "xid", "gpu_processes", "shm", "services"} <= probes
    assert [cost.probe for cost in costs] == [s.probe for s in samples]
    assert set(cost.probe for cost in costs) == probes
    table = cost_table(costs)
    assert table[0].split() == list(HEADERS)
    assert len(table) == 1 + len(probes)
    assert {row.split()[0] for row in table[1:]} == probes
    assert all(cost.size_bytes > 0 and cost.best_ns > 0 for cost in costs)


def test_samples_beside_the_cases_are_found() -> None:
    samples = probe_samples(("gpu_processes",))
    assert any(sample.path.parent.name == "samples" for sample in samples)
    assert all(sample.path.is_file() for sample in samples)


def test_error_cases_are_not_timed() -> None:
    timed = {sample.path for sample in probe_samples(("services",))}
    refused = {
        (SAMPLES / json.loads(case.read_text(encoding="utf-8"))["sample"]).resolve()
        for case in (CASES / "services").glob("*.json")
        if "error" in json.loads(case.read_text(encoding="utf-8"))
    }
    assert refused, "services has an error case to leave out"
    assert not timed & refused


def test_per_kb_figures_follow_the_size() -> None:
    cost = ParseCost("x", "s", size_bytes=2000, best_ns=6000, repeats=1)
    assert (cost.kb, cost.us_per_parse, cost.us_per_kb) == (2.0, 6.0, 3.0)
    (total,) = probe_totals([cost, ParseCost("x", "t", 1000, 3000, 1)])
    assert (total.sample, total.size_bytes, total.best_ns) == ("2 samples", 3000, 9000)


def test_nvidia_smi_fast_and_slow_paths_are_both_timed() -> None:
    fast, slow = nvidia_smi_paths(repeats=1)
    assert (fast.probe, slow.probe) == ("nvidia_smi fast", "nvidia_smi slow")
    assert fast.sample == slow.sample == LAB_XML.name
    assert fast.size_bytes > 100_000


def test_the_script_prints_its_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--repeats", "1", "--probe", "services", "--probe", "nvidia_smi"]) == 0
    out = capsys.readouterr().out
    assert "nvidia_smi slow" in out
    assert "services" in out
    assert "xid" not in out


def test_one_host_of_the_workload_is_timed_probe_by_probe() -> None:
    *probes, host = workload_costs(repeats=1)
    assert [cost.probe for cost in probes] == list(PROBE_NAMES)
    assert all(cost.size_bytes > 0 and cost.best_ns > 0 for cost in probes)
    assert probes[0].sample == LAB_XML.name
    assert (host.probe, host.sample) == ("per host", "5 probes")
    assert host.best_ns == sum(cost.best_ns for cost in probes)


def test_the_workload_alone_prints_milliseconds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--repeats", "1", "--workload"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(WORKLOAD_HEADERS)
    assert [line.split()[0] for line in lines[1:]] == [*PROBE_NAMES, "per"]
    assert float(lines[-1].split()[-1]) > 0
