"""`fleetfix probe` with every probe, `--transport local`, on the real H200 VM node's captures
(tests/unit/cli/real_node.py): a healthy node without Slurm, InfiniBand, DCGM, nccl-tests or
systemd says "not installed" for those and exits 0 (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.cli.real_node import NOT_INSTALLED, PROBES, probe


def test_a_healthy_node_without_slurm_ib_dcgm_nccl_tests_or_systemd_exits_0(
    tmp_path: Path,
) -> None:
    done = probe(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = [line for line in done.stdout.splitlines() if "localhost" in line]
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    header = next(line for line in done.stdout.splitlines() if "problem" in line)
    names = [cell.strip() for cell in header.strip("┃ ").split("┃")]
    shown = dict(zip(names, cells, strict=True))
    assert shown["problem"] == "-", row
    assert {name: shown[name] for name in NOT_INSTALLED} == dict.fromkeys(
        NOT_INSTALLED, "not installed"
    )
    assert shown["nvidia_smi"] == "1 GPUs, driver 580.159.04"


def test_the_json_names_each_tool_the_node_lacks(tmp_path: Path) -> None:
    done = probe(tmp_path, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    probes = json.loads(done.stdout)["hosts"]["localhost"]
    assert {name: probes[name]["absent"] for name in NOT_INSTALLED} == NOT_INSTALLED
    assert all(probes[name]["facts"] is None for name in NOT_INSTALLED)
    present = set(PROBES) - NOT_INSTALLED.keys()
    assert {name: probes[name]["absent"] for name in present} == dict.fromkeys(present)
    assert all(probes[name]["facts"] is not None for name in present), probes
