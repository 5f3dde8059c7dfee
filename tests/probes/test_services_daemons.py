"""The services probe also reports the monitoring units that hold GPUs (dcgm-exporter, nvsm)
and the CUDA MPS control daemon, which is found by process name, not as a unit."""

from __future__ import annotations

from pathlib import Path

from fleetfix.probes.services import DEFAULT_UNITS, MPS_CONTROL, PROBE, UnitState
from tests.probes.absent import bare_path, run


def test_default_command_asks_for_the_gpu_holders_and_mps() -> None:
    command = PROBE.command({})
    assert " dcgm-exporter nvsm; do " in command
    assert f"pgrep -x {MPS_CONTROL}" in command
    assert "pgrep" not in PROBE.command({"units": ["gdrcopy"]})


def test_mps_control_reads_as_a_unit_state() -> None:
    facts = PROBE.parse(
        "nvidia-dcgm loaded active\ndcgm-exporter loaded active\nnvsm not-found inactive\n"
        f"{MPS_CONTROL} active\n"
    )
    assert facts.active == ("nvidia-dcgm", "dcgm-exporter", MPS_CONTROL)
    assert facts.not_found == ("nvsm",)
    unknown = PROBE.parse(f"nvidia-dcgm loaded active\n{MPS_CONTROL} \n")
    assert unknown.units[MPS_CONTROL] == UnitState.UNKNOWN


def test_the_command_runs_where_systemd_cannot_answer_and_no_mps_runs(tmp_path: Path) -> None:
    """systemctl there but silent (no systemd as PID 1), pgrep finds no MPS daemon: every
    unit unknown, MPS inactive, nothing active; the output parses."""
    path = bare_path(tmp_path, ("pgrep",))
    (Path(path) / "systemctl").write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
    (Path(path) / "systemctl").chmod(0o755)
    done = run(PROBE.command({}), "bash", path)
    facts = PROBE.parse(done.stdout)
    assert facts.units[MPS_CONTROL] == UnitState.INACTIVE
    assert {facts.units[u] for u in DEFAULT_UNITS} == {UnitState.UNKNOWN}
    assert facts.active == ()
