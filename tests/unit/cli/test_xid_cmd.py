"""`fleetfix xid [--sxid] CODE`: every code explained, unknown codes refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleetfix.cli import run_cli
from fleetfix.knowledge.sxid import sxid_catalog
from fleetfix.knowledge.xid import xid_catalog


def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run_cli(["xid", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("79", ["ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "xid79.yml", "reboots"]),
        ("48", ["Double Bit ECC Error", "RESET_GPU", "playbooks/ecc.yml", "resets the GPUs"]),
        ("46", ["RESET_GPU", "playbooks/driver-reload.yml", "reloads the NVIDIA kernel modules"]),
        ("74", ["WORKFLOW_NVLINK_ERR", "playbooks/nccl-health.yml", "runs nccl-tests"]),
        ("13", ["Graphics Engine Exception", "RESTART_APP", "no shipped playbook acts on it"]),
        ("151", ["ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", "VM owning the affected GPU"]),
        ("160", ["CHANNEL_RETIREMENT_EVENT", "linked (CUDA 12.9; GPU driver R575)"]),
        ("172", ["UNCORRECTABLE_SRAM_ERROR", "gives no action for this code", "Xid 48"]),
        ("167", ["PCIE_FATAL_TIMEOUT", "fleetfix's choice is CONTACT_SUPPORT"]),
    ],
)
def test_explains_in_operator_words(
    capsys: pytest.CaptureFixture[str], code: str, expected: list[str]
) -> None:
    status, out, err = explain(capsys, code)
    assert (status, err) == (0, "")
    flat = " ".join(out.split())  # the explanation is wrapped at 100 columns
    for text in expected:
        assert text in flat, text


def test_xid154_linkage_says_whether_the_drivers_action_overrides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, linked, _ = explain(capsys, "95")
    linked = " ".join(linked.split())
    assert "linked (CUDA 12.7; GPU driver R565)" in linked
    assert 'fleetfix follows it instead of this table, even "None"' in linked
    _, unlinked, _ = explain(capsys, "119")
    unlinked = " ".join(unlinked.split())
    assert "not linked" in unlinked and "a reported None does not" in unlinked


def test_a_reported_recovery_action_is_shown_overriding_the_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = explain(capsys, "79", "--recovery-action", "Reset")
    assert status == 0
    fleetfix_does = out.split("fleetfix does:", 1)[1].split("playbook:", 1)[0]
    assert "RESET_GPU" in fleetfix_does
    assert "overrides the catalog (RESTART_BM)" in " ".join(fleetfix_does.split())


def test_every_catalog_code_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    for code in xid_catalog().codes:
        status, out, err = explain(capsys, str(code))
        assert (status, err) == (0, ""), code
        assert out.startswith(f"Xid {code}: "), code
        assert "fleetfix does:" in out and "playbook:" in out, code


@pytest.mark.parametrize("code", ["999", "173", "0", "-1"])
def test_an_unknown_xid_is_an_error_not_a_guess(
    capsys: pytest.CaptureFixture[str], code: str
) -> None:
    status, out, err = explain(capsys, code)
    assert (status, out) == (1, "")
    assert f"Xid {code} is not in NVIDIA's Xid catalog" in err
    assert "codes 1-172" in err


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("12028", ["egress non-posted PRIV error", "Non-Fatal NVSwitch SXid Errors", "Xid 45"]),
        ("11001", ["Fatal NVSwitch SXid Errors (Table 22)", "reset all its GPUs and NVSwitches"]),
        ("20034", ["LTSSM Fault Up", "In an H100 system, reset the GPU", "RESET_GPU"]),
        ("22003", ["Always Fatal", "RESTART_BM", "restart the host"]),
        ("19071", ["Single bit ECC errors", "IGNORE", "no shipped playbook acts on it"]),
        ("10004", ["Host_thermal_event_start", "CHECK_THERMALS", "cooling"]),
    ],
)
def test_sxids_are_explained(
    capsys: pytest.CaptureFixture[str], code: str, expected: list[str]
) -> None:
    status, out, err = explain(capsys, "--sxid", code)
    assert (status, err) == (0, "")
    assert out.startswith(f"SXid {code}: ")
    flat = " ".join(out.split())
    for text in expected:
        assert text in flat, text


def test_every_sxid_in_the_table_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    for code in sxid_catalog().codes:
        status, out, _ = explain(capsys, "--sxid", str(code))
        assert status == 0 and out.startswith(f"SXid {code}: "), code


def test_an_unknown_sxid_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = explain(capsys, "--sxid", "12345")
    assert (status, out) == (1, "")
    assert "SXid 12345 is not in fleetfix's SXid table" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["abc"], "invalid int value"),
        (["79", "--recovery-action", "sometimes"], "unrecognised GPU recovery action"),
        (["--sxid", "12028", "--recovery-action", "Reset"], "applies to Xids, not to SXids"),
    ],
)
def test_bad_options_exit_5(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, _, err = explain(capsys, *argv)
    assert status == 5
    assert message in err


def test_unknown_code_from_the_shell_exits_1_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fleetfix", "xid", "999"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "Xid 999 is not in NVIDIA's Xid catalog" in done.stderr
    assert "Traceback" not in done.stderr
