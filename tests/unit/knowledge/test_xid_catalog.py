"""The packaged Xid catalog, held to NVIDIA's published catalog, and the recovery-action rule."""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge.xid import (
    RecommendationSource,
    RecoveryAction,
    Severity,
    XidCatalog,
    load_catalog,
    parse_recovery_action,
    recommended_action,
    xid_catalog,
)

ROOT = Path(__file__).resolve().parents[3]
XID79 = ("xid79.yml", "recover.yml")
FIXTURE = ROOT / "tests" / "fixtures" / "xid-catalog" / "xid-catalog.csv"

REQUIRED = (
    8, 13, 31, 32, 43, 45, 46, 48, 54, 56, 57, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95,
    109, 110, 119, 120, 121, 136, 137, 140, 143, 144, 145, 146, 147, 148, 149, 150, 151, 154,
    155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172,
)  # fmt: skip


def test_catalog_is_versioned_and_covers_the_required_codes() -> None:
    catalog = xid_catalog()
    assert catalog.version and "docs.nvidia.com" in catalog.source
    assert set(REQUIRED) <= set(catalog.codes)
    assert catalog.get(12345) is None


def test_every_entry_quotes_the_text_of_the_bucket_it_starts_from() -> None:
    catalog = xid_catalog()
    for code in catalog.codes:
        info = catalog.get(code)
        assert info is not None
        if info.immediate_action is not None:
            assert info.immediate_action_text, code
        assert catalog.bucket_text(info.action), code


MEMORY = ("ecc.yml", "recover.yml")
NVLINK = ("recover.yml", "nccl-health.yml")


