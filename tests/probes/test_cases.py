"""Every probe's fixture cases (tests/probes/<probe>/<case>.json) against its real sample."""

from __future__ import annotations

import re
from pathlib import Path

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


REAL_NODE_CONTEXT = frozenset(
    {
        "exit-codes.txt",
        "driver-version.txt",
        "nvidia-smi-L.txt",
        "os-release.txt",
        "uname.txt",
        "which.txt",
    }
)
"""Files of a real-node capture that describe the node or the run, not a probe's output (its
MANIFEST.md says what each is)."""


def _context(path: Path) -> bool:
    """A manifest (where samples came from: `*.md`), or a real-node capture's commands
    (`probe-*.sh`), stderr, the empty output of a tool the node lacks (exit-codes.txt says
    so), or a description of the machine."""
    if path.suffix == ".md":
        return True
    if "real-nodes" not in path.parts:
        return False
    suffixes = (".sh", ".stderr.txt")
    return path.name.endswith(suffixes) or path.name in REAL_NODE_CONTEXT or not path.stat().st_size


def test_every_copied_sample_has_a_case() -> None:
    """A sample copied into the fixtures is there to be tested: none may sit unused. A real
    node's probe captures are read by test_real_nodes.py; manifests and a capture's other
    files are context."""
    used = {case.sample.resolve() for _, case in CASES}
    used |= {capture.resolve() for capture in SAMPLES.glob("real-nodes/*/probe-*.txt")}
    copied = {
        path.resolve() for path in SAMPLES.rglob("*") if path.is_file() and not _context(path)
    }
    assert sorted(str(p.relative_to(SAMPLES.resolve())) for p in copied - used) == []


def test_every_probe_with_a_sample_family_has_cases() -> None:
    assert {"nvidia_smi", "xid", "ib", "slurm_node", "nccl_tests", "dcgm_diag"} <= set(PROBES)
