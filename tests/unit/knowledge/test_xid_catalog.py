"""The packaged Xid catalog and the recovery-action override rule."""

from __future__ import annotations

import pytest

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge.xid import (
    RecommendationSource,
    RecoveryAction,
    Severity,
    load_catalog,
    parse_recovery_action,
    recommended_action,
    xid_catalog,
)

REQUIRED = (
    8, 13, 31, 32, 43, 45, 46, 48, 54, 56, 57, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95,
    109, 110, 119, 120, 121, 136, 137, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154, 155,
)  # fmt: skip


def test_catalog_is_versioned_and_covers_the_required_codes() -> None:
    catalog = xid_catalog()
    assert catalog.version and "docs.nvidia.com" in catalog.source
    assert set(REQUIRED) <= set(catalog.codes)
    assert catalog.get(12345) is None


def test_every_entry_quotes_nvidia_text_for_its_immediate_action() -> None:
    for code in xid_catalog().codes:
        info = xid_catalog().get(code)
        assert info is not None and info.immediate_action_text, code


@pytest.mark.parametrize(
    ("code", "mnemonic", "immediate", "links", "playbook"),
    [
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", True, "xid79.yml"),
        (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", True, "ecc.yml"),
        (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", True, "ecc.yml"),
        (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", True, "ecc.yml"),
        (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", True, "nccl-health.yml"),
        (92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE", False, None),
        (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", True, "ecc.yml"),
        (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", True, "ecc.yml"),
        (119, "GSP_RPC_TIMEOUT", "RESET_GPU", False, "driver-reload.yml"),
        (120, "GSP_ERROR", "RESET_GPU", True, "driver-reload.yml"),
        (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", False, "ecc.yml"),
        (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", True, "nccl-health.yml"),
        (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154", False, None),
    ],
)
def test_design_mappings(
    code: int, mnemonic: str, immediate: str, links: bool, playbook: str | None
) -> None:
    info = xid_catalog().get(code)
    assert info is not None
    assert (info.mnemonic, info.immediate_action) == (mnemonic, immediate)
    assert (info.links_to_154, info.fleetfix_playbook) == (links, playbook)


def test_xid79_entry_in_full() -> None:
    info = xid_catalog().get(79)
    assert info is not None
    assert info.description == "GPU has fallen off the bus"
    assert info.investigatory_action == "CONTACT_SUPPORT"
    assert info.immediate_action_text == "Restart bare metal, system should be restarted."
    assert info.xid154_since == "CUDA 12.7; GPU driver R565"
    assert info.severity is Severity.CRITICAL


@pytest.mark.parametrize(
    ("code", "with_codes", "action"),
    [
        (79, (), "RESTART_BM"),
        (48, (), "RESET_GPU"),
        (48, (63,), "DRAIN_AND_RESET"),
        (48, (64, 45), "DRAIN_AND_RESET"),
        (94, (), "RESTART_APP"),
        (95, (), "RESET_GPU"),
        (119, (), "RESET_GPU"),
        (120, (), "RESET_GPU"),
        (140, (), "RESET_GPU"),
        (63, (), "IGNORE"),
        (92, (), "IGNORE"),
        (74, (), "WORKFLOW_NVLINK_ERR"),
        (45, (), "RESTART_FM"),
        (45, (149,), "IGNORE"),
        (154, (), "IGNORE"),
    ],
)
def test_catalog_actions_without_a_reported_recovery_action(
    code: int, with_codes: tuple[int, ...], action: str
) -> None:
    advice = recommended_action(code, None, with_codes=with_codes)
    assert (advice.action, advice.source) == (action, RecommendationSource.CATALOG)
    assert advice.recovery_action is None


@pytest.mark.parametrize(
    ("code", "reported", "action", "source"),
    [
        (79, "Reset", "RESET_GPU", RecommendationSource.RECOVERY_ACTION),
        (13, "Node Reboot Required", "RESTART_BM", RecommendationSource.RECOVERY_ACTION),
        (95, "0x4", "DRAIN_AND_RESET", RecommendationSource.RECOVERY_ACTION),
        (48, "Drain P2P", "DRAIN_P2P", RecommendationSource.RECOVERY_ACTION),
        # "None" speaks for Xids linked to 154 only.
        (48, "None", "IGNORE", RecommendationSource.RECOVERY_ACTION),
        (119, "None", "RESET_GPU", RecommendationSource.CATALOG),
        (13, "None", "RESTART_APP", RecommendationSource.CATALOG),
        # nvidia-smi's "no value" spellings are absence, not "None".
        (79, "N/A", "RESTART_BM", RecommendationSource.CATALOG),
        (79, "[Not Supported]", "RESTART_BM", RecommendationSource.CATALOG),
        (5000, None, "CONTACT_SUPPORT", RecommendationSource.UNKNOWN_CODE),
        (5000, "None", "CONTACT_SUPPORT", RecommendationSource.UNKNOWN_CODE),
        (5000, "Reboot", "RESTART_BM", RecommendationSource.RECOVERY_ACTION),
    ],
)
def test_reported_recovery_action_overrides(
    code: int, reported: str, action: str, source: RecommendationSource
) -> None:
    advice = xid_catalog().recommended_action(code, reported)
    assert (advice.action, advice.source) == (action, source)


def test_recommendation_explains_itself() -> None:
    advice = recommended_action(79, "GPU_RECOVERY_ACTION_GPU_RESET")
    assert advice.catalog_action == "RESTART_BM"
    assert advice.recovery_action is RecoveryAction.GPU_RESET
    assert advice.playbook == "xid79.yml"
    assert "overrides the catalog (RESTART_BM)" in advice.reason
    assert advice.action_text == xid_catalog().bucket_text("RESET_GPU")


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("None", RecoveryAction.NONE),
        ("Reset", RecoveryAction.GPU_RESET),
        ("GPU Reset Required", RecoveryAction.GPU_RESET),
        ("Reboot", RecoveryAction.NODE_REBOOT),
        ("NVML_GPU_RECOVERY_ACTION_NODE_REBOOT", RecoveryAction.NODE_REBOOT),
        ("drain p2p", RecoveryAction.DRAIN_P2P),
        ("Drain and Reset", RecoveryAction.DRAIN_AND_RESET),
        ("3", RecoveryAction.DRAIN_P2P),
        ("0x7", RecoveryAction.SYSTEM_REBOOT),
        ("[N/A]", None),
        ("Requested functionality has been deprecated", None),
        (None, None),
    ],
)
def test_parse_recovery_action(text: str | None, action: RecoveryAction | None) -> None:
    assert parse_recovery_action(text) is action


@pytest.mark.parametrize("text", ["Reboot Soon", "0x9", "reset the world"])
def test_unknown_recovery_action_is_an_error_not_a_guess(text: str) -> None:
    with pytest.raises(KnowledgeError, match="unrecognised GPU recovery action"):
        recommended_action(79, text)


BASE = """
version: "t"
source: "test"
buckets: {IGNORE: "No Action required."}
"""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("version: [", "invalid YAML"),
        ("- 1\n", "top level must be a mapping"),
        (BASE + "xids: []\n", "'xids' must be a non-empty list"),
        (BASE + "xids: [{code: x}]\n", "integer 'code'"),
        (
            BASE + "xids: [{code: 1, mnemonic: M, description: D, immediate_action: NOPE,"
            " investigatory_action: IGNORE, links_to_154: false, severity: info}]\n",
            "unknown bucket 'NOPE'",
        ),
        (
            BASE + "xids: [{code: 1, mnemonic: M, description: D, immediate_action: IGNORE,"
            " investigatory_action: IGNORE, links_to_154: maybe, severity: info}]\n",
            "'links_to_154' must be true or false",
        ),
        (
            BASE + "xids: [{code: 1, mnemonic: M, description: D, immediate_action: IGNORE,"
            " investigatory_action: IGNORE, links_to_154: false, severity: dire}]\n",
            "bad severity",
        ),
    ],
)
def test_broken_catalog_text_is_a_fleetfix_error(body: str, message: str) -> None:
    with pytest.raises(KnowledgeError, match=message):
        load_catalog(body)


def test_duplicate_codes_are_refused() -> None:
    entry = (
        "{code: 1, mnemonic: M, description: D, immediate_action: IGNORE,"
        " investigatory_action: IGNORE, links_to_154: false, severity: info}"
    )
    with pytest.raises(KnowledgeError, match="listed twice"):
        load_catalog(BASE + f"xids: [{entry}, {entry}]\n")
