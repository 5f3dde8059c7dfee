"""What a node's GPUs need now, decided in one place from what the driver reports.

Every playbook that resets, reboots or returns a node to service, the check before `slurm_resume`
and the end-of-run health check ask this module, so a GPU the driver wants reset is never
"healthy" to one of them and fine to another. It reads plain probe data (`to_data(facts)`) of
`nvidia_smi` and, optionally, `xid` and `services`, so the same verdict comes from a live probe,
a registered result in a playbook (the `fleetfix_remedy` filter) or the journal. `from_log` is
the kernel log's part alone (for a check without nvidia-smi), `for_xid` says what these rules do
for a GPU that logged a given Xid (`fleetfix xid`).

The rules, most severe first (sources in docs/gpu-procedures.md):

1. RMA candidate (`field_diag`): a row-remapping failure ("Remapping Failure Occurred: Yes"),
   memory the GPU reports unrepairable, a bank with no spare rows left (the remap histogram's
   "None" bucket), or the SRAM error threshold exceeded. No reset or counter reset fixes these,
   but none of them is an RMA by itself: NVIDIA's RMA policy (A100/H100 GPU Memory Error
   Management, "RMA Policy Thresholds for Row-Remapping") counts a remap failure once NVIDIA's
   field diagnostic confirms it, and the Xid 48 workflow says "if set, RUN_FIELDDIAG". fleetfix
   drains the node "RMA candidate: run the field diagnostic"; it does not run the field
   diagnostic itself. A bogus RMA takes a node away for weeks.
   (`rma`, a confirmed RMA, is what an operator says after the field diagnostic, with the
   `rma_confirmed` host var: playbooks word the drain reason from it; no probe yields it.)
2. The driver's recovery action (drivers 570+: nvidia-smi "GPU Recovery Action", Xid 154): Reboot
   (NODE_REBOOT, "OS Reboot") -> a warm reboot; System Reboot (SYSTEM_REBOOT, "Reboot the
   system") and Bus Reset (BUS_RESET, "Reset the GPU's PCIe bus") -> a cold power cycle, which
   a warm reboot or `nvidia-smi -r` does not give (`power_cycle`: through the node's BMC where
   the inventory names one and the operator allowed it, else drained "needs a human: cold
   power cycle"); Reset, Drain and Reset, Drain P2P -> drain and reset the GPU; Recover IMEX
   Domain -> restart IMEX; an action the table cannot name -> a human.
   On older drivers the same verdict comes from "Reset Required" / "Drain and Reset Recommended".
3. A GPU the node should have and does not show (Xid 79, fallen off the bus, failed to
   initialise) -> reboot, whatever the recovery action says; one a warm reboot does not bring
   back gets a cold power cycle (playbooks escalate the reboot), and only one that survives the
   cold cycle is an RMA candidate (nvidia-smi manual: power-cycle before giving up on a GPU
   that fell off the bus).
4. State a reset clears although the driver raises no flag: a pending row remap, a pending page
   retirement, volatile uncorrectable (double-bit) errors, an NVLink fabric state other than
   Completed (Fabric Manager guide: GPUs not registered after Fabric Manager started must be
   reset) -> reset.
5. Fabric Manager installed but not running on a board whose GPUs register with an NVLink fabric
   (a fabric state is reported: NVSwitch, Hopper and later) -> reset every GPU (given `services`
   data). Fabric Manager guide: NVSwitch systems need Fabric Manager for CUDA (on H100 new jobs
   fail without it unless persistence mode is on, and after any GPU reset even with it), and
   GPUs must be reset before it starts again (Hopper and later: every NVLink peer in one command
   while it is stopped, then start it; gpu_reset does that, actions/fabric.py).

Old log lines alone never ask for anything: after a reset the kernel log still holds the Xid
that caused it. Xid 154 lines count only when nvidia-smi does not report the recovery action
itself (it reports the current one; the log keeps every change).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fleetfix.knowledge.recovery import RecoveryAction

Facts = Mapping[str, Any]
GpuKey = int | str

FABRIC_MANAGER = "nvidia-fabricmanager"
RMA_CANDIDATE = "RMA candidate: run the field diagnostic"
"""How fleetfix words a GPU no reset fixes until NVIDIA's field diagnostic confirms an RMA."""
RMA_REASON = re.compile(r"\bneeds RMA\b|\bRMA candidate\b")
"""fleetfix's drain reason for a node to replace parts of: `fleetfix: ... RMA candidate: run
the field diagnostic` (what fleetfix itself writes: NVIDIA's field diagnostic confirms an RMA)
or `needs RMA` (a confirmed one): the convention of the shipped playbooks (their
`left_for_rma`) and docs/gpu-procedures.md."""


