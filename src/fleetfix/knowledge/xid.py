"""The Xid knowledge table (knowledge/xid.yml) as typed data, and NVIDIA's advice about an Xid.

`xid_catalog()` loads the packaged table once. `recommended_action(code, recovery_action)` is
NVIDIA's catalog advice, for reports and `fleetfix xid`: it is not what fleetfix does (that is
knowledge/remedy.py, from the node's current state). It applies NVIDIA's rule that the recovery
action the driver reports (Xid 154, or NVML / nvidia-smi "GPU Recovery Action") overrides the
static table:

* a reported action other than None always wins: the driver has derived what this GPU needs now;
* a reported None wins only for codes the catalog links to Xid 154 (and for 154 itself): for the
  other codes the driver's recovery state does not summarise that Xid, so the table stands;
* an unknown code with no reported action gets CONTACT_SUPPORT, never a silent "no action".

Codes the catalog lists without a resolution bucket (162-172) get fleetfix's own bucket from the
table's `fleetfix_action` column, marked as such (`RecommendationSource.FLEETFIX`).

Without an override, NVIDIA's workflow buckets that depend on companions are resolved from
`with_codes` (other Xids seen on the same GPU): 48 alone -> RESET_GPU, 48 with 63/64 ->
DRAIN_AND_RESET; 45 alone -> RESTART_FM, 45 with another Xid -> IGNORE (follow that Xid).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge.packaged import packaged_text, yaml_mapping

# Re-exported (`X as X`): the recovery-action table lives in knowledge/recovery.py now.
from fleetfix.knowledge.recovery import (
    RecoveryAction as RecoveryAction,  # noqa: PLC0414
)
from fleetfix.knowledge.recovery import (
    parse_recovery_action as parse_recovery_action,  # noqa: PLC0414
)


class Severity(enum.StrEnum):
    """fleetfix's own urgency class for an Xid (not an NVIDIA column)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class RecommendationSource(enum.StrEnum):
    """Where a recommendation came from."""

    CATALOG = "catalog"
    FLEETFIX = "fleetfix"
    """The catalog lists the code without a bucket; the table's fleetfix_action applies."""
    RECOVERY_ACTION = "recovery_action"
    UNKNOWN_CODE = "unknown_code"


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One catalog entry: NVIDIA's columns plus fleetfix's severity, playbooks and own action."""

    code: int
    mnemonic: str
    description: str
    immediate_action: str | None
    """NVIDIA's immediate bucket; None where the catalog gives none (then see fleetfix_action)."""
    investigatory_action: str | None
    immediate_action_text: str | None
    investigatory_action_text: str | None
    links_to_154: bool
    xid154_since: str | None
    """NVIDIA's "Xid 154 linkage" cell: the CUDA and driver release that reports it."""
    severity: Severity
    fleetfix_playbooks: tuple[str, ...]
    """The shipped playbooks for the code, the best fit first (xid.yml says which and why)."""
    trigger: str | None
    fleetfix_action: str | None = None
    """fleetfix's bucket where NVIDIA's immediate bucket is empty; None otherwise."""
    fleetfix_note: str | None = None
    """Why fleetfix chose fleetfix_action."""

    @property
    def action(self) -> str:
        """The bucket fleetfix starts from: NVIDIA's immediate bucket, else fleetfix's own."""
        return self.immediate_action or self.fleetfix_action or "CONTACT_SUPPORT"


@dataclass(frozen=True, slots=True)
class Recommendation:
    """NVIDIA's catalog advice about one Xid, and why (for reports and `fleetfix xid CODE`);
    what fleetfix does is knowledge/remedy.py's."""

    code: int
    action: str
    """NVIDIA bucket name after overrides and workflow resolution (RESET_GPU, RESTART_BM, ...)."""
    action_text: str | None
    """NVIDIA's text for `action` (quoted in reports), when the catalog has it."""
    source: RecommendationSource
    catalog_action: str | None
    """The table's bucket for the code (NVIDIA's, or fleetfix_action where NVIDIA has none)."""
    recovery_action: RecoveryAction | None
    playbooks: tuple[str, ...]
    reason: str


# The bucket each reported recovery action asks for (NVIDIA names where NVIDIA has one).
_RECOVERY_BUCKETS: Mapping[RecoveryAction, str] = MappingProxyType(
    {
        RecoveryAction.NONE: "IGNORE",
        RecoveryAction.GPU_RESET: "RESET_GPU",
        RecoveryAction.NODE_REBOOT: "RESTART_BM",
        RecoveryAction.DRAIN_P2P: "DRAIN_P2P",
        RecoveryAction.DRAIN_AND_RESET: "DRAIN_AND_RESET",
        RecoveryAction.RECOVER_IMEX_DOMAIN: "RECOVER_IMEX_DOMAIN",
        RecoveryAction.BUS_RESET: "BUS_RESET",
        RecoveryAction.SYSTEM_REBOOT: "RESTART_BM",
    }
)

_WORKFLOW_48_COMPANIONS = frozenset({63, 64})


