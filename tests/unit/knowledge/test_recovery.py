"""The recovery-action table: every wording, NVML value and Xid 154 message, and what it does with
the ones it does not know.

Wordings come from NVML's nvml.h (NVIDIA/nvidia-settings, 565-610), the cuda-python NVML bindings
reference (values 6-7), NVIDIA "GPU Memory Error Management" (nvidia-smi's words) and Xid 154
lines quoted from kernel logs in public issue threads (NVIDIA/open-gpu-kernel-modules #1134,
#1353): the shared samples hold no Xid 154 line, so these messages are written here by hand.
"""

from __future__ import annotations

import pytest

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge import xid
from fleetfix.knowledge.recovery import (
    WORDINGS,
    RecoveryAction,
    Wording,
    action_for_code,
    parse_recovery_action,
    read_recovery_action,
    read_xid154,
    recovery_action_name,
)
from fleetfix.probes import gpu_facts


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (0, RecoveryAction.NONE),
        (1, RecoveryAction.GPU_RESET),
        (2, RecoveryAction.NODE_REBOOT),
        (3, RecoveryAction.DRAIN_P2P),
        (4, RecoveryAction.DRAIN_AND_RESET),
        (5, RecoveryAction.RECOVER_IMEX_DOMAIN),
        (6, RecoveryAction.BUS_RESET),
        (7, RecoveryAction.SYSTEM_REBOOT),
    ],
)
def test_nvml_values_are_the_key(code: int, action: RecoveryAction) -> None:
    assert action_for_code(code) is action
    assert action.code == code
    assert read_recovery_action(str(code)) is action
    assert read_recovery_action(hex(code)) is action


def test_a_value_nvml_does_not_have_is_unknown_not_an_error() -> None:
    assert action_for_code(8) is RecoveryAction.UNKNOWN
    assert RecoveryAction.UNKNOWN.code is None
    assert read_recovery_action("0x1f") is RecoveryAction.UNKNOWN


@pytest.mark.parametrize("wording", WORDINGS, ids=[w.text for w in WORDINGS])
def test_every_wording_reads_in_any_case_and_separator(wording: Wording) -> None:
    assert read_recovery_action(wording.text) is wording.action
    assert read_recovery_action(wording.text.upper().replace(" ", "_")) is wording.action


@pytest.mark.parametrize(
    ("printed", "name"),
    [
        # nvidia-smi -q "GPU Recovery Action", XML <gpu_recovery_action>, CSV gpu_recovery_action
        ("None", "none"),
        ("Reset", "reset"),
        ("Reboot", "reboot"),
        ("Drain P2P", "drain_p2p"),
        ("Drain and Reset", "drain_and_reset"),
        ("NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN", "recover_imex_domain"),
        ("GPU_RECOVERY_ACTION_BUS_RESET", "bus_reset"),
        ("System Reboot", "system_reboot"),
        ("PF FLR", "reset"),
        ("Something New In 620", "unknown"),
        ("[N/A]", None),
        ("[Not Supported]", None),
        ("Requested functionality has been deprecated", None),
        (None, None),
    ],
)
def test_fact_names_for_every_printed_form(printed: str | None, name: str | None) -> None:
    assert recovery_action_name(printed) == name
    assert gpu_facts.recovery_action_name(printed) == name


@pytest.mark.parametrize(
    ("message", "action", "code", "text"),
    [
        # drivers 570-595
        (
            "0x0 (None) to 0x1 (GPU Reset Required)",
            RecoveryAction.GPU_RESET,
            1,
            "GPU Reset Required",
        ),
        (
            "0x0 (None) to 0x2 (Node Reboot Required)",
            RecoveryAction.NODE_REBOOT,
            2,
            "Node Reboot Required",
        ),
        ("0x0 (None) to 0x3 (Drain P2P)", RecoveryAction.DRAIN_P2P, 3, "Drain P2P"),
        (
            "0x0 (None) to 0x4 (Drain and Reset)",
            RecoveryAction.DRAIN_AND_RESET,
            4,
            "Drain and Reset",
        ),
        ("0x4 (Drain and Reset) to 0x0 (None)", RecoveryAction.NONE, 0, "None"),
        # driver 610
        ("0x0 (None) to 0x1 (PF FLR)", RecoveryAction.GPU_RESET, 1, "PF FLR"),
        ("0x0 (None) to 0x2 (OS Reboot)", RecoveryAction.NODE_REBOOT, 2, "OS Reboot"),
        # the code decides: a new wording, or one that contradicts its code
        ("0x0 (None) to 0x2 (Reboot The Rack)", RecoveryAction.NODE_REBOOT, 2, "Reboot The Rack"),
        ("0x0 (None) to 0x1 (Drain and Reset)", RecoveryAction.GPU_RESET, 1, "Drain and Reset"),
        # a code NVML does not have: the wording, if known, else unknown
        ("0x0 (None) to 0x9 (Drain P2P)", RecoveryAction.DRAIN_P2P, 9, "Drain P2P"),
        ("0x0 (None) to 0x9 (Quantum Reset)", RecoveryAction.UNKNOWN, 9, "Quantum Reset"),
        ("0x0 to 0x2", RecoveryAction.NODE_REBOOT, 2, None),
    ],
)
def test_xid154_messages_of_every_driver(
    message: str, action: RecoveryAction, code: int, text: str | None
) -> None:
    change = read_xid154(f"GPU recovery action changed from {message}")
    assert change is not None
    assert (change.action, change.code, change.text) == (action, code, text)


def test_xid154_keeps_where_it_came_from() -> None:
    change = read_xid154("GPU recovery action changed from 0x3 (Drain P2P) to 0x2 (OS Reboot)")
    assert change is not None
    assert (change.previous, change.previous_code, change.previous_text) == (
        RecoveryAction.DRAIN_P2P,
        3,
        "Drain P2P",
    )


def test_an_xid154_that_states_no_change_is_none() -> None:
    assert read_xid154("GPU recovery action is being evaluated") is None


@pytest.mark.parametrize("value", ["Quantum Reset", "unknown", "0x9", RecoveryAction.UNKNOWN])
def test_strict_parse_refuses_what_it_cannot_name(value: str | RecoveryAction) -> None:
    with pytest.raises(KnowledgeError, match="unrecognised GPU recovery action"):
        parse_recovery_action(value)


def test_strict_parse_reads_every_known_wording() -> None:
    assert parse_recovery_action("OS Reboot") is RecoveryAction.NODE_REBOOT
    assert parse_recovery_action("[N/A]") is None


def test_knowledge_xid_reexports_the_same_table() -> None:
    assert xid.RecoveryAction is RecoveryAction
    assert xid.parse_recovery_action is parse_recovery_action
    advice = xid.recommended_action(79, "PF FLR")
    assert advice.recovery_action is RecoveryAction.GPU_RESET
