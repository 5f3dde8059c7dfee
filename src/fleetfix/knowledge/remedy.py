"""What a node's GPUs need now, decided in one place from what the driver reports.

Every playbook that resets, reboots or returns a node to service, the check before `slurm_resume`
and the end-of-run health check ask this module, so a GPU the driver wants reset is never
"healthy" to one of them and fine to another. It reads plain probe data (`to_data(facts)`) of
`nvidia_smi` and, optionally, `xid`, so the same verdict comes from a live probe, a registered
result in a playbook (the `remedy` filter) or the journal.

The rules, most severe first (sources in docs/gpu-procedures.md):

1. RMA: a row-remapping failure ("Remapping Failure Occurred: Yes"), memory the GPU reports
   unrepairable, or a bank with no spare rows left (the remap histogram's "None" bucket: the
   next uncorrectable error there is a remapping failure). NVIDIA, GPU Memory Error Management:
   such a GPU is to be replaced; no reset or counter reset fixes it.
2. Field diagnostics: the SRAM error threshold exceeded (NVIDIA's Xid 48 workflow: "check the
   SRAM Error Threshold flag; if set, RUN_FIELDDIAG"). fleetfix drains the node for that; it does
   not run NVIDIA's field diagnostics itself.
3. The driver's recovery action (drivers 570+: nvidia-smi "GPU Recovery Action", Xid 154): Reboot
   or System Reboot -> reboot; Reset, Drain and Reset, Drain P2P, Bus Reset -> drain and reset the
   GPU; Recover IMEX Domain -> restart IMEX; an action the table cannot name -> a human.
   On older drivers the same verdict comes from "Reset Required" / "Drain and Reset Recommended".
4. A GPU the node should have and does not show (Xid 79, fallen off the bus) -> reboot.
5. State a reset clears although the driver raises no flag: a pending row remap, a pending page
   retirement, volatile uncorrectable (double-bit) errors, an NVLink fabric state other than
   Completed (Fabric Manager guide: GPUs not registered after Fabric Manager started must be
   reset) -> reset.

Old log lines alone never ask for anything: after a reset the kernel log still holds the Xid
that caused it. Xid 154 lines count only when nvidia-smi does not report the recovery action
itself (it reports the current one; the log keeps every change).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Facts = Mapping[str, Any]
GpuKey = int | str


class Remedy(enum.IntEnum):
    """What a GPU (or node) needs, ordered: the node needs its GPUs' most severe one."""

    NONE = 0
    RESET = 1
    RECOVER_IMEX = 2
    REBOOT = 3
    HUMAN = 4
    """The driver asks for something fleetfix cannot name: drain, leave for a person."""
    FIELD_DIAG = 5
    RMA = 6

    @property
    def word(self) -> str:
        return self.name.lower()


_RECOVERY: Mapping[str, Remedy] = {
    "none": Remedy.NONE,
    "reset": Remedy.RESET,
    "drain_and_reset": Remedy.RESET,
    "drain_p2p": Remedy.RESET,
    "bus_reset": Remedy.RESET,
    "reboot": Remedy.REBOOT,
    "system_reboot": Remedy.REBOOT,
    "recover_imex_domain": Remedy.RECOVER_IMEX,
    "unknown": Remedy.HUMAN,
}
"""The driver's recovery action (fact names, knowledge/recovery.py) -> what fleetfix does.
Drain P2P: NVML asks to drain peer-to-peer traffic and reset; fleetfix drains the whole node
(no job can keep P2P traffic off one GPU) and resets."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The node's verdict: its most severe remedy, the GPUs that need it, and why."""

    remedy: Remedy
    gpus: tuple[GpuKey, ...] = ()
    reset_gpus: tuple[GpuKey, ...] = ()
    """The GPUs whose most severe need is a reset (also when the node needs more)."""
    why: tuple[str, ...] = ()
    by_gpu: Mapping[str, str] = field(default_factory=dict)
    """GPU (as text) -> its remedy word, for reports."""

    def to_data(self) -> dict[str, Any]:
        """Plain data for templates and reports: `remedy` is the word (none, reset, ...)."""
        return {
            "remedy": self.remedy.word,
            "gpus": list(self.gpus),
            "reset_gpus": list(self.reset_gpus),
            "why": list(self.why),
            "by_gpu": dict(self.by_gpu),
            "needs_action": self.remedy is not Remedy.NONE,
            "rma": self.remedy in (Remedy.RMA, Remedy.FIELD_DIAG),
        }


