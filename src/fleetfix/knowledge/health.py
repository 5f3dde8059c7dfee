"""One-line health verdicts of probe facts: the fleet table, reports, and the run's exit code.

Works on plain data (`to_data(facts)`), so the same words come from a live probe or a journal.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.knowledge.remedy import Remedy, decide, from_log

Facts = Mapping[str, Any]


class Level(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    BAD = "bad"


NOT_INSTALLED = "not installed"


@dataclass(frozen=True, slots=True)
class Health:
    level: Level
    text: str
    absent: bool = False
    """The probe's tool is not installed on the node: nothing to judge, and not a fault."""


def _verdict(problems: list[str], warnings: list[str], fine: str) -> Health:
    if problems:
        return Health(Level.BAD, "; ".join(problems))
    if warnings:
        return Health(Level.WARN, "; ".join(warnings))
    return Health(Level.OK, fine)


def gpu_health(f: Facts, services: Facts | None = None) -> Health:
    """nvidia-smi's verdict: errors, the GPU count, and what knowledge/remedy.py says the GPUs
    need (with `services` data, a Fabric Manager stopped on an NVSwitch board counts too)."""
    count, expected = f.get("gpu_count", 0), f.get("expected_gpus")
    problems = [str(e) for e in f.get("errors", ())[:1]]
    if f.get("count_ok") is False:
        problems.append(f"{count}/{expected} GPUs")
    verdict = decide(f, services=services)
    if verdict.remedy is not Remedy.NONE:
        problems.append(f"needs {verdict.remedy.word}: " + "; ".join(verdict.why[:3]))
    warnings = (
        [f"persistence off on {list(f['persistence_off_gpus'])}"]
        if f.get("persistence_off_gpus")
        else []
    )
    return _verdict(problems, warnings, f"{count} GPUs, driver {f.get('driver_version')}")


def _xid(f: Facts) -> Health:
    health = _xid_alone(f)
    problems, warnings = aer_problems(f.get("aer") or {})
    if not problems and not warnings:
        return health
    level = Level.BAD if problems or health.level is Level.BAD else Level.WARN
    shown = [health.text] if health.text != "no Xid" else []
    return Health(level, "; ".join([*shown, *problems, *warnings]))


AER_CORRECTED_WARN = 10
"""Corrected PCIe errors of one device in the window read (the boot, by default) that make a
warning: a few are normal on a long-running node, a stream of them is a link degrading
(docs/gpu-procedures.md, "PCIe AER")."""


def aer_problems(aer: Facts) -> tuple[list[str], list[str]]:
    """(faults, warnings) in the kernel log's PCIe AER reports (probes/pcie_aer.py, as data):
    an uncorrected error on a GPU, any fatal one, and a port whose recovery failed are faults;
    a non-fatal uncorrected error of another device and many corrected ones are warnings."""
    problems: list[str] = []
    warnings: list[str] = []
    for bus, seen in (aer.get("devices") or {}).items():
        what = f"GPU {bus}" if seen.get("gpu") else f"{bus} ({seen.get('driver') or '?'})"
        fatal, nonfatal = seen.get("uncorrected_fatal", 0), seen.get("uncorrected_nonfatal", 0)
        if fatal or (nonfatal and seen.get("gpu")):
            kind = "fatal" if fatal else "uncorrected"
            problems.append(f"PCIe {kind} AER x{fatal + nonfatal} on {what}")
        elif nonfatal:
            warnings.append(f"PCIe uncorrected AER x{nonfatal} on {what}")
        if seen.get("corrected", 0) >= AER_CORRECTED_WARN:
            warnings.append(f"PCIe corrected AER x{seen['corrected']} on {what}")
    failed = list(aer.get("recovery_failed", ()))
    problems.extend(f"AER recovery failed below {port}" for port in failed)
    if problems:  # the nvidia driver takes no part in recovery: its GPUs stay in error
        problems.extend(f"GPU {bus} cannot recover" for bus in aer.get("cannot_recover_gpus", ()))
    return problems, warnings


def _xid_alone(f: Facts) -> Health:
    codes = list(f.get("codes", ()))
    failures = list(f.get("gpu_failures", ()))
    if failures:  # a GPU the driver could not bring up or lost, Xid line or not
        first = failures[0]
        where = f"GPU {first.get('bus_id')}" if first.get("bus_id") else "a GPU"
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        xids = f"; Xid {', '.join(str(c) for c in codes)}" if codes else ""
        return Health(
            Level.BAD, f"{where}: {str(first.get('kind', '')).replace('_', ' ')}{more}{xids}"
        )
    if not codes:
        return Health(Level.OK, "no Xid")
    asks = from_log(f).remedy is not Remedy.NONE  # a reboot still due in this boot
    level = Level.BAD if f.get("critical_codes") or asks else Level.WARN
    return Health(level, f"Xid {', '.join(str(c) for c in codes)}")


