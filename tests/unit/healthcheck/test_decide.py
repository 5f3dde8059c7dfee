"""The health check's rules on plain probe data: findings, ownership, the drain reason."""

from __future__ import annotations

from typing import Any

from fleetfix.healthcheck.decide import (
    DEFAULT_CHECKS,
    REASON_LIMIT,
    Finding,
    Observation,
    Owner,
    drain_command,
    drain_reason,
    expected_gpus,
    findings,
    owner,
)


def gpu(index: int, **extra: Any) -> dict[str, Any]:
    return {"index": index, "bus_id": f"00000000:{index + 10:02x}:00.0", **extra}


def smi(count: int = 8, **extra: Any) -> Observation:
    data = {"gpus": [gpu(i) for i in range(count)], "gpu_count": count, "errors": [], **extra}
    return Observation("nvidia_smi", data)


NO_XID = Observation("xid", {"codes": [], "events": [], "reboot_required": False})


def test_healthy() -> None:
    assert findings({"nvidia_smi": smi(), "xid": NO_XID}, DEFAULT_CHECKS, 8) == []


def test_missing_gpu_against_the_expected_count() -> None:
    (found,) = findings({"nvidia_smi": smi(7), "xid": NO_XID}, DEFAULT_CHECKS, 8)
    assert "7 of 8 GPUs visible" in found.problem


def test_count_not_checked_without_an_expected_one() -> None:
    assert findings({"nvidia_smi": smi(7), "xid": NO_XID}, DEFAULT_CHECKS, None) == []


def test_row_remap_failure_is_an_rma_candidate() -> None:
    data = dict(smi().data or {})
    data["gpus"] = [gpu(0, remapped_rows={"failure": True}), *data["gpus"][1:]]
    (found,) = findings({"nvidia_smi": Observation("nvidia_smi", data)}, ("nvidia_smi",), 8)
    assert "RMA candidate: run the field diagnostic" in found.problem


def test_a_hung_tool_is_a_finding_never_healthy() -> None:
    hung = Observation("nvidia_smi", None, "nvidia-smi hung (no answer in 20s)")
    assert findings({"nvidia_smi": hung}, ("nvidia_smi",), 8) == [
        Finding("nvidia_smi", "nvidia-smi hung (no answer in 20s)")
    ]


def test_xid_whose_catalog_action_is_a_reboot() -> None:
    xid = Observation(
        "xid",
        {
            "codes": [79],
            "reboot_required": True,
            "events": [{"code": 79, "recommended_action": "RESTART_BM", "bus_id": None}],
        },
    )
    found = findings({"xid": xid}, ("xid",), None)
    assert found == [Finding("xid", "needs reboot: Xid 79 in this boot's kernel log")]


def test_expected_gpus_from_option_else_slurm_gres() -> None:
    assert expected_gpus(4, {"gpus_total": 8}) == 4
    assert expected_gpus(None, {"gpus_total": 8}) == 8
    assert expected_gpus(None, None) is None


def test_owner() -> None:
    assert owner(None) is Owner.UNKNOWN
    assert owner({"drained": False, "draining": False, "down": False}) is Owner.NOBODY
    assert owner({"drained": True, "reason_is_fleetfix": True}) is Owner.FLEETFIX
    assert owner({"down": True, "reason_is_fleetfix": False}) is Owner.SOMEONE_ELSE


def test_drain_reason_is_short_and_prefixed() -> None:
    long = [Finding("nvidia_smi", "x" * 400), Finding("xid", "y")]
    reason = drain_reason(long)
    assert reason.startswith("fleetfix: healthcheck: ") and reason.endswith("(+1 more)")
    assert len(reason) <= REASON_LIMIT
    assert drain_command("gpu001", "fleetfix: a b") == (
        "scontrol update NodeName=gpu001 State=DRAIN Reason='fleetfix: a b'"
    )
