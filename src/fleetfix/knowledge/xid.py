"""The Xid knowledge table (knowledge/xid.yml) as typed data, and what to do about an Xid.

`xid_catalog()` loads the packaged table once. `recommended_action(code, recovery_action)` applies
NVIDIA's rule that the recovery action the driver reports (Xid 154, or NVML / nvidia-smi "GPU
Recovery Action") overrides the static table:

* a reported action other than None always wins: the driver has derived what this GPU needs now;
* a reported None wins only for codes the catalog links to Xid 154 (and for 154 itself): for the
  other codes the driver's recovery state does not summarise that Xid, so the table stands;
* an unknown code with no reported action gets CONTACT_SUPPORT, never a silent "no action".

Without an override, NVIDIA's workflow buckets that depend on companions are resolved from
`with_codes` (other Xids seen on the same GPU): 48 alone -> RESET_GPU, 48 with 63/64 ->
DRAIN_AND_RESET; 45 alone -> RESTART_FM, 45 with another Xid -> IGNORE (follow that Xid).
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

from fleetfix.errors import KnowledgeError


class Severity(enum.StrEnum):
    """fleetfix's own urgency class for an Xid (not an NVIDIA column)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class RecoveryAction(enum.StrEnum):
    """The GPU recovery action the driver reports (nvmlDeviceGpuRecoveryAction_t, Xid 154)."""

    NONE = "None"
    GPU_RESET = "Reset"
    NODE_REBOOT = "Reboot"
    DRAIN_P2P = "Drain P2P"
    DRAIN_AND_RESET = "Drain and Reset"
    RECOVER_IMEX_DOMAIN = "Recover IMEX Domain"
    BUS_RESET = "Bus Reset"
    SYSTEM_REBOOT = "System Reboot"


class RecommendationSource(enum.StrEnum):
    """Where a recommendation came from."""

    CATALOG = "catalog"
    RECOVERY_ACTION = "recovery_action"
    UNKNOWN_CODE = "unknown_code"


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One catalog entry: NVIDIA's columns plus fleetfix's severity and playbook."""

    code: int
    mnemonic: str
    description: str
    immediate_action: str
    investigatory_action: str
    immediate_action_text: str | None
    investigatory_action_text: str | None
    links_to_154: bool
    xid154_since: str | None
    severity: Severity
    fleetfix_playbook: str | None
    trigger: str | None


@dataclass(frozen=True, slots=True)
class Recommendation:
    """What to do about one Xid, and why (for the report and `fleetfix xid CODE`)."""

    code: int
    action: str
    """NVIDIA bucket name after overrides and workflow resolution (RESET_GPU, RESTART_BM, ...)."""
    action_text: str | None
    """NVIDIA's text for `action` (quoted in reports), when the catalog has it."""
    source: RecommendationSource
    catalog_action: str | None
    recovery_action: RecoveryAction | None
    playbook: str | None
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

# Spellings seen in nvidia-smi (-q, XML), NVML enum names and Xid 154 messages, normalised by
# `_recovery_key`; the NVML numeric values are accepted too.
_RECOVERY_ALIASES: Mapping[str, RecoveryAction] = MappingProxyType(
    {
        "none": RecoveryAction.NONE,
        "reset": RecoveryAction.GPU_RESET,
        "gpu reset": RecoveryAction.GPU_RESET,
        "gpu reset required": RecoveryAction.GPU_RESET,
        "reboot": RecoveryAction.NODE_REBOOT,
        "node reboot": RecoveryAction.NODE_REBOOT,
        "node reboot required": RecoveryAction.NODE_REBOOT,
        "drain p2p": RecoveryAction.DRAIN_P2P,
        "drain and reset": RecoveryAction.DRAIN_AND_RESET,
        "drain p2p and reset gpu": RecoveryAction.DRAIN_AND_RESET,
        "recover imex domain": RecoveryAction.RECOVER_IMEX_DOMAIN,
        "bus reset": RecoveryAction.BUS_RESET,
        "system reboot": RecoveryAction.SYSTEM_REBOOT,
    }
)
_RECOVERY_BY_NUMBER = tuple(RecoveryAction)  # NVML values 0..7 in declaration order
# What nvidia-smi prints when it has no value: the action is absent, not "None".
_NOT_REPORTED = frozenset(
    {"", "n/a", "not supported", "unknown", "requested functionality has been deprecated"}
)
_WORKFLOW_48_COMPANIONS = frozenset({63, 64})