def is_rma_reason(reason: str) -> bool:
    """A drain reason that says the node needs RMA, or is an RMA candidate."""
    return RMA_REASON.search(reason) is not None


GPU_GONE_XIDS = frozenset({79})
"""Xids that mean a GPU is gone from the bus (rule 4): only a reboot brings it back. The
fallen-off-the-bus messages without an Xid line are read as Xid 79 too (probes/xid.py)."""


class Remedy(enum.IntEnum):
    """What a GPU (or node) needs, ordered: the node needs its GPUs' most severe one."""

    NONE = 0
    RESET = 1
    RECOVER_IMEX = 2
    REBOOT = 3
    POWER_CYCLE = 4
    """A cold boot (power off and on): SYSTEM_REBOOT, BUS_RESET, or a GPU a warm reboot did not
    bring back. Through the BMC where allowed, else a person's."""
    HUMAN = 5
    """The driver asks for something fleetfix cannot name: drain, leave for a person."""
    FIELD_DIAG = 6
    """An RMA candidate: drained until NVIDIA's field diagnostic (or an operator) confirms."""
    RMA = 7
    """A confirmed RMA (the operator's `rma_confirmed`); never from probes alone."""

    @property
    def word(self) -> str:
        return self.name.lower()

    @property
    def doing(self) -> str:
        """What fleetfix does about it, in operator words (recover.yml's paths)."""
        return _DOING[self]


_DOING: Mapping[Remedy, str] = MappingProxyType(
    {
        Remedy.NONE: "nothing",
        Remedy.RESET: "drain the node and reset the GPU",
        Remedy.RECOVER_IMEX: "drain the node and restart nvidia-imex",
        Remedy.REBOOT: "drain the node and reboot it",
        Remedy.POWER_CYCLE: "drain the node and power-cycle it through its BMC (bmc_host, with"
        ' power_cycle allowed), else leave it drained "needs a human: cold power cycle"',
        Remedy.HUMAN: 'drain the node "needs a human"',
        Remedy.FIELD_DIAG: 'drain the node "RMA candidate: run the field diagnostic"',
        Remedy.RMA: 'drain the node "needs RMA" (once the field diagnostic confirmed it)',
    }
)

_RECOVERY: Mapping[str, Remedy] = MappingProxyType(
    {
        "none": Remedy.NONE,
        "reset": Remedy.RESET,
        "drain_and_reset": Remedy.RESET,
        "drain_p2p": Remedy.RESET,
        "bus_reset": Remedy.POWER_CYCLE,
        "reboot": Remedy.REBOOT,
        "system_reboot": Remedy.POWER_CYCLE,
        "recover_imex_domain": Remedy.RECOVER_IMEX,
        "unknown": Remedy.HUMAN,
    }
)
"""The driver's recovery action (fact names, knowledge/recovery.py) -> what fleetfix does.
Drain P2P: NVML asks to drain peer-to-peer traffic and reset; fleetfix drains the whole node
(no job can keep P2P traffic off one GPU) and resets. System Reboot and Bus Reset ask for more
than a warm reboot or `nvidia-smi -r` gives (the system's power, the GPU's PCIe bus): a cold
power cycle."""


def recovery_remedy(action: str) -> Remedy:
    """What fleetfix does for a recovery action the driver reports (its fact name: `reset`,
    `drain_and_reset`, ...); one it cannot name is a human's call."""
    return _RECOVERY.get(action, Remedy.HUMAN)


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
            "rma_candidate": self.remedy is Remedy.FIELD_DIAG,
        }


_Found = dict[str, tuple[Remedy, str]]


def decide(smi: Facts | None, xid: Facts | None = None, services: Facts | None = None) -> Verdict:
    """The node's verdict from `nvidia_smi` (and `xid`, `services`) probe data. No nvidia-smi
    data means nothing can be judged: that is a human's call, never "fine". Without `services`
    the Fabric Manager rule (6) is not applied."""
    if smi is None:
        return Verdict(Remedy.HUMAN, why=("nvidia-smi gave no facts",))
    found: _Found = {}
    for gpu in smi.get("gpus", ()):
        for remedy, reason in _gpu_needs(gpu):
            _note(found, _key(gpu), remedy, reason)
    if xid is not None and not _reports_recovery(smi):
        for key, action in _xid154(xid, smi).items():
            remedy = recovery_remedy(action)
            if remedy is not Remedy.NONE:
                _note(found, key, remedy, f"Xid 154: driver asks for {action}")
    stopped = _fabric_manager_stopped(smi, services)
    if stopped:
        for gpu in smi.get("gpus", ()):
            _note(found, _key(gpu), Remedy.RESET, stopped)
    lost = _missing(smi, xid)
    if lost:
        _note(found, "node", Remedy.REBOOT, lost)
    if xid is not None:
        for key, remedy, why in _gpu_failures(xid):
            _note(found, key, remedy, f"{why} in this boot's kernel log")
    return _verdict(found)


