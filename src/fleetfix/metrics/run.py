"""A run's metrics: counters aggregated from its events, turned into metric families on demand.

Feeding an event is a dictionary lookup and a counter bump (it runs for every event of a
10,000-host run); rendering happens only when a file is written or a scrape asks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    Event,
    FindingRaised,
    HostBackInService,
    HostLeft,
    HostOutOfService,
    HostStepFinished,
    HostStepStarted,
    LoopItemFinished,
    RunFinished,
    RunStarted,
    SafetyStop,
)
from fleetfix.metrics.exposition import Family, Labels, Sample, histogram_samples, labels
from fleetfix.metrics.phases import PHASES, PhaseClock
from fleetfix.results import Outcome, Status, StepResult
from fleetfix.topology.graph import DOMAIN_KINDS
from fleetfix.verdicts import LeftKind, Verdict, VerdictKind

HOLD_KEY = "fleetfix_hold"
"""engine.remediate.HOLD_KEY: a held action's hold, in its step's registered data (the metrics
read events and results, never the engine; a test pins the two equal)."""
LEFT_KINDS: tuple[str, ...] = tuple(LeftKind)
HOLD_REASONS: tuple[str, ...] = (
    "suspect_domain",
    "max_unavailable_per",
    "repair_budget",
    "max_attempts",
    "cooldown",
    "other",
)
SUCCEEDED = frozenset({Status.OK, Status.CHANGED, Status.IGNORED})
PHASE_BUCKETS: tuple[float, ...] = (
    *(1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0),
    *(600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0),
)
"""Seconds: a GPU reset takes seconds, a bare-metal reboot minutes, a drain waits hours."""


def hold_reason(text: str) -> str:
    """The kind of gate that held an action, from the hold's text (engine/safety.py, the
    journal's budget and engine/remediate.py's attempt gate word them)."""
    for needle, reason in (
        ("repair budget", "repair_budget"),
        ("max_unavailable_per", "max_unavailable_per"),
        ("suspect", "suspect_domain"),
        ("max_attempts", "max_attempts"),
        ("cooldown", "cooldown"),
    ):
        if needle in text:
            return reason
    return "other"


def _rungs(result: StepResult) -> Iterator[Mapping[str, Any]]:
    """The rungs of an action step's escalation ladder, as engine/remediate.py records them
    (`{"action", "failed", "msg"}`), in order; none for any other step."""
    ladder = result.data.get("ladder")
    return iter([r for r in ladder if isinstance(r, Mapping)] if isinstance(ladder, list) else [])


class _Histogram:
    """Observations per label value, in fixed buckets."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets: dict[str, Counter[float]] = {}
        self.sums: dict[str, float] = {}
        self.counts: Counter[str] = Counter()

    def observe(self, key: str, value: float) -> None:
        bound = next((b for b in self.bounds if value <= b), None)
        if bound is not None:
            self.buckets.setdefault(key, Counter())[bound] += 1
        self.sums[key] = self.sums.get(key, 0.0) + value
        self.counts[key] += 1

    def samples(self, key: str, base: Labels) -> tuple[Sample, ...]:
        found = self.buckets.get(key, Counter())
        total = self.sums.get(key, 0.0)
        return histogram_samples(base, self.bounds, found, total, self.counts[key])


