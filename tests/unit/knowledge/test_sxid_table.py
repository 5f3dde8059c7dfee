"""The packaged NVSwitch SXid table (Fabric Manager user guide, tables 21-24)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge.sxid import SxidKind, load_sxid_catalog, sxid_catalog
from fleetfix.knowledge.xid import Severity, xid_catalog

ROOT = Path(__file__).resolve().parents[3]


def test_table_is_versioned_and_has_every_sxid_the_guide_lists() -> None:
    catalog = sxid_catalog()
    assert catalog.version and "Fabric Manager" in catalog.source
    kinds = Counter(info.kind for info in catalog.entries.values())
    # Table 21: 11004, 19 single-bit ECC SXids, 20001, 12028, 19084, 22013, 20012.
    assert kinds == {
        SxidKind.NON_FATAL: 25,
        SxidKind.FATAL: 42,
        SxidKind.ALWAYS_FATAL: 20,
        SxidKind.OTHER: 5,
    }
    assert catalog.get(99999) is None


@pytest.mark.parametrize(
    ("code", "kind", "action", "severity", "name"),
    [
        (12028, SxidKind.NON_FATAL, "RESET_GPUS_AND_SWITCHES", "critical", "egress non-posted"),
        (24003, SxidKind.NON_FATAL, "IGNORE", "info", "Single bit ECC errors"),
        (22013, SxidKind.NON_FATAL, "IGNORE", "info", "Minion Link DLREQ interrupt"),
        (20001, SxidKind.NON_FATAL, "WATCH_THROUGHPUT", "warning", "TX Replay Error"),
        (11001, SxidKind.FATAL, "RESET_GPUS_AND_SWITCHES", "critical", "ingress invalid command"),
        (20034, SxidKind.FATAL, "RESET_GPU", "critical", "LTSSM Fault Up"),
        (22003, SxidKind.ALWAYS_FATAL, "RESTART_BM", "critical", "Minion Halt"),
        (10001, SxidKind.OTHER, "WATCH", "warning", "Host_priv_error"),
        (10003, SxidKind.OTHER, "RESET_GPUS_AND_SWITCHES", "critical", "Host_unhandled"),
        (10004, SxidKind.OTHER, "CHECK_THERMALS", "warning", "Host_thermal_event_start"),
    ],
)
def test_guide_rows(code: int, kind: SxidKind, action: str, severity: str, name: str) -> None:
    info = sxid_catalog().get(code)
    assert info is not None
    assert (info.kind, info.fleetfix_action, info.severity) == (kind, action, Severity(severity))
    assert info.name is not None and info.name.startswith(name)


def test_nvidia_texts_are_kept() -> None:
    catalog = sxid_catalog()
    ltssm = catalog.get(20034)
    assert ltssm is not None and ltssm.recovery is not None
    assert "In an H100 system, reset the GPU" in ltssm.recovery
    assert "propagated to the GPU as Xid 74" in catalog.kinds[SxidKind.FATAL].text
    unnamed = catalog.get(20012)
    assert unnamed is not None and unnamed.name is None
    assert unnamed.recovery is not None and "mechanical connections" in unnamed.recovery


def test_every_fatal_sxid_resets_the_fabric_or_reboots() -> None:
    recoveries = {"RESET_GPUS_AND_SWITCHES", "RESET_GPU", "RESTART_BM"}
    for info in sxid_catalog().entries.values():
        if info.kind in (SxidKind.FATAL, SxidKind.ALWAYS_FATAL):
            assert info.severity is Severity.CRITICAL, info.code
            assert info.fleetfix_action in recoveries, info.code
        if info.kind is SxidKind.ALWAYS_FATAL:
            assert info.fleetfix_action == "RESTART_BM", info.code


def test_actions_have_text_and_playbooks_are_shipped() -> None:
    catalog = sxid_catalog()
    for info in catalog.entries.values():
        assert catalog.action_text(info.fleetfix_action), info.code
        if info.fleetfix_playbook is not None:
            assert (ROOT / "playbooks" / info.fleetfix_playbook).is_file()
            assert xid_catalog().playbook_text(info.fleetfix_playbook)


BASE = """
version: "t"
source: "test"
actions: {IGNORE: nothing, REBOOT: reboot}
kinds:
  non_fatal: {title: a, text: a, severity: info, fleetfix_action: IGNORE}
  fatal: {title: b, text: b, severity: critical, fleetfix_action: REBOOT}
  always_fatal: {title: c, text: c, severity: critical, fleetfix_action: REBOOT}
  other: {title: d, text: d, severity: warning, fleetfix_action: IGNORE}
"""


def test_an_entry_takes_its_kinds_defaults_unless_it_has_its_own() -> None:
    catalog = load_sxid_catalog(
        BASE
        + "sxids:\n"
        + "  - {codes: [1, 2], name: n, kind: fatal}\n"
        + "  - {code: 3, kind: fatal, severity: warning, fleetfix_action: IGNORE}\n"
    )
    assert catalog.codes == (1, 2, 3)
    first, third = catalog.get(2), catalog.get(3)
    assert first is not None and third is not None
    assert (first.severity, first.fleetfix_action, first.name) == (
        Severity.CRITICAL,
        "REBOOT",
        "n",
    )
    assert (third.severity, third.fleetfix_action, third.name) == (Severity.WARNING, "IGNORE", None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("version: [", "invalid YAML"),
        (BASE + "sxids: []\n", "'sxids' must be a non-empty list"),
        (BASE + "sxids: [{code: 1, kind: fatal}, {codes: [1], kind: fatal}]\n", "listed twice"),
        (BASE + "sxids: [{code: 1, kind: deadly}]\n", "bad kind 'deadly'"),
        (BASE + "sxids: [{code: 1, kind: fatal, fleetfix_action: NOPE}]\n", "unknown fleetfix"),
        (BASE + "sxids: [{code: 1, codes: [2], kind: fatal}]\n", "'code' or 'codes'"),
        (BASE + "sxids: [{codes: [x], kind: fatal}]\n", "must be integers"),
        (BASE + "sxids: [{code: 1, kind: fatal, severity: dire}]\n", "bad severity"),
        (BASE.replace("  other:", "  others:") + "sxids: [{code: 1, kind: fatal}]\n", "'kinds'"),
    ],
)
def test_broken_table_text_is_a_fleetfix_error(body: str, message: str) -> None:
    with pytest.raises(KnowledgeError, match=message):
        load_sxid_catalog(body)
