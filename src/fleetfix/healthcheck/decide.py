"""The health check's decisions, from probe data: what is wrong, whose drain it is, what to do.

Pure functions over plain probe data (`to_data(facts)`), so every rule is a unit test. The GPU
rules are knowledge/remedy.py's, the ones every playbook and `slurm_resume` use: a GPU the
driver wants reset or the node rebooted, a row-remap failure (an RMA candidate), a GPU missing
against the expected count. The kernel log adds what only it knows (remedy's `from_log`): an
Xid this boot that calls for a reboot (Xid 79, or an Xid 154 asking for one) not yet done. A
check that could not run (a hung nvidia-smi, output that is not nvidia-smi's) is a problem,
never "healthy".
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetfix.knowledge.remedy import RMA_CANDIDATE, Remedy, decide, from_log
from fleetfix.probes.slurm_node import FLEETFIX_REASON_PREFIX

Data = Mapping[str, Any]

CHECKS = ("nvidia_smi", "xid", "ib")
"""Checks by the probe they read: GPUs (health, count, ECC/row remap, recovery action),
the kernel's Xid log, InfiniBand ports."""
DEFAULT_CHECKS = ("nvidia_smi", "xid")
REASON_LIMIT = 200
"""Drain reasons stay short: sinfo -R and `scontrol show node` print them on one line."""


class HealthOutcome(enum.IntEnum):
    """Exit codes of `fleetfix healthcheck` (docs/slurm.md lists them)."""

    HEALTHY = 0
    DRAINED = 1
    """Unhealthy; fleetfix drained the node now, or had drained it already."""
    DRY_RUN = 2
    """Unhealthy; --dry-run: nothing changed."""
    LEFT_ALONE = 3
    """Unhealthy; the node is drained or down by someone else: their reason is kept."""
    NOT_DRAINED = 4
    """Unhealthy; the node could not be drained (Slurm unreadable, or scontrol refused)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What one probe said: its facts as plain data, or why there are none."""

    probe: str
    data: Data | None
    failure: str = ""


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem, in the words a drain reason carries."""

    check: str
    problem: str


def findings(
    observed: Mapping[str, Observation], checks: Sequence[str], expected_gpus: int | None
) -> list[Finding]:
    """Every problem the chosen checks see, most telling first (GPUs, then the log)."""
    found: list[Finding] = []
    if "nvidia_smi" in checks:
        xid = observed.get("xid") if "xid" in checks else None
        found += _gpu_findings(observed["nvidia_smi"], xid, expected_gpus)
    if "xid" in checks:
        smi = observed["nvidia_smi"].data if "nvidia_smi" in checks else None
        found += _xid_findings(observed["xid"], smi)
    if "ib" in checks:
        found += _ib_findings(observed["ib"])
    return _unique(found)


def _unique(found: list[Finding]) -> list[Finding]:
    seen: set[str] = set()
    kept = []
    for finding in found:
        if finding.problem not in seen:
            seen.add(finding.problem)
            kept.append(finding)
    return kept


def _gpu_findings(smi: Observation, xid: Observation | None, expected: int | None) -> list[Finding]:
    if smi.data is None:
        return [Finding("nvidia_smi", smi.failure)]
    data = with_expected_count(smi.data, expected)
    found = [Finding("nvidia_smi", f"nvidia-smi: {error}") for error in data.get("errors", ())[:1]]
    verdict = decide(data, xid.data if xid is not None else None)
    if verdict.remedy is not Remedy.NONE:
        why, word = verdict.why[0], verdict.remedy.word.replace("_", " ")
        said = word in why.lower() or RMA_CANDIDATE in why  # the reason already says what next
        found.append(Finding("nvidia_smi", why if said else f"{why}: needs {word}"))
    return found


def with_expected_count(smi: Data, expected: int | None) -> Data:
    """nvidia_smi data with `expected_gpus` / `count_ok` as the probe sets them (the count
    comes from --gpus or Slurm's Gres, known only after the probe ran)."""
    if expected is None:
        return smi
    attached = smi.get("attached_gpus")
    count_ok = (
        smi.get("gpu_count") == expected
        and attached in (None, expected)
        and not smi.get("lost_gpus")
        and not smi.get("errors")
    )
    return {**smi, "expected_gpus": expected, "count_ok": count_ok}


def _xid_findings(xid: Observation, smi: Data | None) -> list[Finding]:
    if xid.data is None:
        return [Finding("xid", xid.failure)]
    logged = from_log(xid.data, smi)
    if logged.remedy is Remedy.NONE:
        return []
    return [Finding("xid", f"needs {logged.remedy.word}: " + "; ".join(logged.why))]


def _ib_findings(ib: Observation) -> list[Finding]:
    if ib.data is None:
        return [Finding("ib", ib.failure)]
    down = [f"{p.get('ca')}/{p.get('port')}" for p in ib.data.get("ports_down", ())]
    if not down:
        return []
    return [Finding("ib", f"InfiniBand port(s) not active: {', '.join(down[:4])}")]


def expected_gpus(option: int | None, slurm: Data | None) -> int | None:
    """The GPU count the node should show: --gpus, else Slurm's configured Gres."""
    if option is not None:
        return option
    total = slurm.get("gpus_total") if slurm is not None else None
    return total if isinstance(total, int) else None


class Owner(enum.StrEnum):
    """Who holds the node out of service in Slurm."""

    NOBODY = "nobody"
    FLEETFIX = "fleetfix"
    SOMEONE_ELSE = "someone else"
    UNKNOWN = "unknown"
    """Slurm could not be read: whose drain it is cannot be told, so nothing is touched."""


def owner(slurm: Data | None) -> Owner:
    if slurm is None:
        return Owner.UNKNOWN
    if not (slurm.get("drained") or slurm.get("draining") or slurm.get("down")):
        return Owner.NOBODY
    return Owner.FLEETFIX if slurm.get("reason_is_fleetfix") else Owner.SOMEONE_ELSE


def drain_reason(found: Sequence[Finding]) -> str:
    """`fleetfix: healthcheck: <first problem> (+N more)`, short enough for one line."""
    more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
    text = f"{FLEETFIX_REASON_PREFIX} healthcheck: {found[0].problem}"
    room = REASON_LIMIT - len(more)
    text = text if len(text) <= room else text[: room - 3] + "..."
    return " ".join((text + more).split())


def drain_command(node: str, reason: str) -> str:
    return f"scontrol update NodeName={shlex.quote(node)} State=DRAIN Reason={shlex.quote(reason)}"