@dataclass(frozen=True, slots=True)
class XidCatalog:
    """The versioned Xid table; look entries up with `get`."""

    version: str
    source: str
    entries: Mapping[int, XidInfo]
    buckets: Mapping[str, str]
    playbooks: Mapping[str, str]
    """Shipped playbook file name -> what it does, in operator words."""

    def get(self, code: int) -> XidInfo | None:
        """The entry for `code`, or None when the catalog does not know it."""
        return self.entries.get(code)

    @property
    def codes(self) -> tuple[int, ...]:
        """Every code in the table, ascending."""
        return tuple(sorted(self.entries))

    def bucket_text(self, bucket: str) -> str | None:
        """NVIDIA's text for a resolution bucket name, if the catalog has it."""
        return self.buckets.get(bucket)

    def playbook_text(self, playbook: str) -> str | None:
        """What a shipped playbook does, in operator words, if the table describes it."""
        return self.playbooks.get(playbook)

    def recommended_action(
        self,
        code: int,
        recovery_action: str | RecoveryAction | None = None,
        *,
        with_codes: Iterable[int] = (),
    ) -> Recommendation:
        """NVIDIA's advice for Xid `code` given the driver's reported recovery action, if any.

        Args:
            code: the Xid code.
            recovery_action: what the driver reports (nvidia-smi "GPU Recovery Action", the
                target of the latest Xid 154); None or "N/A" when it reports nothing.
            with_codes: other Xid codes seen on the same GPU (resolves companion workflows).

        Raises:
            KnowledgeError: `recovery_action` is text fleetfix does not recognise.
        """
        info = self.get(code)
        recovery = parse_recovery_action(recovery_action)
        catalog_action = info.action if info else None
        playbooks = info.fleetfix_playbooks if info else ()
        if _recovery_overrides(info, recovery) and recovery is not None:
            action = _RECOVERY_BUCKETS[recovery]
            reason = (
                f"driver recovery action {recovery.value!r} overrides the catalog"
                f" ({catalog_action or 'unknown code'})"
            )
            source = RecommendationSource.RECOVERY_ACTION
        elif info is None:
            action, source = "CONTACT_SUPPORT", RecommendationSource.UNKNOWN_CODE
            reason = f"Xid {code} is not in fleetfix's catalog (version {self.version})"
        else:
            action, reason = _catalog_action(info, set(with_codes) - {code})
            source = (
                RecommendationSource.CATALOG
                if info.immediate_action
                else RecommendationSource.FLEETFIX
            )
        return Recommendation(
            code=code,
            action=action,
            action_text=self.bucket_text(action),
            source=source,
            catalog_action=catalog_action,
            recovery_action=recovery,
            playbooks=playbooks,
            reason=reason,
        )


def recommended_action(
    code: int,
    recovery_action: str | RecoveryAction | None = None,
    *,
    with_codes: Iterable[int] = (),
) -> Recommendation:
    """`XidCatalog.recommended_action` on the packaged catalog."""
    return xid_catalog().recommended_action(code, recovery_action, with_codes=with_codes)


@functools.cache
def xid_catalog() -> XidCatalog:
    """The packaged catalog (knowledge/xid.yml), loaded once: it is immutable package data.

    Raises:
        KnowledgeError: the packaged file is missing or malformed (a packaging bug).
    """
    return load_catalog(packaged_text("xid.yml", "xid catalog"))


def load_catalog(text: str) -> XidCatalog:
    """Build a catalog from xid.yml text (pure; tests feed it broken tables).

    Raises:
        KnowledgeError: the text is not valid YAML or breaks the table's schema.
    """
    document = yaml_mapping(text, "xid catalog")
    buckets = _text_map(document.get("buckets"), "buckets")
    playbooks = _text_map(document.get("playbooks", {}), "playbooks")
    entries: dict[int, XidInfo] = {}
    for raw in _list(document.get("xids"), "xids"):
        info = _entry(raw, buckets, playbooks)
        if info.code in entries:
            raise KnowledgeError(f"xid catalog: Xid {info.code} is listed twice")
        entries[info.code] = info
    return XidCatalog(
        version=_text(document, "version", "catalog"),
        source=_text(document, "source", "catalog"),
        entries=MappingProxyType(entries),
        buckets=MappingProxyType(buckets),
        playbooks=MappingProxyType(playbooks),
    )


def _recovery_overrides(info: XidInfo | None, recovery: RecoveryAction | None) -> bool:
    if recovery is None:
        return False
    if recovery is not RecoveryAction.NONE:
        return True
    # "None" only speaks for Xids the driver folds into its recovery state.
    return info is not None and (info.links_to_154 or info.code == 154)


