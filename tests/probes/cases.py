"""Fixture cases for probe parsers: tests/probes/<probe>/<case>.json names a sample and its facts.

A case file looks like {"sample": "nvidia-smi-xml/x.xml", "expected": {...}} where the sample
path is relative to tests/fixtures/samples/ and "expected" is `to_data(probe.read(text, params))`,
read with the case's optional "params" (the step's parameters, e.g. {"expected_gpus": 1}). A
case may instead say {"sample": ..., "error": "substring of the ProbeParseError message"} for
output that must be rejected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
SAMPLES = TESTS.parent / "fixtures" / "samples"


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    sample: Path
    expected: Any
    error: str | None
    params: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        return self.sample.read_text(encoding="utf-8", errors="surrogateescape")


def load_cases(probe: str) -> list[Case]:
    """Every case of one probe, sorted by name (pytest ids)."""
    cases = []
    for path in sorted((TESTS / probe).glob("*.json")):
        spec = json.loads(path.read_text(encoding="utf-8"))
        cases.append(
            Case(
                name=path.stem,
                sample=SAMPLES / spec["sample"],
                expected=spec.get("expected"),
                error=spec.get("error"),
                params=spec.get("params", {}),
            )
        )
    return cases