def _gpu_processes(f: Facts) -> Health:
    if f.get("count"):
        return Health(Level.WARN, f"{f['count']} GPU processes")
    return Health(Level.OK if f.get("complete", True) else Level.WARN, "idle")


def _shm(f: Facts) -> Health:
    nccl = len(f.get("nccl_files", ()))
    text = f"{f.get('usage_percent')}% used, {nccl} NCCL files"
    return Health(Level.WARN if nccl else Level.OK, text)


def _slurm(f: Facts) -> Health:
    state, reason = f.get("state", "?"), f.get("reason")
    if f.get("drained") or f.get("draining") or f.get("down"):
        return Health(Level.WARN, f"{state} ({reason})" if reason else str(state))
    return Health(Level.OK, str(state))


def _services(f: Facts) -> Health:
    failed = list(f.get("failed", ()))
    return _verdict(
        [f"failed: {failed}"] if failed else [], [], f"active: {list(f.get('active', ()))}"
    )


def _ib(f: Facts) -> Health:
    down = f.get("ports_down", ())
    text = f"{f.get('active_count', 0)}/{f.get('port_count', 0)} ports active"
    return Health(Level.BAD if down else Level.OK, text)


def _nvlink(f: Facts) -> Health:
    inactive = f.get("inactive_links", ())
    return _verdict([f"{len(inactive)} links inactive"] if inactive else [], [], "all links up")


def _modules(f: Facts) -> Health:
    if not f.get("nvidia_loaded"):
        return Health(Level.BAD, "nvidia module not loaded")
    return Health(Level.OK, f"driver {f.get('driver_version')}")


def _nccl(f: Facts) -> Health:
    if f.get("failed"):
        return Health(Level.BAD, "failed")
    return Health(Level.OK, f"avg busbw {f.get('avg_busbw')} GB/s")


def _dcgm(f: Facts) -> Health:
    """DCGM's own verdict (`overall`): a failed test, or a diagnostic that did not run, is a
    node the run cannot call healthy; warnings and a cut-off table are warnings."""
    overall = str(f.get("overall", ""))
    gpus = list(f.get("failed_gpus", ()))
    on = f" on GPU {', '.join(str(g) for g in gpus)}" if gpus else ""
    if overall == "fail":
        failed = ", ".join(f.get("failed_tests", ())) or "an Error row"
        return Health(Level.BAD, f"DCGM diag failed: {failed}{on}")
    if overall == "error":
        return Health(Level.BAD, f"DCGM diag did not run: {f.get('runtime_error') or 'error'}")
    if overall == "warn":
        return Health(Level.WARN, f"DCGM diag warned: {', '.join(f.get('warned_tests', ()))}")
    if overall == "incomplete":
        return Health(Level.WARN, "DCGM diag output cut off before its end")
    return Health(Level.OK, "DCGM diag passed")


def _generic(f: Facts) -> Health:
    return Health(Level.OK, "ok" if f.get("complete", True) else "partial output")


def _pci_gpus(f: Facts) -> Health:
    """The GPUs on the bus (nvidia-smi is held to this count); one answering all ones (`rev
    ff`) fell off the bus."""
    lost = [g for g in f.get("gpus", ()) if g.get("lost")]
    text = f"{f.get('count', 0)} on the bus" + (f", {len(lost)} fallen off" if lost else "")
    return Health(Level.BAD if lost else Level.OK, text)


SUMMARIES: Mapping[str, Callable[[Facts], Health]] = {
    "nvidia_smi": gpu_health,
    "pci_gpus": _pci_gpus,
    "xid": _xid,
    "gpu_processes": _gpu_processes,
    "shm": _shm,
    "slurm_node": _slurm,
    "services": _services,
    "ib": _ib,
    "nvlink": _nvlink,
    "kernel_modules": _modules,
    "nccl_tests": _nccl,
    "dcgm_diag": _dcgm,
}


def summarize(
    probe: str, facts: Facts | None, failure: str = "", absent: str | None = None
) -> Health:
    """The verdict for one probe on one host. `absent` names the tool the node does not have
    (a step's registered `absent`, errors.ToolNotInstalled): "not installed", ok. Otherwise no
    facts means the probe itself failed."""
    if absent:
        return Health(Level.OK, NOT_INSTALLED, absent=True)
    if facts is None:
        return Health(Level.BAD, failure or "probe failed")
    return SUMMARIES.get(probe, _generic)(facts)
