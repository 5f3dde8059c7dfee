"""scripts/ansible_targets.py masks what differs between two runs of one tool before comparing
printed values: loops/ prints now(fmt='%s.%f') stamps of a paused loop and their difference,
which no two runs share (the blocks below are both tools' output of one harness run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).parents[2] / "scripts" / "ansible_targets.py"


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ansible_targets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _times(*stamps: str) -> str:
    listed = ",\n".join(f'        "{stamp}"' for stamp in stamps)
    return f'ok: [testhost] => {{\n    "times": [\n{listed}\n    ]'


def test_loop_timestamps_and_their_difference_are_masked() -> None:
    harness = _harness()
    ansible = _times("1796659928.523671", "1796659929.139214")
    fleetfix = _times("1796659948.470451", "1796659949.072388")
    assert harness._masked(ansible) == harness._masked(fleetfix)
    assert harness._masked(ansible).count("<epoch>") == 2
    said = 'ok: [testhost] => {\n    "msg": "tdiff=1.2328741550445557"'
    assert harness._masked(said) == 'ok: [testhost] => {\n    "msg": "tdiff=<n>"'


def test_other_numbers_are_compared_as_printed() -> None:
    harness = _harness()
    block = 'ok: [testhost] => {\n    "msg": "rc=12345.678901 count=3"'
    assert harness._masked(block) == block