class RunMetrics:
    """Subscribe it to a run's events; `families(now, out_of_service)` are its metrics."""

    def __init__(self, playbook: str, *, check_changes_exit: bool = False) -> None:
        self.playbook = Path(playbook).name
        self.check_changes_exit = check_changes_exit
        self.run_id = ""
        self.check = False
        self.hosts = 0
        self.started: float | None = None
        self.finished: float | None = None
        self.outcome: int | None = None
        self.steps: Counter[str] = Counter()
        self.actions_started: Counter[str] = Counter()
        self.actions: Counter[tuple[str, str]] = Counter()
        self._unsettled: dict[tuple[str, str], list[ActionTaken]] = {}
        """(host, step key) -> actions whose commands ended and whose step has no verdict yet."""
        self.taken_out = 0
        self.returned = 0
        self.step_holds: Counter[str] = Counter()
        self.run_holds: Counter[str] | None = None
        self.findings: Counter[tuple[str, bool]] = Counter()
        self.safety_stops = 0
        self.left: dict[str, str] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.phase_seconds = _Histogram(PHASE_BUCKETS)
        self.repair_seconds = _Histogram(PHASE_BUCKETS)
        self.phases = PhaseClock(self.phase_seconds.observe, self._repaired)
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            HostStepStarted: self._step_started,
            HostStepFinished: self._step_finished,
            LoopItemFinished: self._item_finished,
            ActionStarted: self._action_started,
            ActionTaken: self._action_taken,
            HostOutOfService: self._out,
            HostBackInService: self._back,
            HostLeft: self._left,
            FindingRaised: self._finding,
            SafetyStop: self._safety_stop,
            RunStarted: self._run_started,
            RunFinished: self._run_finished,
        }

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    # --- events ----------------------------------------------------------------------------

    def _run_started(self, event: RunStarted) -> None:
        self.run_id, self.check, self.hosts = event.run_id, event.check, len(event.hosts)
        self.started = event.at
        if event.playbook:
            self.playbook = Path(event.playbook).name

    def _step_started(self, event: HostStepStarted) -> None:
        self.phases.step_started(event.host, event.at)

    def _step_finished(self, event: HostStepFinished) -> None:
        result = event.result
        self._settle(result)
        if event.retrying:
            return
        self.steps[result.status.value] += 1
        succeeded = result.status in SUCCEEDED
        self.phases.step_finished(result.host, result.key, succeeded, event.at)
        if result.data.get("held") is True or isinstance(result.data.get(HOLD_KEY), str):
            self.step_holds[hold_reason(str(result.data.get(HOLD_KEY) or result.message))] += 1

    def _action_started(self, event: ActionStarted) -> None:
        self.actions_started[event.action] += 1
        self.phases.action_started(event.host, event.key, event.action, event.at)

    def _item_finished(self, event: LoopItemFinished) -> None:
        self._settle(event.result)

    def _action_taken(self, event: ActionTaken) -> None:
        # Its commands ended; whether it worked is the step's verdict (verification included)
        self._unsettled.setdefault((event.host, event.key), []).append(event)

    def _settle(self, result: StepResult) -> None:
        """Count the step's finished actions with the outcome the engine gave each rung of its
        escalation ladder, verification included: a reboot whose commands ran but that did not
        bring the GPUs back failed. An action no rung names keeps its own outcome."""
        taken = self._unsettled.pop((result.host, result.key), None)
        if taken is None:
            return
        rungs = _rungs(result)
        for event in taken:
            failed = event.failed
            for rung in rungs:
                if rung.get("action") == event.action:
                    failed = failed or bool(rung.get("failed"))
                    break
            self._count_action(event.action, failed)

    def _settle_the_rest(self) -> None:
        """Actions whose step never ended (the run was interrupted) count as they ended."""
        for taken in self._unsettled.values():
            for event in taken:
                self._count_action(event.action, event.failed)
        self._unsettled.clear()

    def _count_action(self, action: str, failed: bool) -> None:
        self.actions[(action, "failed" if failed else "ok")] += 1

    def _out(self, _event: HostOutOfService) -> None:
        self.taken_out += 1

    def _back(self, _event: HostBackInService) -> None:
        self.returned += 1

    def _left(self, event: HostLeft) -> None:
        self.left[event.host] = event.kind

    def _finding(self, event: FindingRaised) -> None:
        self.findings[(event.kind, event.hold)] += 1

    def _safety_stop(self, _event: SafetyStop) -> None:
        self.safety_stops += 1

    def _run_finished(self, event: RunFinished) -> None:
        self._settle_the_rest()
        self.finished = event.at
        self.outcome = int(event.result.outcome(check_changes_exit=self.check_changes_exit))
        self.verdicts = dict(event.result.verdicts)
        # The run's own list of holds is the one its exit code reads (one per held rung of an
        # escalation ladder, replayed holds of a resumed run included); the attempt gates'
        # refusals are not on it, so they keep their count from the steps. Never less than
        # the steps showed: a counter does not go back.
        held = Counter(hold_reason(text) for text in event.result.holds)
        self.run_holds = Counter({r: max(held[r], self.step_holds[r]) for r in HOLD_REASONS})
        self.phases.finish()

    def journal_lost(self, at: float) -> None:
        """The run stopped at `at` because it lost its journal (no RunFinished comes): exit 6,
        and its actions count as their commands ended."""
        self._settle_the_rest()
        self.finished = at
        self.outcome = int(Outcome.SAFETY_ABORT)
        self.phases.finish()

    def _repaired(self, seconds: float) -> None:
        self.repair_seconds.observe("", seconds)

    # --- rendering -------------------------------------------------------------------------

    def families(self, now: float, out_of_service: Mapping[str, float] | None) -> list[Family]:
        """The metrics as of `now`; `out_of_service` (host -> since, from the journal) adds the
        fleet-wide out-of-service series, None leaves them out (the journal could not say)."""
        found = [*self._run_families(now), *self._work_families(), *self._safety_families()]
        if out_of_service is not None:
            found.extend(self._fleet_families(now, out_of_service))
        return found

    def _base(self, **more: str) -> Labels:
        return labels(playbook=self.playbook, **more)

    def _one(self, name: str, kind: Any, text: str, value: float, **more: str) -> Family:
        return Family(name, kind, text, (Sample(self._base(**more), value),))

    def _run_families(self, now: float) -> list[Family]:
        check = "true" if self.check else "false"
        found = [
            self._one(
                "fleetfix_run_info",
                "gauge",
                "The run that wrote this file (always 1).",
                1,
                run_id=self.run_id,
                check=check,
            ),
            self._one(
                "fleetfix_run_in_progress",
                "gauge",
                "1 while the run goes on (the file is rewritten every few seconds), 0 at its end.",
                0 if self.finished is not None else 1,
            ),
            self._one("fleetfix_run_hosts", "gauge", "Hosts the run works on.", self.hosts),
        ]
        if self.started is not None:
            end = self.finished if self.finished is not None else now
            found.append(
                self._one(
                    "fleetfix_run_started_timestamp_seconds",
                    "gauge",
                    "When the run started (Unix time).",
                    self.started,
                )
            )
            found.append(
                self._one(
                    "fleetfix_run_duration_seconds",
                    "gauge",
                    "How long the run took (so far, while it goes on).",
                    max(0.0, end - self.started),
                )
            )
        if self.finished is not None:
            found.append(
                self._one(
                    "fleetfix_run_finished_timestamp_seconds",
                    "gauge",
                    "When the run finished (Unix time).",
                    self.finished,
                )
            )
        if self.outcome is not None:
            found.append(
                self._one(
                    "fleetfix_run_outcome",
                    "gauge",
                    "The run's exit code: 0 ok, 2 host failed, 4 unreachable, 6 safety abort,"
                    " 7 check found changes, 99 interrupted.",
                    self.outcome,
                )
            )
        return found

    def _work_families(self) -> list[Family]:
        steps = tuple(
            Sample(self._base(status=status.value), self.steps[status.value]) for status in Status
        )
        started = tuple(
            Sample(self._base(action=action), count)
            for action, count in sorted(self.actions_started.items())
        )
        actions = tuple(
            Sample(self._base(action=action, outcome=outcome), count)
            for (action, outcome), count in sorted(self.actions.items())
        )
        phase_samples = tuple(
            sample
            for phase in PHASES
            for sample in self.phase_seconds.samples(phase, self._base(phase=phase))
        )
        return [
            Family(
                "fleetfix_host_steps_total",
                "counter",
                "Host-steps finished, by verdict as each step ended (a failure a rescue"
                " block then handled counts as failed here, as rescued in the PLAY RECAP).",
                steps,
            ),
            Family(
                "fleetfix_actions_started_total",
                "counter",
                "Mutating actions started (write-ahead intents journaled), by action.",
                started,
            ),
            Family(
                "fleetfix_actions_total",
                "counter",
                "Mutating actions finished, by action and outcome (ok, failed).",
                actions,
            ),
            self._one(
                "fleetfix_hosts_taken_out_total",
                "counter",
                "Hosts this run took out of service (their first disruptive action).",
                self.taken_out,
            ),
            self._one(
                "fleetfix_hosts_returned_total",
                "counter",
                "Hosts this run took out of service and counted back in service.",
                self.returned,
            ),
            Family(
                "fleetfix_repair_phase_seconds",
                "histogram",
                "Time a host spent in each repair phase: detect, drain, fix, validate, return.",
                phase_samples,
            ),
            Family(
                "fleetfix_repair_seconds",
                "histogram",
                "Time from a host's first step to its return to service (slurm_resume done).",
                self.repair_seconds.samples("", self._base()),
            ),
        ]

    def _safety_families(self) -> list[Family]:
        holds = self.run_holds if self.run_holds is not None else self.step_holds
        left = Counter(self.left.values())
        kinds = (*LEFT_KINDS, *sorted(set(left) - set(LEFT_KINDS)))
        # Every domain kind, holding or not, from 0: an alert or increase() has a series
        seen = {kind for kind, _ in self.findings}
        finding_kinds = (*DOMAIN_KINDS, *sorted(seen - set(DOMAIN_KINDS)))
        findings = tuple(
            Sample(self._base(kind=kind, hold=hold), self.findings[(kind, hold == "true")])
            for kind in finding_kinds
            for hold in ("false", "true")
        )
        return [
            Family(
                "fleetfix_holds_total",
                "counter",
                "Disruptive actions held back, by the gate that held them.",
                tuple(Sample(self._base(reason=r), holds[r]) for r in HOLD_REASONS),
            ),
            self._one(
                "fleetfix_budget_refusals_total",
                "counter",
                "Disruptive actions held because the fleet-wide repair budget was reached.",
                holds["repair_budget"],
            ),
            Family(
                "fleetfix_findings_total",
                "counter",
                "Topology findings (failures concentrated in one domain), by domain kind and"
                " whether they hold disruptive actions there.",
                findings,
            ),
            self._one(
                "fleetfix_safety_stops_total",
                "counter",
                "Plays a safety gate stopped (max_fail_percentage, ...).",
                self.safety_stops,
            ),
            Family(
                "fleetfix_hosts_left",
                "gauge",
                "Hosts the run leaves unhealthy or untouched on purpose, by why.",
                tuple(Sample(self._base(kind=kind), left[kind]) for kind in kinds),
            ),
            *self._verdict_families(),
        ]

    def _verdict_families(self) -> list[Family]:
        """Hosts by the engine's verdict (every verdict from 0), and one series per host whose
        verdict fails the run: what an alert names. Healthy hosts get no series of their
        own, so a 10,000-host sweep does not write 10,000 of them."""
        counts = Counter(v.kind for v in self.verdicts.values())
        failing = sorted((v for v in self.verdicts.values() if v.failing), key=lambda v: v.host)
        return [
            Family(
                "fleetfix_hosts_by_verdict",
                "gauge",
                "Hosts of the run by the verdict fleetfix reached (fleetfix/verdicts.py).",
                tuple(Sample(self._base(verdict=k.value), counts[k]) for k in VerdictKind),
            ),
            Family(
                "fleetfix_host_verdict",
                "gauge",
                "1 for each host whose verdict fails the run (needs RMA, deferred, ...).",
                tuple(Sample(self._base(host=v.host, verdict=v.kind.value), 1) for v in failing),
            ),
        ]

    def _fleet_families(self, now: float, out: Mapping[str, float]) -> list[Family]:
        hosts = sorted(out)
        return [
            self._one(
                "fleetfix_hosts_out_of_service",
                "gauge",
                "Hosts fleetfix has out of service and has not returned, across runs (what"
                " the repair budget counts).",
                len(hosts),
            ),
            Family(
                "fleetfix_host_out_of_service_since_timestamp_seconds",
                "gauge",
                "When fleetfix took the host out of service (drained it; Unix time).",
                tuple(Sample(self._base(host=host), out[host]) for host in hosts),
            ),
            Family(
                "fleetfix_host_out_of_service_seconds",
                "gauge",
                "How long the host has been out of service by fleetfix, as of this write.",
                tuple(Sample(self._base(host=host), max(0.0, now - out[host])) for host in hosts),
            ),
        ]