def _catalog_action(info: XidInfo, others: set[int]) -> tuple[str, str]:
    bucket = info.immediate_action
    if bucket is None:
        why = f" ({info.fleetfix_note})" if info.fleetfix_note else ""
        return info.action, (
            f"catalog: Xid {info.code} {info.mnemonic} has no NVIDIA bucket;"
            f" fleetfix -> {info.action}{why}"
        )
    head = f"catalog: Xid {info.code} {info.mnemonic} -> {bucket}"
    if bucket == "WORKFLOW_XID_48":
        companions = sorted(others & _WORKFLOW_48_COMPANIONS)
        if companions:
            return "DRAIN_AND_RESET", f"{head}; seen with Xid {companions} -> DRAIN_AND_RESET"
        return "RESET_GPU", f"{head}; solo -> RESET_GPU"
    if bucket == "WORKFLOW_XID_45":
        if others:
            return "IGNORE", f"{head}; follows Xid {sorted(others)} -> IGNORE (follow that Xid)"
        return "RESTART_FM", f"{head}; solo -> RESTART_FM"
    if bucket == "XID_154":
        return "IGNORE", f"{head}; no recovery action reported -> IGNORE"
    return bucket, head


def _text_map(raw: Any, name: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise KnowledgeError(f"xid catalog: '{name}' must map names to text")
    return {k: " ".join(v.split()) for k, v in raw.items()}


def _entry(raw: Any, buckets: Mapping[str, str], playbooks: Mapping[str, str]) -> XidInfo:
    if not isinstance(raw, dict) or not isinstance(raw.get("code"), int):
        raise KnowledgeError(f"xid catalog: each entry needs an integer 'code': {raw!r}")
    code: int = raw["code"]
    where = f"Xid {code}"
    immediate = _bucket(raw, "immediate_action", buckets, where)
    investigatory = _bucket(raw, "investigatory_action", buckets, where)
    return XidInfo(
        code=code,
        mnemonic=_text(raw, "mnemonic", where),
        description=_text(raw, "description", where),
        immediate_action=immediate,
        investigatory_action=investigatory,
        immediate_action_text=buckets.get(immediate) if immediate else None,
        investigatory_action_text=buckets.get(investigatory) if investigatory else None,
        links_to_154=_links(raw, where),
        xid154_since=_optional_text(raw, "xid154_since", where),
        severity=_severity(raw, where),
        fleetfix_playbooks=_playbooks(raw, playbooks, where),
        trigger=_optional_text(raw, "trigger", where),
        fleetfix_action=_fleetfix_action(raw, immediate, buckets, where),
        fleetfix_note=_optional_text(raw, "fleetfix_note", where),
    )


def _bucket(raw: Mapping[str, Any], key: str, buckets: Mapping[str, str], where: str) -> str | None:
    bucket = _optional_text(raw, key, where)
    if bucket is not None and bucket not in buckets:
        raise KnowledgeError(f"xid catalog: {where}: unknown bucket {bucket!r}")
    return bucket


def _fleetfix_action(
    raw: Mapping[str, Any], immediate: str | None, buckets: Mapping[str, str], where: str
) -> str | None:
    # One source per code: NVIDIA's bucket where it has one, fleetfix's only where it has none.
    action = _bucket(raw, "fleetfix_action", buckets, where)
    if immediate is None and action is None:
        raise KnowledgeError(
            f"xid catalog: {where}: no immediate_action, so 'fleetfix_action' must say what to do"
        )
    if immediate is not None and action is not None:
        raise KnowledgeError(
            f"xid catalog: {where}: 'fleetfix_action' is only for codes NVIDIA gives no bucket"
        )
    return action


def _links(raw: Mapping[str, Any], where: str) -> bool:
    links = raw.get("links_to_154")
    if not isinstance(links, bool):
        raise KnowledgeError(f"xid catalog: {where}: 'links_to_154' must be true or false")
    return links


def _severity(raw: Mapping[str, Any], where: str) -> Severity:
    try:
        return Severity(str(raw.get("severity")))
    except ValueError as exc:
        raise KnowledgeError(f"xid catalog: {where}: bad severity {raw.get('severity')!r}") from exc


def _playbooks(raw: Mapping[str, Any], playbooks: Mapping[str, str], where: str) -> tuple[str, ...]:
    if "fleetfix_playbook" in raw:
        raise KnowledgeError(
            f"xid catalog: {where}: 'fleetfix_playbook' is now 'fleetfix_playbooks'"
        )
    named = raw.get("fleetfix_playbooks", [])
    if not isinstance(named, list) or not all(isinstance(p, str) for p in named):
        raise KnowledgeError(
            f"xid catalog: {where}: 'fleetfix_playbooks' must be a list of playbook files"
        )
    for playbook in named:
        if playbook not in playbooks:
            raise KnowledgeError(
                f"xid catalog: {where}: playbook {playbook!r} is not described under 'playbooks'"
            )
    if len(set(named)) != len(named):
        raise KnowledgeError(f"xid catalog: {where}: a playbook is named twice")
    return tuple(named)


def _list(raw: Any, name: str) -> list[Any]:
    if not isinstance(raw, list) or not raw:
        raise KnowledgeError(f"xid catalog: '{name}' must be a non-empty list")
    return raw


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise KnowledgeError(f"xid catalog: {where}: '{key}' must be non-empty text")
    return " ".join(value.split())


def _optional_text(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    return None if raw.get(key) is None else _text(raw, key, where)
