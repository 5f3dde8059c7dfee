"""Time to repair, phase by phase, read from a run's events: detect, drain, fix, validate,
return.

A host's phases, contiguous on its timeline:

- detect: the time fleetfix spent working on the host before its first action: its steps'
  own durations, each from the moment it got its fork (so never the time it queued behind
  other hosts' steps: forks, the linear strategy's step-by-step pace), up to that action;
- drain: from `slurm_drain` starting to its step finishing (waiting for jobs included);
- fix: from the drain's end (or the first fixing action) to the end of the last step that ran
  a fixing action (reboot, gpu_reset, reload_driver, ...; an escalation ladder is one step);
- validate: from the fix's end (or the drain's, if nothing was fixed) to `slurm_resume`
  starting: active tests and the resume's own validation reads;
- return: from `slurm_resume` starting to its step finishing without failing.

The other phases are spans of wall time (the node is out of service, or on its way, all
along, whoever fleetfix is busy with). A phase is observed once per host, when it ends; a host
left drained (RMA) has no validate or return phase. Actions that come after a later phase
began (the drain that leaves a node for an RMA after its reboot failed) do not reopen an
earlier one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

PHASES: tuple[str, ...] = ("detect", "drain", "fix", "validate", "return")
PHASE_OF_ACTION: dict[str, str] = {
    "slurm_drain": "drain",
    "slurm_resume": "return",
    "slurm_reserve": "validate",
    "slurm_release": "validate",
    "nccl_tests": "validate",
    "dcgm_diag": "validate",
}
"""Actions by phase; any other action (reboot, gpu_reset, reload_driver, a plugin's) fixes."""
NEUTRAL_ACTIONS = frozenset({"collect_evidence"})
"""Actions that end detection but belong to no phase of their own."""

Observe = Callable[[str, float], None]
"""Called with (phase, seconds) when a host's phase ends."""


def phase_of(action: str) -> str | None:
    if action in NEUTRAL_ACTIONS:
        return None
    return PHASE_OF_ACTION.get(action, "fix")


@dataclass(slots=True)
class _Repair:
    """One host's milestones in this run (epoch seconds)."""

    seen: float
    drain_start: float | None = None
    drain_key: str | None = None
    drain_end: float | None = None
    fix_start: float | None = None
    fix_keys: set[str] = field(default_factory=set)
    fix_end: float | None = None
    fix_closed: bool = False
    return_start: float | None = None
    return_key: str | None = None
    returned: bool = False


class PhaseClock:
    """Per-host milestones from events; calls `observe(phase, seconds)` as phases end and
    `repaired(seconds)` when a host is back in service (first step to resume finished)."""

    def __init__(self, observe: Observe, repaired: Callable[[float], None]) -> None:
        self._observe = observe
        self._repaired = repaired
        self._first_step: dict[str, float] = {}
        self._step_open: dict[str, float] = {}
        """host -> when its running step started (it holds its fork from then on)."""
        self._busy: dict[str, float] = {}
        """host -> seconds its finished steps took, until its first action."""
        self._repairs: dict[str, _Repair] = {}

    def step_started(self, host: str, at: float) -> None:
        self._first_step.setdefault(host, at)
        self._step_open[host] = at

    def action_started(self, host: str, key: str, action: str, at: float) -> None:
        repair = self._repairs.get(host)
        if repair is None:
            repair = self._repairs[host] = _Repair(seen=self._first_step.get(host, at))
            self._observe("detect", self._worked(host, at))
        phase = phase_of(action)
        if phase == "drain" and repair.drain_start is None and repair.fix_start is None:
            repair.drain_start, repair.drain_key = at, key
        elif phase == "fix" and repair.return_start is None and not repair.fix_closed:
            repair.fix_start = at if repair.fix_start is None else repair.fix_start
            repair.fix_keys.add(key)
        elif phase == "validate":
            self._close_fix(repair)
        elif phase == "return" and repair.return_start is None:
            self._close_fix(repair)
            self._emit("validate", _first(repair.fix_end, repair.drain_end), at)
            repair.return_start, repair.return_key = at, key

    def step_finished(self, host: str, key: str, succeeded: bool, at: float) -> None:
        repair = self._repairs.get(host)
        if repair is None:
            self._busy[host] = self._worked(host, at)
            self._step_open.pop(host, None)
            return
        if key == repair.drain_key and repair.drain_end is None:
            repair.drain_end = at
            self._emit("drain", repair.drain_start, at)
        if key in repair.fix_keys and not repair.fix_closed:
            repair.fix_end = at
        if key == repair.return_key and succeeded and not repair.returned:
            repair.returned = True
            self._emit("return", repair.return_start, at)
            self._repaired(max(0.0, at - repair.seen))

    def finish(self) -> None:
        """The run ended: a fix phase still open ends with its last finished step."""
        for repair in self._repairs.values():
            self._close_fix(repair)

    def _worked(self, host: str, at: float) -> float:
        """The host's finished steps' time, plus its running step's until `at`."""
        running = self._step_open.get(host)
        return self._busy.get(host, 0.0) + (max(0.0, at - running) if running is not None else 0.0)

    def _close_fix(self, repair: _Repair) -> None:
        if repair.fix_start is None or repair.fix_closed:
            return
        repair.fix_closed = True
        drained_first = repair.drain_end is not None and repair.drain_end <= repair.fix_start
        begin = repair.drain_end if drained_first else repair.fix_start
        self._emit("fix", begin, repair.fix_end)

    def _emit(self, phase: str, begin: float | None, end: float | None) -> None:
        if begin is not None and end is not None:
            self._observe(phase, max(0.0, end - begin))


def _first(*values: float | None) -> float | None:
    return next((value for value in values if value is not None), None)