def decide(smi: Facts | None, xid: Facts | None = None) -> Verdict:
    """The node's verdict from `nvidia_smi` (and `xid`) probe data. No nvidia-smi data means
    nothing can be judged: that is a human's call, never "fine"."""
    if smi is None:
        return Verdict(Remedy.HUMAN, why=("nvidia-smi gave no facts",))
    found: dict[str, tuple[Remedy, str]] = {}
    reports_recovery = False
    for gpu in smi.get("gpus", ()):
        key = _key(gpu)
        reports_recovery = reports_recovery or gpu.get("recovery_action") is not None
        for remedy, reason in _gpu_needs(gpu):
            _note(found, key, remedy, reason)
    if not reports_recovery and xid is not None:
        for key, action in _xid154(xid, smi).items():
            remedy = _RECOVERY.get(action, Remedy.HUMAN)
            if remedy is not Remedy.NONE:
                _note(found, key, remedy, f"Xid 154: driver asks for {action}")
    lost = _missing(smi, xid)
    if lost:
        _note(found, "node", Remedy.REBOOT, lost)
    if not found:
        return Verdict(Remedy.NONE)
    worst = max(remedy for remedy, _ in found.values())
    gpus = tuple(_as_key(k) for k, (r, _) in found.items() if r is worst and k != "node")
    resets = tuple(_as_key(k) for k, (r, _) in found.items() if r is Remedy.RESET)
    reasons = tuple(f"GPU {k}: {w}" if k != "node" else w for k, (_, w) in found.items())
    by_gpu = {k: r.word for k, (r, _) in found.items()}
    return Verdict(worst, gpus, resets, reasons, by_gpu)


def _gpu_needs(gpu: Facts) -> Iterable[tuple[Remedy, str]]:
    remap = gpu.get("remapped_rows") or {}
    ecc = gpu.get("ecc") or {}
    aggregate = ecc.get("aggregate") or {}
    volatile = ecc.get("volatile") or {}
    if remap.get("failure") is True:
        yield Remedy.RMA, "row remapping failure: needs RMA"
    if ecc.get("unrepairable_memory") is True:
        yield Remedy.RMA, "unrepairable memory: needs RMA"
    exhausted = (remap.get("histogram") or {}).get("none")
    if isinstance(exhausted, int) and exhausted > 0:
        yield Remedy.RMA, f"{exhausted} memory bank(s) with no spare rows left: needs RMA"
    if aggregate.get("sram_threshold_exceeded") is True:
        yield Remedy.FIELD_DIAG, "SRAM error threshold exceeded: needs field diagnostics"
    action = gpu.get("recovery_action")
    if action is not None:
        remedy = _RECOVERY.get(str(action), Remedy.HUMAN)
        if remedy is not Remedy.NONE:
            yield remedy, f"driver recovery action: {action}"
    elif gpu.get("reset_required") is True or gpu.get("drain_and_reset_recommended") is True:
        yield Remedy.RESET, "driver: reset required"
    if remap.get("pending") is True:
        yield Remedy.RESET, "row remap pending"
    if (gpu.get("retired_pages") or {}).get("pending") is True:
        yield Remedy.RESET, "page retirement pending"
    dbe = volatile.get("dbe")
    if isinstance(dbe, int) and dbe > 0:
        yield Remedy.RESET, f"{dbe} volatile uncorrectable ECC error(s)"
    fabric = gpu.get("fabric") or {}
    state = str(fabric.get("state") or "n/a")
    if state.lower() not in _FABRIC_READY:
        yield Remedy.RESET, f"NVLink fabric state {state}: reset after Fabric Manager runs"


_FABRIC_READY = frozenset({"completed", "n/a", "not supported", "unknown"})
"""Fabric states that need nothing: registered, or a board without an NVLink fabric. Fabric
Manager guide: GPUs not registered after Fabric Manager started must be reset before CUDA
works."""


def _xid154(xid: Facts, smi: Facts) -> dict[str, str]:
    """GPU -> the last recovery action an Xid 154 line asked for (this boot's log)."""
    by_bus = {str(g.get("bus_id") or "").lower(): _key(g) for g in smi.get("gpus", ())}
    latest: dict[str, str] = {}
    for event in xid.get("events", ()):
        action = event.get("recovery_action")
        if event.get("code") != 154 or action is None:
            continue
        bus = str(event.get("bus_id") or "").lower()
        latest[by_bus.get(bus, bus or "node")] = str(action)
    return latest


def _missing(smi: Facts, xid: Facts | None) -> str | None:
    lost = smi.get("lost_gpus") or ()
    if smi.get("count_ok") is False or lost:
        seen, expected = smi.get("gpu_count"), smi.get("expected_gpus")
        return f"{seen} of {expected} GPUs visible: reboot to bring them back"
    if xid is not None and 79 in (xid.get("codes") or ()):
        return "Xid 79 (GPU fallen off the bus) in this boot's log: reboot"
    return None


def _note(found: dict[str, tuple[Remedy, str]], key: str, remedy: Remedy, why: str) -> None:
    if key not in found or remedy > found[key][0]:
        found[key] = (remedy, why)


def _key(gpu: Facts) -> str:
    index = gpu.get("index")
    return str(index if index is not None else gpu.get("bus_id") or "?")


def _as_key(key: str) -> GpuKey:
    return int(key) if key.isdigit() else key
