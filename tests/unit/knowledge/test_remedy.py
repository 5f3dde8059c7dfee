"""knowledge/remedy.py: one verdict per node from real nvidia-smi output, and each rule by
changing one field of a real reading (the rule, not the parser, is under test there)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleetfix.knowledge.health import Level, gpu_health, summarize
from fleetfix.knowledge.recovery import RecoveryAction
from fleetfix.knowledge.remedy import (
    Remedy,
    decide,
    for_xid,
    from_log,
    not_fixed,
    recovery_remedy,
    unit_presence,
)
from fleetfix.playbook.filters import FILTERS
from fleetfix.probes.base import to_data
from fleetfix.probes.nvidia_smi import PROBE
from fleetfix.probes.services import PROBE as SERVICES
from fleetfix.probes.xid import PROBE as XID
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
        ({"recovery_action": "system_reboot"}, Remedy.POWER_CYCLE),
        ({"recovery_action": "bus_reset"}, Remedy.POWER_CYCLE),
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
        # RMA candidates, not RMAs: NVIDIA's field diagnostic confirms an RMA.
        ({"remapped_rows__failure": True}, Remedy.FIELD_DIAG),
        ({"ecc__unrepairable_memory": True}, Remedy.FIELD_DIAG),
        ({"remapped_rows__histogram": {"max": 0, "none": 1}}, Remedy.FIELD_DIAG),
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
    assert verdict.remedy is Remedy.FIELD_DIAG
    assert verdict.gpus == (0,) and verdict.reset_gpus == (1,)


def test_a_missing_gpu_asks_for_a_reboot() -> None:
    data = _data(H100_590)
    data.update(count_ok=False, expected_gpus=data["gpu_count"] + 1)
    assert decide(data).remedy is Remedy.REBOOT


def test_a_gpu_the_driver_lost_is_counted_without_an_expected_count() -> None:
    """No inventory count, no Gres: the GPU the driver lists as lost is still one the node
    has (the health sweep said "7 of None GPUs visible")."""
    data = _data(H100_590)
    data.update(expected_gpus=None, lost_gpus=["00000000:9D:00.0"])
    verdict = decide(data)
    assert verdict.remedy is Remedy.REBOOT
    seen = data["gpu_count"]
    assert f"{seen} of {seen + 1} GPUs visible" in " ".join(verdict.why), verdict.why


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


# --- rule 6: Fabric Manager stopped on an NVSwitch board ---------------------------------------

HGX_H100 = "nvidia-smi-xml/lab-healthy-1000-8xh100-550.90.07.xml"
"""Eight H100s registered with the fabric (state Completed)."""
A100_SXM = "nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-v12.xml"
"""No fabric state (N/A): no NVLink fabric registration."""
UNITS = SAMPLES / "synthetic-services"


def _units(sample: str) -> dict[str, Any]:
    text = (UNITS / sample).read_text(encoding="utf-8") if sample.endswith(".txt") else sample
    data = to_data(SERVICES.parse(text))
    assert isinstance(data, dict)
    return data


FM_ACTIVE = "synthetic-services-hgx-h100-all-active.txt"
FM_FAILED = "synthetic-services-fm-failed-persistenced-off.txt"
NO_SYSTEMD = "synthetic-services-systemctl-no-answer-unknown.txt"


def test_fabric_manager_not_running_on_an_nvswitch_board_resets_every_gpu() -> None:
    smi = _data(HGX_H100)
    verdict = decide(smi, services=_units(FM_FAILED))
    assert verdict.remedy is Remedy.RESET
    assert set(verdict.reset_gpus) == set(range(8)) == set(verdict.gpus)
    assert all("nvidia-fabricmanager is not running" in why for why in verdict.why)
    shown = FILTERS["fleetfix_remedy"](smi, None, _units(FM_FAILED))
    assert shown["remedy"] == "reset" and shown["reset_gpus"] == list(range(8))


@pytest.mark.parametrize(
    ("sample", "units"),
    [
        (HGX_H100, FM_ACTIVE),  # running
        (HGX_H100, NO_SYSTEMD),  # nobody could ask: never guessed installed
        (HGX_H100, None),  # no services data: the rule is not applied
        (A100_SXM, FM_FAILED),  # no fabric state: not a board whose GPUs register
        # `is-active` alone says "inactive" for a unit that does not exist: not installed
        (HGX_H100, "synthetic-services-is-active-loop-two-column.txt"),
        # masked: a site whose Fabric Manager runs elsewhere (a service VM, switch trays)
        (HGX_H100, "nvidia-fabricmanager masked inactive\n"),
    ],
)
def test_fabric_manager_rule_needs_a_stopped_unit_and_a_registering_board(
    sample: str, units: str | None
) -> None:
    services = None if units is None else _units(units)
    verdict = decide(_data(sample), services=services)
    assert verdict.remedy is Remedy.NONE, verdict.why


def test_the_health_verdict_sees_fabric_manager_given_the_units() -> None:
    assert gpu_health(_data(HGX_H100)).level is Level.OK
    health = gpu_health(_data(HGX_H100), _units(FM_FAILED))
    assert health.level is Level.BAD and "nvidia-fabricmanager" in health.text


def test_unit_presence_reads_typed_and_plain_facts_alike() -> None:
    typed = SERVICES.parse((UNITS / FM_FAILED).read_text(encoding="utf-8"))
    plain = _units(FM_FAILED)
    for unit, expected in [
        ("nvidia-fabricmanager", "stopped"),
        ("dcgm", "stopped"),
        ("nvidia-dcgm", "absent"),
        ("nvidia-imex", "stopped"),
        ("nvsm", "absent"),
    ]:
        assert unit_presence(typed.units, typed.active, unit) == expected, unit
        assert unit_presence(plain["units"], plain["active"], unit) == expected, unit


# --- the kernel log alone ------------------------------------------------------------------------


def test_from_log_asks_only_what_a_reset_cannot_have_answered() -> None:
    assert from_log({"codes": [79], "events": []}).remedy is Remedy.REBOOT
    assert from_log({"codes": [48, 63, 95], "events": []}).remedy is Remedy.NONE
    reset = {"codes": [154], "events": [{"code": 154, "bus_id": "b", "recovery_action": "reset"}]}
    assert from_log(reset).remedy is Remedy.NONE
    reboot = {"codes": [154], "events": [{"code": 154, "bus_id": "b", "recovery_action": "reboot"}]}
    assert from_log(reboot).remedy is Remedy.REBOOT
    assert from_log(reboot, _data(RTX4090_535)).remedy is Remedy.REBOOT  # reports no action
    assert from_log(reboot, _data(H100_590)).remedy is Remedy.NONE  # reports None now


# --- for_xid: `fleetfix xid` from the same rules -------------------------------------------------


def test_every_recovery_action_has_a_remedy() -> None:
    """Only an action fleetfix cannot name is left for a person."""
    for action in RecoveryAction:
        human = recovery_remedy(action.fact_name) is Remedy.HUMAN
        assert human == (action is RecoveryAction.UNKNOWN), action


@pytest.mark.parametrize("code", [79, 119, 95, 154, 74, 13])
@pytest.mark.parametrize("action", list(RecoveryAction))
def test_for_xid_says_what_decide_does(code: int, action: RecoveryAction) -> None:
    """What `fleetfix xid CODE --recovery-action A` says is what `decide` does on a node whose
    GPU reports A and whose log holds Xid CODE."""
    smi = _with_gpu0(H100_590, recovery_action=action.fact_name)
    xid = {"codes": [code], "events": []}
    said = for_xid(code, action)
    assert said.remedy is decide(smi, xid).remedy, said.why
    assert (action, said.remedy) in said.by_action


def test_for_xid_without_an_action() -> None:
    gone = for_xid(79)
    assert gone.remedy is Remedy.REBOOT and "whatever the recovery action says" in gone.why
    assert {remedy for _, remedy in gone.by_action} == {
        Remedy.REBOOT,
        Remedy.POWER_CYCLE,
        Remedy.HUMAN,
    }
    now = for_xid(119)
    assert now.remedy is None
    assert now.why.startswith("fleetfix acts on what the node reports now, not on this log line")
    assert dict(now.by_action)[RecoveryAction.GPU_RESET] is Remedy.RESET
    assert dict(now.by_action)[RecoveryAction.NONE] is Remedy.NONE
    assert for_xid(154).why.startswith("Xid 154 is the driver announcing its recovery action")


def test_not_fixed_says_what_comes_next_in_nvidias_order() -> None:
    fault = "GPU 3: 7 of 8 GPUs visible"
    warm = {"action": "reboot", "failed": True, "ran": True, "msg": "verification failed"}
    refused = {
        "action": "power_cycle",
        "failed": True,
        "ran": False,
        "msg": "power_cycle refused: no BMC (bmc_host): needs a human: cold power cycle",
    }
    cycled = {"action": "power_cycle", "failed": True, "ran": True, "msg": "verification failed"}
    assert not_fixed(fault, [warm, refused]) == (
        f"{fault}; persists after a warm reboot; needs a human: cold power cycle"
    )
    assert not_fixed(fault, [warm, cycled]) == (
        f"{fault}; persists after a cold power cycle; RMA candidate: run the field diagnostic"
    )
    bmc = {"action": "power_cycle", "failed": True, "ran": False, "msg": "power_cycle: ... rc=1"}
    assert not_fixed(fault, [warm, bmc]) == (
        f"{fault}; persists after a warm reboot; needs a human: cold power cycle"
        " (the power cycle through the BMC failed: see the journal)"
    )
    held = {"action": "reboot", "failed": True, "ran": False, "msg": "reboot held: rack cap"}
    assert not_fixed(fault, [held]) == f"{fault}; not fixed (reboot held: rack cap); needs a human"
    assert not_fixed(fault, []) == f"{fault}; not fixed; needs a human"


def test_a_gpu_the_driver_could_not_bring_up_needs_a_reboot_without_an_xid() -> None:
    text = (
        "[Sat Nov 28 03:01:02 2026] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x24:0x65:1426)"
    )
    xid = to_data(XID.read(text + "\n"))
    assert xid["codes"] == []
    logged = from_log(xid)
    assert logged.remedy is Remedy.REBOOT
    assert "could not initialise" in logged.why[0] and "0000:3b:00.0" in logged.why[0]
    both = decide(_data(H100_590), xid)
    assert both.remedy is Remedy.REBOOT


def test_cables_and_an_unsupported_board_are_a_persons_work() -> None:
    text = "NVRM: GPU 0000:3b:00.0: GPU does not have the necessary power cables connected.\n"
    assert from_log(to_data(XID.read(text))).remedy is Remedy.HUMAN
