"""`fleetfix xid [--sxid] CODE`: every code explained, NVIDIA's advice labelled as NVIDIA's,
what fleetfix does as knowledge/remedy.py decides it, unknown codes refused."""

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


def field(out: str, label: str) -> str:
    """One labelled field of the explanation, unwrapped (`fleetfix does`, `playbooks`, ...)."""
    lines = out.splitlines()
    head = f"  {label}:"
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    text = [lines[start][len(head) :]]
    for line in lines[start + 1 :]:
        if not line.startswith("   "):  # the next label (two spaces, then text)
            break
        text.append(line)
    return " ".join(" ".join(text).split())


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("79", ["ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "xid79.yml", "reboots"]),
        ("48", ["Double Bit ECC Error", "RESET_GPU", "playbooks/ecc.yml", "resets the GPUs"]),
        ("46", ["RESET_GPU", "playbooks/recover.yml", "whatever Xid they logged"]),
        ("74", ["WORKFLOW_NVLINK_ERR", "playbooks/nccl-health.yml", "runs nccl-tests"]),
        ("13", ["Graphics Engine Exception", "RESTART_APP", "none for this Xid itself"]),
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


def test_nvidias_lines_are_labelled_as_nvidias(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = explain(capsys, "95")
    assert field(out, "do now (NVIDIA)").startswith("RESET_GPU: The GPU should be reset.")
    assert field(out, "if it recurs (NVIDIA)").startswith("IGNORE (sympathetic)")
    assert "linked (CUDA 12.7; GPU driver R565)" in field(out, "Xid 154 (NVIDIA)")
    assert "reported (NVIDIA)" not in out  # only with --recovery-action
    _, unlinked, _ = explain(capsys, "119")
    assert "a reported None does not" in field(unlinked, "Xid 154 (NVIDIA)")


@pytest.mark.parametrize("action", [None, "None", "Reboot", "Reset", "Drain P2P"])
def test_xid79_reboots_whatever_the_driver_reports(
    capsys: pytest.CaptureFixture[str], action: str | None
) -> None:
    """remedy rule 4: a GPU off the bus is back only after a reboot; recover.yml and xid79.yml
    reboot a node that logged Xid 79, whatever the recovery action (the catalog's rule would
    follow a reported None: IGNORE)."""
    argv = ["79"] if action is None else ["79", "--recovery-action", action]
    status, out, _ = explain(capsys, *argv)
    assert status == 0
    does = field(out, "fleetfix does")
    assert does.startswith("drain the node and reboot it"), does
    assert "IGNORE" not in does
    playbooks = field(out, "playbooks")
    assert playbooks.startswith("playbooks/xid79.yml: ") and "playbooks/recover.yml: " in playbooks
    if action == "None":
        assert field(out, "reported (NVIDIA)").startswith(
            "None: replaces the buckets above: IGNORE"
        )


def test_xid119_with_reset_names_recover_yml_not_driver_reload(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = explain(capsys, "119", "--recovery-action", "Reset")
    assert status == 0
    does = field(out, "fleetfix does")
    assert does.startswith("drain the node and reset the GPU (the driver's recovery action Reset")
    playbook = field(out, "playbook")
    assert playbook.startswith("playbooks/recover.yml: ") and "driver-reload" not in out
    assert field(out, "reported (NVIDIA)").startswith("Reset: replaces the buckets above")


def test_without_an_action_it_says_fleetfix_acts_on_the_nodes_state(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = explain(capsys, "95")
    does = field(out, "fleetfix does")
    assert does.startswith("fleetfix acts on what the node reports now, not on this log line")
    assert "Reset Required on older drivers" in does
    assert "Reset, Drain P2P, Drain and Reset: drain the node and reset the GPU" in does
    assert "Reboot: drain the node and reboot it" in does
    assert "Bus Reset, System Reboot: drain the node and power-cycle it" in does
    assert "None: nothing" in does
    assert field(out, "playbooks").startswith("playbooks/ecc.yml: ")
    assert "playbooks/recover.yml: " in field(out, "playbooks")


def test_xid154_is_followed_by_recover_yml(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = explain(capsys, "154")
    assert "no shipped playbook" not in out
    assert field(out, "fleetfix does").startswith("Xid 154 is the driver announcing its recovery")
    assert field(out, "playbook").startswith("playbooks/recover.yml: ")
    _, reboot, _ = explain(capsys, "154", "--recovery-action", "OS Reboot")
    assert field(reboot, "fleetfix does").startswith("drain the node and reboot it")


def test_nvlink_codes_are_recovered_by_recover_yml_and_found_by_nccl_health(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for code in ("74", "144", "155"):
        _, out, _ = explain(capsys, code)
        playbooks = field(out, "playbooks")
        assert playbooks.startswith("playbooks/recover.yml: "), code
        assert "playbooks/nccl-health.yml: finds, does not recover" in playbooks, code


def test_a_reported_none_on_a_code_not_linked_to_154(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = explain(capsys, "119", "--recovery-action", "None")
    assert field(out, "fleetfix does").startswith("nothing (the driver's recovery action None")
    assert "does not replace the buckets above" in field(out, "reported (NVIDIA)")


def test_every_catalog_code_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    for code in xid_catalog().codes:
        status, out, err = explain(capsys, str(code))
        assert (status, err) == (0, ""), code
        assert out.startswith(f"Xid {code}: "), code
        assert "fleetfix does:" in out and "playbook" in out, code


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
        ("19071", ["Single bit ECC errors", "IGNORE", "none for this SXid itself"]),
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


def test_an_sxid_is_not_acted_on_the_state_it_leaves_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On the boards lab, recover.yml resets the GPU an SXid 24007 left with a fabric state not
    Completed: the words say that, not "the recovery is manual"."""
    status, out, _ = explain(capsys, "--sxid", "24007")
    assert status == 0
    does = field(out, "fleetfix does")
    assert does.startswith("nothing about the SXid itself")
    assert "fabric state other than Completed or Fabric Manager stopped on the board" in does
    assert "manual" not in out
    assert "fleetfix does not do this itself" in field(out, "for an operator")
    playbooks = field(out, "playbooks")
    assert playbooks.startswith("playbooks/recover.yml: ")
    assert "playbooks/nccl-health.yml: finds, does not recover" in playbooks


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


@pytest.mark.parametrize("name", ["symbol_error", "SymbolErrorCounter"])
def test_an_infiniband_counter_is_explained_by_either_name(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code = run_cli(["ib-counter", name])
    out, _ = capsys.readouterr()
    assert code == 0
    assert out.startswith("symbol_error (SymbolErrorCounter): Symbol errors\n")
    assert "reseat, clean or replace the cable" in field(out, "do")
    assert field(out, "threshold") == "a rise of 10 between two reads or more than 120 an hour"
    assert "IBTA Volume 1 16.1.3.5 PortCounters" in field(out, "sources")


def test_a_traffic_counter_has_no_threshold_and_an_unknown_one_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_cli(["ib-counter", "port_xmit_data"]) == 0
    out, _ = capsys.readouterr()
    assert field(out, "threshold") == "none: not an error on its own"
    assert run_cli(["ib-counter", "symbol_errors"]) == 1
    _, err = capsys.readouterr()
    assert "'symbol_errors' is not a counter fleetfix knows" in err and "symbol_error," in err
