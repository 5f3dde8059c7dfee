"""The services probe (synthetic fixtures, marked as such)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import FleetfixError, ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import verdict
from fleetfix.probes.services import PROBE, ServicesFacts, UnitState
from tests.probes.absent import REAL_NODE, SHELLS, bare_path, run
from tests.probes.cases import SAMPLES


def _sample(name: str) -> ServicesFacts:
    return PROBE.parse((SAMPLES / "synthetic-services" / name).read_text(encoding="utf-8"))


def test_hgx_node_with_everything_running() -> None:
    facts = _sample("synthetic-services-hgx-h100-all-active.txt")
    assert facts.active == ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm")
    assert facts.units["dcgm"] == "not-found"
    assert facts.dcgm_unit == "nvidia-dcgm"


def test_failed_fabric_manager_and_masked_unit() -> None:
    facts = _sample("synthetic-services-fm-failed-persistenced-off.txt")
    assert facts.failed == ("nvidia-fabricmanager",)
    assert facts.units["nvidia-persistenced"] == "inactive"
    assert facts.units["dcgm"] == "activating"
    imex = next(s for s in facts.services if s.unit == "nvidia-imex")
    assert (imex.state, imex.load_state) == (UnitState.INACTIVE, "masked")
    assert facts.dcgm_unit == "dcgm"


def test_no_answer_from_a_systemctl_that_is_there_is_unknown_not_inactive() -> None:
    facts = _sample("synthetic-services-systemctl-no-answer-unknown.txt")
    assert set(facts.units.values()) == {"unknown", "inactive"}
    assert facts.units["nvidia-cuda-mps-control"] == "inactive"
    assert (facts.active, facts.dcgm_unit) == ((), None)


def test_the_real_node_without_systemd_has_it_not_installed() -> None:
    """No systemctl there: the old command printed every unit bare, MPS found by pgrep."""
    parsed = verdict(PROBE, (REAL_NODE / "probe-services.txt").read_text(encoding="utf-8"))
    assert (parsed.absent, parsed.facts) == ("systemd", None)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_command_on_a_node_without_systemctl_says_not_installed(
    shell: str, tmp_path: Path
) -> None:
    done = run(PROBE.command({}), shell, bare_path(tmp_path))
    assert (done.returncode, done.stdout) == (0, "### fleetfix not-installed systemctl\n")
    with pytest.raises(ToolNotInstalled) as raised:
        PROBE.parse(done.stdout)
    assert raised.value.tool == "systemd"


@pytest.mark.parametrize("shell", SHELLS)
def test_the_command_with_a_systemctl_that_cannot_answer_reads_unknown(
    shell: str, tmp_path: Path
) -> None:
    """systemctl installed, systemd not PID 1 (a container): the units are unknown, not
    absent and not "not installed"."""
    path = bare_path(tmp_path, ("cat",))
    systemctl = Path(path) / "systemctl"
    systemctl.write_text(
        "#!/bin/sh\necho 'System has not been booted with systemd as init system (PID 1).'"
        " >&2\nexit 1\n",
        encoding="utf-8",
    )
    systemctl.chmod(0o755)
    done = run(PROBE.command({"units": "nvidia-persistenced,nvidia-fabricmanager"}), shell, path)
    facts = PROBE.parse(done.stdout)
    assert dict(facts.units) == {
        "nvidia-persistenced": "unknown",
        "nvidia-fabricmanager": "unknown",
    }


def test_loadstate_without_activestate() -> None:
    facts = PROBE.parse("nvidia-imex not-found\nnvidia-persistenced.service loaded\n")
    assert facts.units == {"nvidia-imex": "not-found", "nvidia-persistenced": "unknown"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no unit states"),
        ("nvidia-persistenced loaded sleepy\n", "not a '<unit> <state>' line"),
        ("nvidia-persistenced weird active\n", "not a '<unit> <state>' line"),
        ("a active\na inactive\n", "listed twice"),
        ("<html>\n", "not a '<unit> <state>' line"),
    ],
)
def test_rejects_garbage(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=reason):
        PROBE.parse(text)


def test_command_asks_load_state_and_active_state() -> None:
    command = PROBE.command({})
    assert "systemctl show -p LoadState --value" in command
    assert "systemctl is-active" in command
    assert "nvidia-fabricmanager" in command
    assert "for u in gdrcopy; do" in PROBE.command({"units": ["gdrcopy"]})
    assert "for u in a b; do" in PROBE.command({"units": "a, b"})
    with pytest.raises(FleetfixError, match="units"):
        PROBE.command({"units": "x; reboot"})