def from_log(xid: Facts, smi: Facts | None = None) -> Verdict:
    """What this boot's kernel log (`xid` probe data) asks for that no GPU reset can have
    answered since: a reboot, for a GPU fallen off the bus (Xid 79) or for an Xid 154 whose
    latest action on a GPU is a reboot (counted only when `smi` does not report the recovery
    action itself, as in `decide`). For checks that judge the log apart from nvidia-smi: an ask
    a reset answers stays in the log after the reset that cured it, so it is not taken from
    there. Returns NONE or REBOOT."""
    found: _Found = {}
    if smi is None or not _reports_recovery(smi):
        for key, action in _xid154(xid, smi).items():
            if recovery_remedy(action) is Remedy.REBOOT:
                _note(found, key, Remedy.REBOOT, f"Xid 154 in this boot's kernel log: {action}")
    gone = sorted(GPU_GONE_XIDS & set(xid.get("codes") or ()))
    if gone:
        codes = ", ".join(str(code) for code in gone)
        _note(found, "node", Remedy.REBOOT, f"Xid {codes} in this boot's kernel log")
    for key, remedy, why in _gpu_failures(xid):
        _note(found, key, remedy, f"{why} in this boot's kernel log")
    return _verdict(found)


_FAILURE_REMEDY: Mapping[str, tuple[Remedy, str]] = MappingProxyType(
    {
        "init_failed": (Remedy.REBOOT, "the driver could not initialise the GPU"),
        "fell_off_bus": (Remedy.REBOOT, "the GPU fell off the bus"),
        "probe_failed": (Remedy.REBOOT, "the driver's probe of a GPU failed"),
        "no_power": (Remedy.HUMAN, "the GPU lacks its power cables"),
        "unsupported": (Remedy.HUMAN, "this driver does not support the GPU"),
    }
)
"""What a GPU the driver could not bring up needs (probes/gpu_failures.py kinds): the driver
tries again at the next boot, so a reboot (then, playbooks escalating, a cold power cycle) for
a failed initialisation or a GPU off the bus; cables and a driver that does not support the
board are a person's work."""


def _gpu_failures(xid: Facts) -> Iterable[tuple[str, Remedy, str]]:
    """(GPU key, remedy, why) per GPU failure the kernel log reports this boot."""
    for failure in xid.get("gpu_failures") or ():
        remedy, why = _FAILURE_REMEDY.get(str(failure.get("kind")), (Remedy.HUMAN, "GPU failure"))
        bus = failure.get("bus_id")
        yield (str(bus) if bus else "node"), remedy, f"{why} ({failure.get('message')})"


@dataclass(frozen=True, slots=True)
class XidRemedy:
    """What these rules do for a GPU that logged an Xid (`fleetfix xid CODE`)."""

    code: int
    remedy: Remedy | None
    """What fleetfix does; None when that depends on what the node reports now."""
    why: str
    by_action: tuple[tuple[RecoveryAction, Remedy], ...]
    """What fleetfix does for this Xid when the driver reports each recovery action."""


def for_xid(code: int, recovery_action: RecoveryAction | None = None) -> XidRemedy:
    """What fleetfix does for a GPU that logged Xid `code`, when the driver reports
    `recovery_action` (None: not given, or a driver that reports none).

    The log line itself decides nothing (rule 3's recovery action and the GPU's state do),
    except for an Xid meaning the GPU is gone (`GPU_GONE_XIDS`): a reboot, whatever the action.
    """
    gone = code in GPU_GONE_XIDS
    floor = Remedy.REBOOT if gone else Remedy.NONE
    by_action = tuple((a, max(recovery_remedy(a.fact_name), floor)) for a in RecoveryAction)
    if recovery_action is not None:
        asked = recovery_remedy(recovery_action.fact_name)
        remedy = max(asked, floor)
        return XidRemedy(code, remedy, _reported_why(code, recovery_action, asked), by_action)
    if gone:
        return XidRemedy(code, Remedy.REBOOT, _GONE.format(code=code), by_action)
    return XidRemedy(code, None, _XID154 if code == 154 else _NOW, by_action)


