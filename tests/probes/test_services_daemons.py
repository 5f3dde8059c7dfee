"""The services probe also reports the monitoring units that hold GPUs (dcgm-exporter, nvsm)
and the CUDA MPS control daemon, which is found by process name, not as a unit."""

from __future__ import annotations

import subprocess

from fleetfix.probes.services import MPS_CONTROL, PROBE, UnitState


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


def test_the_command_runs_where_nothing_is_installed() -> None:
    """No systemd, no MPS (this test machine): every unit unknown, MPS inactive, nothing
    active; the output parses."""
    done = subprocess.run(
        ["bash", "-c", PROBE.command({})], capture_output=True, text=True, check=False
    )
    facts = PROBE.parse(done.stdout)
    assert MPS_CONTROL in facts.units and MPS_CONTROL not in facts.active
