"""Every probe's fixture cases (tests/probes/<probe>/<case>.json) against its real sample."""

from __future__ import annotations

import re

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes import probe_registry
from fleetfix.probes.base import to_data
from tests.probes.cases import SAMPLES, TESTS, Case, load_cases

PROBES = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and list(p.glob("*.json")))
CASES = [(probe, case) for probe in PROBES for case in load_cases(probe)]
REGISTRY = probe_registry()


@pytest.mark.parametrize(("probe", "case"), CASES, ids=[f"{p}/{c.name}" for p, c in CASES])
def test_case(probe: str, case: Case) -> None:
    read = REGISTRY.get(probe).read  # as every caller reads output: escapes stripped, params
    if case.error is not None:
        with pytest.raises(ProbeParseError, match=re.escape(case.error)):
            read(case.text(), case.params)
    else:
        assert to_data(read(case.text(), case.params)) == case.expected


def test_every_copied_sample_has_a_case() -> None:
    """A sample copied into the fixtures is there to be tested: none may sit unused."""
    used = {case.sample.resolve() for _, case in CASES}
    copied = {path.resolve() for path in SAMPLES.rglob("*") if path.is_file()}
    assert sorted(str(p.relative_to(SAMPLES.resolve())) for p in copied - used) == []


def test_every_probe_with_a_sample_family_has_cases() -> None:
    assert {"nvidia_smi", "xid", "ib", "slurm_node", "nccl_tests", "dcgm_diag"} <= set(PROBES)