_NOW = (
    "fleetfix acts on what the node reports now, not on this log line (it stays after the fix):"
    ' the driver\'s recovery action (nvidia-smi "GPU Recovery Action" from driver 570; the latest'
    " Xid 154 where nvidia-smi prints none), Reset Required on older drivers, and on any driver"
    " a pending row remap or page retirement, double-bit errors or an NVLink fabric not"
    " registered (a reset) and a missing GPU (a reboot)"
)
_XID154 = (
    "Xid 154 is the driver announcing its recovery action: fleetfix does what the driver"
    ' reports now (nvidia-smi "GPU Recovery Action"; the latest Xid 154 line only where'
    " nvidia-smi prints none)"
)
_GONE = (
    "Xid {code}: the GPU fell off the bus and only a reboot brings it back; fleetfix reboots a"
    " node that logged it this boot, or that shows fewer GPUs than it should, whatever the"
    " recovery action says, and power-cycles it (cold) when a warm reboot did not"
)
_STATE = (
    "a pending row remap or page retirement, double-bit errors, an NVLink fabric not registered"
    " or Fabric Manager stopped on an NVSwitch board (a reset), a missing GPU (a reboot)"
)


AFTER_SXID = (
    "nothing about the SXid itself (fleetfix reads NVSwitch log lines, it does not act on them or"
    " reset NVSwitches); it acts on the state the SXid leaves on the GPUs: the recovery action"
    " the driver reports, followed as after any Xid, an NVLink fabric state other than Completed"
    " or Fabric Manager stopped on the board (a reset), a GPU gone (a reboot)"
)
"""What these rules do after an NVSwitch SXid (`fleetfix xid --sxid`)."""


def _reported_why(code: int, action: RecoveryAction, asked: Remedy) -> str:
    if code in GPU_GONE_XIDS and asked < Remedy.REBOOT:
        return f"Xid {code}: the GPU fell off the bus; a reboot, whatever the action ({action})"
    if asked is Remedy.NONE:
        return f"the driver's recovery action None asks nothing; fleetfix still acts on {_STATE}"
    return f"the driver's recovery action {action}: fleetfix follows it, whatever the Xid"


COLD_CYCLE = "needs a human: cold power cycle"


def not_fixed(fault: str, ladder: Iterable[Mapping[str, Any]]) -> str:
    """What a node a repair did not fix needs next, for its drain reason, in NVIDIA's order for a
    GPU that will not come back: a warm reboot, then a cold power cycle (through the BMC where
    allowed, else a person's), and only then an RMA candidate for the field diagnostic.
    `ladder` is a repair step's rungs as the engine registers them (action, failed, ran, msg)."""
    rungs = {str(r.get("action")): r for r in ladder}
    cycle, reboot = rungs.get("power_cycle"), rungs.get("reboot")
    if cycle is not None and cycle.get("ran"):
        return f"{fault}; persists after a cold power cycle; {RMA_CANDIDATE}"
    if reboot is not None and reboot.get("ran"):
        failed = cycle is not None and COLD_CYCLE not in str(cycle.get("msg") or "")
        why = " (the power cycle through the BMC failed: see the journal)" if failed else ""
        return f"{fault}; persists after a warm reboot; {COLD_CYCLE}{why}"
    last = next(reversed(list(rungs.values())), None)
    if last is not None and last.get("msg"):
        return f"{fault}; not fixed ({last['msg']}); needs a human"
    return f"{fault}; not fixed; needs a human"


def _verdict(found: _Found) -> Verdict:
    if not found:
        return Verdict(Remedy.NONE)
    worst = max(remedy for remedy, _ in found.values())
    gpus = tuple(_as_key(k) for k, (r, _) in found.items() if r is worst and k != "node")
    resets = tuple(_as_key(k) for k, (r, _) in found.items() if r is Remedy.RESET)
    reasons = tuple(f"GPU {k}: {w}" if k != "node" else w for k, (_, w) in found.items())
    by_gpu = {k: r.word for k, (r, _) in found.items()}
    return Verdict(worst, gpus, resets, reasons, by_gpu)


def _reports_recovery(smi: Facts) -> bool:
    return any(gpu.get("recovery_action") is not None for gpu in smi.get("gpus", ()))