@dataclass(frozen=True, slots=True)
class XidCatalog:
    """The versioned Xid table; look entries up with `get`."""

    version: str
    source: str
    entries: Mapping[int, XidInfo]
    buckets: Mapping[str, str]

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

    def recommended_action(
        self,
        code: int,
        recovery_action: str | RecoveryAction | None = None,
        *,
        with_codes: Iterable[int] = (),
    ) -> Recommendation:
        """What to do about Xid `code` given the driver's reported recovery action, if any.

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
        catalog_action = info.immediate_action if info else None
        playbook = info.fleetfix_playbook if info else None
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
            source = RecommendationSource.CATALOG
        return Recommendation(
            code=code,
            action=action,
            action_text=self.bucket_text(action),
            source=source,
            catalog_action=catalog_action,
            recovery_action=recovery,
            playbook=playbook,
            reason=reason,
        )


def parse_recovery_action(value: str | RecoveryAction | None) -> RecoveryAction | None:
    """A reported recovery action in any spelling nvidia-smi, NVML or Xid 154 uses.

    Returns None when nothing is reported (None, "", "N/A", "[Not Supported]").

    Raises:
        KnowledgeError: the text is not a recovery action fleetfix knows.
    """
    if value is None or isinstance(value, RecoveryAction):
        return value
    key = _recovery_key(value)
    if key in _NOT_REPORTED:
        return None
    if key in _RECOVERY_ALIASES:
        return _RECOVERY_ALIASES[key]
    number = _as_number(key)
    if number is not None and number < len(_RECOVERY_BY_NUMBER):
        return _RECOVERY_BY_NUMBER[number]
    raise KnowledgeError(f"unrecognised GPU recovery action {value!r}")


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
    try:
        text = resources.files("fleetfix.knowledge").joinpath("xid.yml").read_text("utf-8")
    except OSError as exc:
        raise KnowledgeError(f"xid catalog: cannot read packaged xid.yml: {exc}") from exc
    return load_catalog(text)


def load_catalog(text: str) -> XidCatalog:
    """Build a catalog from xid.yml text (pure; tests feed it broken tables).

    Raises:
        KnowledgeError: the text is not valid YAML or breaks the table's schema.
    """
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KnowledgeError(f"xid catalog: invalid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise KnowledgeError("xid catalog: top level must be a mapping")
    buckets = _buckets(document.get("buckets"))
    entries: dict[int, XidInfo] = {}
    for raw in _list(document.get("xids"), "xids"):
        info = _entry(raw, buckets)
        if info.code in entries:
            raise KnowledgeError(f"xid catalog: Xid {info.code} is listed twice")
        entries[info.code] = info
    return XidCatalog(
        version=_text(document, "version", "catalog"),
        source=_text(document, "source", "catalog"),
        entries=MappingProxyType(entries),
        buckets=MappingProxyType(buckets),
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


def _recovery_key(value: str) -> str:
    key = re.sub(r"[\s_\-\[\]]+", " ", value.strip().lower()).strip()
    for prefix in ("nvml gpu recovery action ", "gpu recovery action "):
        key = key.removeprefix(prefix)
    return key


def _as_number(key: str) -> int | None:
    try:
        return int(key, 16) if key.startswith("0x") else int(key)
    except ValueError:
        return None


def _buckets(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise KnowledgeError("xid catalog: 'buckets' must map bucket names to text")
    return {k: " ".join(v.split()) for k, v in raw.items()}


def _entry(raw: Any, buckets: Mapping[str, str]) -> XidInfo:
    if not isinstance(raw, dict) or not isinstance(raw.get("code"), int):
        raise KnowledgeError(f"xid catalog: each entry needs an integer 'code': {raw!r}")
    code: int = raw["code"]
    where = f"Xid {code}"
    immediate = _text(raw, "immediate_action", where)
    if immediate not in buckets:
        raise KnowledgeError(f"xid catalog: {where}: unknown bucket {immediate!r}")
    investigatory = _text(raw, "investigatory_action", where)
    links = raw.get("links_to_154")
    if not isinstance(links, bool):
        raise KnowledgeError(f"xid catalog: {where}: 'links_to_154' must be true or false")
    try:
        severity = Severity(str(raw.get("severity")))
    except ValueError as exc:
        raise KnowledgeError(f"xid catalog: {where}: bad severity {raw.get('severity')!r}") from exc
    return XidInfo(
        code=code,
        mnemonic=_text(raw, "mnemonic", where),
        description=_text(raw, "description", where),
        immediate_action=immediate,
        investigatory_action=investigatory,
        immediate_action_text=buckets.get(immediate),
        investigatory_action_text=buckets.get(investigatory),
        links_to_154=links,
        xid154_since=_optional_text(raw, "xid154_since", where),
        severity=severity,
        fleetfix_playbook=_optional_text(raw, "fleetfix_playbook", where),
        trigger=_optional_text(raw, "trigger", where),
    )


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