@pytest.mark.parametrize(
    ("code", "mnemonic", "immediate", "links", "playbooks"),
    [
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", True, XID79),
        (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", True, MEMORY),
        (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", True, MEMORY),
        (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", True, MEMORY),
        (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", True, NVLINK),
        (92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE", False, ()),
        (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", True, MEMORY),
        (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", True, MEMORY),
        (119, "GSP_RPC_TIMEOUT", "RESET_GPU", False, ("recover.yml",)),
        (120, "GSP_ERROR", "RESET_GPU", True, ("recover.yml",)),
        (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", False, MEMORY),
        (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", True, NVLINK),
        (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154", False, ("recover.yml",)),
    ],
)
def test_design_mappings(
    code: int, mnemonic: str, immediate: str, links: bool, playbooks: tuple[str, ...]
) -> None:
    info = xid_catalog().get(code)
    assert info is not None
    assert (info.mnemonic, info.immediate_action) == (mnemonic, immediate)
    assert (info.links_to_154, info.fleetfix_playbooks) == (links, playbooks)


def test_recover_yml_is_named_wherever_the_drivers_action_or_the_gpus_state_decides() -> None:
    """xid.yml's rule for the column: recover.yml for every code linked to Xid 154, every code
    NVIDIA resets or reboots for, 154 itself and the memory codes; driver-reload.yml for none
    (it does nothing on a working driver); nccl-health.yml only after recover.yml."""
    catalog = xid_catalog()
    for code in catalog.codes:
        info = catalog.get(code)
        assert info is not None
        drives = (
            info.links_to_154
            or info.immediate_action in ("RESET_GPU", "RESTART_BM")
            or code == 154
            or "ecc.yml" in info.fleetfix_playbooks
        )
        assert ("recover.yml" in info.fleetfix_playbooks) == drives, code
        assert "driver-reload.yml" not in info.fleetfix_playbooks, code
        if "nccl-health.yml" in info.fleetfix_playbooks:
            assert info.fleetfix_playbooks == NVLINK, code


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
    assert advice.playbooks == XID79
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


# --- the shipped table against NVIDIA's catalog (tests/fixtures/xid-catalog/PROVENANCE.md) ---


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """One row of NVIDIA's catalog as the fixture stores it ("" where NVIDIA's cell is empty)."""

    code: int
    mnemonic: str
    description: str
    immediate_action: str
    investigatory_action: str
    xid154_linkage: str


COLUMNS = [
    "code",
    "mnemonic",
    "description",
    "immediate_action",
    "investigatory_action",
    "xid154_linkage",
    "trigger_conditions",
]


def read_catalog_fixture(path: Path) -> dict[int, CatalogRow]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == COLUMNS
        rows = [
            CatalogRow(
                code=int(row["code"]),
                mnemonic=row["mnemonic"],
                description=row["description"],
                immediate_action=row["immediate_action"],
                investigatory_action=row["investigatory_action"],
                xid154_linkage=row["xid154_linkage"],
            )
            for row in reader
        ]
    by_code = {row.code: row for row in rows}
    assert len(by_code) == len(rows), "a code is listed twice in the fixture"
    return by_code


def catalog_differences(published: Mapping[int, CatalogRow], shipped: XidCatalog) -> list[str]:
    """Every way the shipped table departs from NVIDIA's catalog; [] when they agree."""
    problems = [
        f"Xid {code}: in xid.yml but not in NVIDIA's catalog"
        for code in sorted(set(shipped.codes) - set(published))
    ]
    for code, row in sorted(published.items()):
        info = shipped.get(code)
        if info is None:
            problems.append(f"Xid {code}: in NVIDIA's catalog but missing from xid.yml")
            continue
        pairs = {
            "mnemonic": (info.mnemonic, row.mnemonic),
            "description": (info.description, row.description),
            "immediate_action": (info.immediate_action or "", row.immediate_action),
            "investigatory_action": (info.investigatory_action or "", row.investigatory_action),
            "xid154_since": (info.xid154_since or "", row.xid154_linkage),
            "links_to_154": (info.links_to_154, bool(row.xid154_linkage)),
        }
        problems += [
            f"Xid {code}: {name} is {ours!r}, NVIDIA's is {theirs!r}"
            for name, (ours, theirs) in pairs.items()
            if ours != theirs
        ]
    return problems


@pytest.fixture(scope="module")
def published() -> dict[int, CatalogRow]:
    return read_catalog_fixture(FIXTURE)


def test_fixture_holds_the_whole_catalog_up_to_172(published: dict[int, CatalogRow]) -> None:
    assert sorted(published) == list(range(1, 173))
    assert published[79].immediate_action == "RESTART_BM"
    assert published[171].mnemonic == "UNCORRECTABLE_DRAM_ERROR"


def test_shipped_table_is_nvidias_catalog(published: dict[int, CatalogRow]) -> None:
    assert catalog_differences(published, xid_catalog()) == []


def _packaged_document() -> dict[str, Any]:
    text = resources.files("fleetfix.knowledge").joinpath("xid.yml").read_text("utf-8")
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def _entry(document: dict[str, Any], code: int) -> dict[str, Any]:
    (entry,) = [e for e in document["xids"] if e["code"] == code]
    assert isinstance(entry, dict)
    return entry


def _drop_79(document: dict[str, Any]) -> None:
    document["xids"] = [e for e in document["xids"] if e["code"] != 79]


def _bucket_48(document: dict[str, Any]) -> None:
    _entry(document, 48)["immediate_action"] = "RESET_GPU"


def _investigate_74(document: dict[str, Any]) -> None:
    _entry(document, 74)["investigatory_action"] = "IGNORE"


def _unlink_63(document: dict[str, Any]) -> None:
    entry = _entry(document, 63)
    entry["links_to_154"] = False
    del entry["xid154_since"]


def _reword_13(document: dict[str, Any]) -> None:
    _entry(document, 13)["description"] = "Graphics Exception"


def _invent_173(document: dict[str, Any]) -> None:
    document["xids"].append({**_entry(document, 172), "code": 173})


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_drop_79, "Xid 79: in NVIDIA's catalog but missing from xid.yml"),
        (_bucket_48, "Xid 48: immediate_action is 'RESET_GPU', NVIDIA's is 'WORKFLOW_XID_48'"),
        (_investigate_74, "Xid 74: investigatory_action is 'IGNORE', NVIDIA's is 'CONTACT_"),
        (_unlink_63, "Xid 63: links_to_154 is False, NVIDIA's is True"),
        (_reword_13, "Xid 13: description is 'Graphics Exception'"),
        (_invent_173, "Xid 173: in xid.yml but not in NVIDIA's catalog"),
    ],
)
def test_comparison_catches_a_table_that_departs_from_the_catalog(
    published: dict[int, CatalogRow],
    mutate: Callable[[dict[str, Any]], None],
    expected: str,
) -> None:
    document = _packaged_document()
    mutate(document)
    altered = load_catalog(yaml.safe_dump(document, allow_unicode=True))
    assert any(p.startswith(expected) for p in catalog_differences(published, altered))


def test_fleetfix_decides_only_where_nvidia_gives_no_bucket(
    published: dict[int, CatalogRow],
) -> None:
    catalog = xid_catalog()
    without_bucket = {code for code, row in published.items() if not row.immediate_action}
    assert without_bucket == set(range(162, 173))
    for code in catalog.codes:
        info = catalog.get(code)
        assert info is not None
        assert (info.fleetfix_action is not None) == (code in without_bucket), code
        assert (info.fleetfix_note is not None) == (code in without_bucket), code


def test_every_named_playbook_is_shipped_and_described() -> None:
    catalog = xid_catalog()
    named = {p for info in catalog.entries.values() for p in info.fleetfix_playbooks}
    assert named == {"recover.yml", "xid79.yml", "ecc.yml", "nccl-health.yml"}
    for playbook in [*named, *catalog.playbooks]:
        assert (ROOT / "playbooks" / playbook).is_file(), playbook
        assert catalog.playbook_text(playbook), playbook


@pytest.mark.parametrize(
    ("code", "action", "source", "reason"),
    [
        (171, "IGNORE (sympathetic)", RecommendationSource.FLEETFIX, "act on the Xid 48"),
        (167, "CONTACT_SUPPORT", RecommendationSource.FLEETFIX, "does not guess"),
        (162, "IGNORE", RecommendationSource.FLEETFIX, "has no NVIDIA bucket"),
        (156, "RESET_GPU", RecommendationSource.CATALOG, "RESOURCE_RETIREMENT_EVENT"),
        (151, "RESTART_VM", RecommendationSource.CATALOG, "KEY_ROTATION"),
        (159, "CHECK_UVM", RecommendationSource.CATALOG, "CHI_NON_DATA"),
    ],
)
def test_new_codes_recommendations(
    code: int, action: str, source: RecommendationSource, reason: str
) -> None:
    advice = recommended_action(code)
    assert (advice.action, advice.source) == (action, source)
    assert reason in advice.reason
    assert advice.catalog_action == action


def test_reported_recovery_action_overrides_a_fleetfix_default_too() -> None:
    advice = recommended_action(172, "Reboot")
    assert (advice.action, advice.source) == ("RESTART_BM", RecommendationSource.RECOVERY_ACTION)
    assert "overrides the catalog (IGNORE (sympathetic))" in advice.reason


def test_unused_codes_have_no_investigatory_bucket() -> None:
    info = xid_catalog().get(1)
    assert info is not None
    assert (info.description, info.immediate_action) == ("Unused", "CONTACT_SUPPORT")
    assert info.investigatory_action is None and info.investigatory_action_text is None


ENTRY = "{code: 1, mnemonic: M, description: D, links_to_154: false, severity: info"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (ENTRY + ", immediate_action: null}", "'fleetfix_action' must say what to do"),
        (
            ENTRY + ", immediate_action: IGNORE, fleetfix_action: IGNORE}",
            "only for codes NVIDIA gives no bucket",
        ),
        (ENTRY + ", immediate_action: null, fleetfix_action: NOPE}", "unknown bucket 'NOPE'"),
        (ENTRY + ", immediate_action: IGNORE, investigatory_action: NOPE}", "unknown bucket"),
        (
            ENTRY + ", immediate_action: IGNORE, fleetfix_playbooks: [nope.yml]}",
            "playbook 'nope.yml' is not described under 'playbooks'",
        ),
        (
            ENTRY + ", immediate_action: IGNORE, fleetfix_playbooks: x.yml}",
            "'fleetfix_playbooks' must be a list of playbook files",
        ),
        (
            ENTRY + ", immediate_action: IGNORE, fleetfix_playbook: x.yml}",
            "'fleetfix_playbook' is now 'fleetfix_playbooks'",
        ),
    ],
)
def test_table_schema_for_fleetfix_columns(entry: str, message: str) -> None:
    with pytest.raises(KnowledgeError, match=message):
        load_catalog(BASE + f"xids: [{entry}]\n")


def test_a_fleetfix_action_entry_loads() -> None:
    catalog = load_catalog(
        BASE
        + "playbooks: {x.yml: does x, y.yml: does y}\n"
        + f"xids: [{ENTRY}, immediate_action: null, fleetfix_action: IGNORE,"
        + " fleetfix_note: why, fleetfix_playbooks: [y.yml, x.yml]}]\n"
    )
    info = catalog.get(1)
    assert info is not None
    assert (info.immediate_action, info.action, info.fleetfix_note) == (None, "IGNORE", "why")
    assert info.fleetfix_playbooks == ("y.yml", "x.yml")
    assert catalog.playbook_text("x.yml") == "does x"
    advice = catalog.recommended_action(1)
    assert (advice.action, advice.source) == ("IGNORE", RecommendationSource.FLEETFIX)