def _gpu_needs(gpu: Facts) -> Iterable[tuple[Remedy, str]]:
    remap = gpu.get("remapped_rows") or {}
    ecc = gpu.get("ecc") or {}
    aggregate = ecc.get("aggregate") or {}
    volatile = ecc.get("volatile") or {}
    if remap.get("failure") is True:
        yield Remedy.FIELD_DIAG, f"row remapping failure: {RMA_CANDIDATE}"
    if ecc.get("unrepairable_memory") is True:
        yield Remedy.FIELD_DIAG, f"unrepairable memory: {RMA_CANDIDATE}"
    exhausted = (remap.get("histogram") or {}).get("none")
    if isinstance(exhausted, int) and exhausted > 0:
        yield (
            Remedy.FIELD_DIAG,
            f"{exhausted} memory bank(s) with no spare rows left: {RMA_CANDIDATE}",
        )
    if aggregate.get("sram_threshold_exceeded") is True:
        yield Remedy.FIELD_DIAG, f"SRAM error threshold exceeded: {RMA_CANDIDATE}"
    action = gpu.get("recovery_action")
    if action is not None:
        remedy = recovery_remedy(str(action))
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
    state = _fabric_state(gpu) or "n/a"
    if state.lower() not in _FABRIC_READY:
        yield Remedy.RESET, f"NVLink fabric state {state}: reset after Fabric Manager runs"


_FABRIC_READY = frozenset({"completed", "n/a", "not supported", "unknown"})
"""Fabric states that need nothing: registered, or a board without an NVLink fabric. Fabric
Manager guide: GPUs not registered after Fabric Manager started must be reset before CUDA
works."""
_NO_FABRIC = frozenset({"n/a", "not supported"})


def _fabric_state(gpu: Facts) -> str | None:
    state = (gpu.get("fabric") or {}).get("state")
    return None if state is None else str(state)


def _fabric_manager_stopped(smi: Facts, services: Facts | None) -> str | None:
    """Rule 6: why every GPU needs a reset when Fabric Manager is installed (systemd's LoadState
    loaded: not masked, not merely unknown) but not running on a board whose GPUs register with
    an NVLink fabric; None otherwise."""
    if services is None or not _installed(services, FABRIC_MANAGER):
        return None
    if FABRIC_MANAGER in (services.get("active") or ()):
        return None
    if not any(_registers(gpu) for gpu in smi.get("gpus", ())):
        return None
    return (
        f"{FABRIC_MANAGER} is not running on an NVSwitch board: new CUDA jobs fail without it"
        " (with persistence mode, from the next GPU reset on); reset the GPUs, then start it"
    )


def _registers(gpu: Facts) -> bool:
    """The GPU reports a fabric state: it registers with an NVLink fabric (NVSwitch boards from
    Hopper on, GB200), as actions/fabric.py's `board_of` reads it."""
    state = _fabric_state(gpu)
    return state is not None and state.lower() not in _NO_FABRIC


def _installed(services: Facts, unit: str) -> bool:
    """systemd says the unit is installed (LoadState loaded). `is-active` alone says "inactive"
    for a unit that does not exist, and a masked unit is one a site chose not to run."""
    return any(
        s.get("unit") == unit and s.get("load_state") == "loaded"
        for s in services.get("services") or ()
    )


def unit_presence(units: Mapping[str, str], active: Collection[str], unit: str) -> str:
    """`running`, `stopped` (installed, not active) or `absent`, from the `services` probe's
    `units` (unit -> state) and `active` (typed facts or plain data alike). A unit systemd does
    not know, or that nobody could ask about, is absent: never guessed installed."""
    state = units.get(unit)
    if state is None or state in ("not-found", "unknown"):
        return "absent"
    return "running" if unit in active else "stopped"


def _xid154(xid: Facts, smi: Facts | None) -> dict[str, str]:
    """GPU -> the last recovery action an Xid 154 line asked for (this boot's log)."""
    gpus = smi.get("gpus", ()) if smi is not None else ()
    by_bus = {str(g.get("bus_id") or "").lower(): _key(g) for g in gpus}
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
        if expected is None:  # the driver lost one (a GPU off the bus): no count was expected
            expected = (seen or 0) + len(lost)
        return f"{seen} of {expected} GPUs visible: reboot to bring them back"
    gone = sorted(GPU_GONE_XIDS & set(xid.get("codes") or ())) if xid is not None else []
    if gone:
        return f"Xid {gone[0]} (GPU fallen off the bus) in this boot's log: reboot"
    return None


def _note(found: _Found, key: str, remedy: Remedy, why: str) -> None:
    if key not in found or remedy > found[key][0]:
        found[key] = (remedy, why)


def _key(gpu: Facts) -> str:
    index = gpu.get("index")
    return str(index if index is not None else gpu.get("bus_id") or "?")


def _as_key(key: str) -> GpuKey:
    return int(key) if key.isdigit() else key
