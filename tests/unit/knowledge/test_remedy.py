"""knowledge/remedy.py: one verdict per node from real nvidia-smi output, and each rule by
changing one field of a real reading (the rule, not the parser, is under test there)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleetfix.knowledge.health import Level, summarize
from fleetfix.knowledge.remedy import Remedy, decide
from fleetfix.playbook.filters import FILTERS
from fleetfix.probes.base import to_data
from fleetfix.probes.nvidia_smi import PROBE
from tests.probes.cases import SAMPLES

HEALTHY = (
    "nvidia-smi-q/nvgpuexp-h100-vm-590.48.01-idle-q.txt",
    "nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-v12.xml",
    "nvidia-smi-xml/telegraf-rtx4000-sff-ada-v13-595.84.xml",
    "nvidia-smi-q/gpud-e2e-a10-550.127.05-q-full.txt",
)
H100_590 = "nvidia-smi-q/nvgpuexp-h100-vm-590.48.01-idle-q.txt"
RTX4090_535 = "nvidia-smi-q/gpud-8xrtx4090-535.154.05-q-full-2busy.txt"
"""Eight GPUs, a driver that prints no recovery action."""


def _data(sample: str) -> dict[str, Any]:
    data = to_data(PROBE.parse((SAMPLES / sample).read_text(encoding="utf-8")))
    assert isinstance(data, dict)
    return data


def _with_gpu0(sample: str, **changes: Any) -> dict[str, Any]:
    """The reading with GPU 0's fields changed (dotted keys reach into sections)."""
    data = copy.deepcopy(_data(sample))
    gpu = data["gpus"][0]
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        target = gpu
        for part in path:
            target = target.setdefault(part, {}) or {}
        target[last] = value
    return data


@pytest.mark.parametrize("sample", HEALTHY)
def test_real_healthy_readings_need_nothing(sample: str) -> None:
    verdict = decide(_data(sample))
    assert verdict.remedy is Remedy.NONE, verdict.why


def test_the_real_recovery_action_field_is_read() -> None:
    """590's -q prints "GPU Recovery Action : None" on every GPU: the rule sees it."""
    data = _data(H100_590)
    assert {gpu["recovery_action"] for gpu in data["gpus"]} == {"none"}


def test_the_synthetic_reset_sample_asks_for_a_reset() -> None:
    verdict = decide(
        _data("nvidia-smi-q/synthetic-h100-590.48.01-row-remap-pending-dbe-recovery-reset.txt")
    )
    assert verdict.remedy is Remedy.RESET
    assert verdict.reset_gpus and set(verdict.reset_gpus) == set(verdict.gpus)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"recovery_action": "reset"}, Remedy.RESET),
        ({"recovery_action": "drain_and_reset"}, Remedy.RESET),
        ({"recovery_action": "drain_p2p"}, Remedy.RESET),
        ({"recovery_action": "reboot"}, Remedy.REBOOT),
        ({"recovery_action": "system_reboot"}, Remedy.REBOOT),
        ({"recovery_action": "recover_imex_domain"}, Remedy.RECOVER_IMEX),
        ({"recovery_action": "unknown"}, Remedy.HUMAN),
        ({"recovery_action": None, "reset_required": True}, Remedy.RESET),
        ({"recovery_action": None, "drain_and_reset_recommended": True}, Remedy.RESET),
        ({"remapped_rows__pending": True}, Remedy.RESET),
        ({"retired_pages__pending": True}, Remedy.RESET),
        ({"ecc__volatile__dbe": 2}, Remedy.RESET),
        ({"fabric": {"state": "In Progress", "status": "N/A"}}, Remedy.RESET),
        ({"fabric": {"state": "Completed", "status": "Success"}}, Remedy.NONE),
        ({"ecc__aggregate__sram_threshold_exceeded": True}, Remedy.FIELD_DIAG),
        ({"remapped_rows__failure": True}, Remedy.RMA),
        ({"ecc__unrepairable_memory": True}, Remedy.RMA),
        ({"remapped_rows__histogram": {"max": 0, "none": 1}}, Remedy.RMA),
    ],
)
def test_each_rule(change: dict[str, Any], expected: Remedy) -> None:
    verdict = decide(_with_gpu0(H100_590, **change))
    assert verdict.remedy is expected, verdict.why
    if expected is not Remedy.NONE:
        assert verdict.gpus == (0,)


def test_the_worst_need_wins_and_resets_are_still_listed() -> None:
    data = _with_gpu0(RTX4090_535, remapped_rows__failure=True)
    data["gpus"][1]["recovery_action"] = "reset"
    verdict = decide(data)
    assert verdict.remedy is Remedy.RMA
    assert verdict.gpus == (0,) and verdict.reset_gpus == (1,)


def test_a_missing_gpu_asks_for_a_reboot() -> None:
    data = _data(H100_590)
    data.update(count_ok=False, expected_gpus=data["gpu_count"] + 1)
    assert decide(data).remedy is Remedy.REBOOT


def test_no_reading_is_a_humans_call() -> None:
    assert decide(None).remedy is Remedy.HUMAN


def test_xid_154_counts_only_when_nvidia_smi_does_not_report_the_action() -> None:
    data = _data(RTX4090_535)
    assert {gpu["recovery_action"] for gpu in data["gpus"]} == {None}
    bus = data["gpus"][2]["bus_id"]
    xid = {"codes": [154], "events": [{"code": 154, "bus_id": bus, "recovery_action": "reboot"}]}
    verdict = decide(data, xid)
    assert verdict.remedy is Remedy.REBOOT and verdict.gpus == (2,)
    for gpu in data["gpus"]:
        gpu["recovery_action"] = "none"  # a newer driver says None now: the log line is history
    assert decide(data, xid).remedy is Remedy.NONE


def test_an_old_xid_in_the_log_alone_asks_for_nothing_but_79_does() -> None:
    data = _data(H100_590)
    assert decide(data, {"codes": [48, 63], "events": []}).remedy is Remedy.NONE
    assert decide(data, {"codes": [79], "events": []}).remedy is Remedy.REBOOT


def test_the_health_verdict_and_the_filter_say_the_same() -> None:
    data = _with_gpu0(H100_590, recovery_action="reset")
    health = summarize("nvidia_smi", data)
    assert health.level is Level.BAD and "needs reset" in health.text
    shown = FILTERS["fleetfix_remedy"](data)
    assert shown["remedy"] == "reset" and shown["needs_action"] and shown["reset_gpus"] == [0]
    assert FILTERS["fleetfix_remedy"](None)["remedy"] == "human"
