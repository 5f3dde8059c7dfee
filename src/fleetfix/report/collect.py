"""The report collector: an event subscriber that builds the report model from a run's events.

    collector = ReportCollector()
    bus.subscribe(collector)
    ... run ...
    report = collector.model(topology)          # findings computed from the run
    write_report(report, Path("run.html"))

Commands come from `CommandRan` events, which the engine redacts for no_log steps, never from
`StepResult.commands` (which holds what really ran). Timing comes from the events' `at`.

A resumed run keeps its run id: its journal holds every attempt, one `RunStarted` each. Fed
them in order (`fleetfix report RUN`, or `resumed_collector` before a resumed run starts), the
collector keeps the actions of the attempts before the interruption (the reboots and drains
done then) and reports the last attempt's steps, recap and verdicts: the report covers the
whole run, as the live report of the resumed run does.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from math import isfinite
from typing import Any

from fleetfix.events import (
    ActionTaken,
    CommandRan,
    Event,
    HostLeft,
    HostStepFinished,
    HostStepStarted,
    PlayStarted,
    RunFinished,
    RunStarted,
    SafetyStop,
)
from fleetfix.report.model import (
    ActionRecord,
    CommandRecord,
    HostReport,
    LeafNode,
    Report,
    SpineNode,
    StepRecord,
)
from fleetfix.report.text import EXCERPT_CHARS, clean, excerpt
from fleetfix.results import (
    HostStats,
    RunResult,
    StepResult,
    failed_and_considered,
    kept_of,
)
from fleetfix.topology.findings import (
    Finding,
    correlated_failures,
    intra_node_mismatches,
    stragglers,
)
from fleetfix.topology.graph import NO_LEAF, NO_SPINE, Topology, natural_sorted
from fleetfix.topology.snapshot import from_places
from fleetfix.verdicts import Verdict, VerdictKind

VERIFICATION_FAILED = "verification failed"
"""What the engine's step message says when an action ran but its `verify` did not pass."""


@dataclass(slots=True)
class _OpenStep:
    """A step that started on a host and has not finished yet."""

    step: str
    play: str
    started: float | None
    commands: list[CommandRecord] = field(default_factory=list)
    attributed: int = 0  # commands already credited to an ActionTaken


class ReportCollector:
    """Subscribe it to the engine's EventBus; `model()` turns what it saw into a `Report`."""

    def __init__(
        self,
        run_id: str | None = None,
        *,
        detailed_exitcode: bool = False,
        excerpt_chars: int = EXCERPT_CHARS,
    ) -> None:
        self.run_id = run_id
        self.detailed_exitcode = detailed_exitcode
        self.excerpt_chars = excerpt_chars
        self._run: RunStarted | None = None
        self._finished: RunFinished | None = None
        self._play = ""
        self._plays: list[str] = []
        self._hosts: dict[str, None] = {}  # insertion-ordered set
        self._open: dict[str, _OpenStep] = {}
        self._steps: dict[str, list[StepRecord]] = {}
        self._results: list[StepResult] = []
        self._actions: list[ActionRecord] = []
        self._planned: dict[tuple[str, str], list[str]] = {}
        self._busbw: dict[str, float] = {}
        self._links: dict[str, dict[str, dict[str, str]]] = {}
        self._stops: list[str] = []
        self._left: dict[str, tuple[str, str]] = {}
        self._unfinished: dict[tuple[str, str], list[int]] = {}  # (host, step) -> its actions
        self._first_start: float | None = None
        self._places: dict[str, dict[str, str]] = {}
        self._earlier = 0  # self._actions[:n] were done before an interruption
        self._keys: list[tuple[str, str, str]] = []  # each action's (host, step key, action)
        self._open_earlier: dict[tuple[str, str, str], int] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self._started(event)
        elif isinstance(event, PlayStarted):
            self._play = event.name
            self._plays.append(event.name)
            self._hosts.update(dict.fromkeys(event.hosts))
        elif isinstance(event, HostStepStarted):
            self._open[event.host] = _OpenStep(event.step, self._play, event.at)
        elif isinstance(event, CommandRan):
            self._command(event)
        elif isinstance(event, ActionTaken):
            self._action(event)
        elif isinstance(event, HostStepFinished) and not event.retrying:
            self._step_finished(event)
        elif isinstance(event, SafetyStop):
            self._stops.append(event.reason)
        elif isinstance(event, HostLeft):
            self._left[event.host] = (event.kind, event.reason)
        elif isinstance(event, RunFinished):
            self._finished = event

    # -- what the run said, for computing findings ----------------------------------------

    def _started(self, event: RunStarted) -> None:
        """A run starts, or a resumed run starts again: the attempt before it was interrupted;
        its actions stay in the report, the rest is the new attempt's to tell."""
        if self._run is not None:
            self._resumed()
        self._run = event
        if self._first_start is None:
            self._first_start = event.at
        self._places = dict(event.topology) or self._places
        self._hosts.update(dict.fromkeys(event.hosts))

    def _resumed(self) -> None:
        unfinished = {i for indexes in self._unfinished.values() for i in indexes}
        # An action whose step got no verdict: the resumed run settles it (its ActionTaken
        # then updates this record rather than adding a second one).
        self._open_earlier = {self._keys[i]: i for i in unfinished if not self._actions[i].failed}
        self._earlier = len(self._actions)
        self._finished = None
        self._play = ""
        self._plays = []
        self._hosts = {}
        self._open = {}
        self._steps = {}
        self._results = []
        self._planned = {}
        self._busbw = {}
        self._links = {}
        self._left = {}
        self._unfinished = {}

    @property
    def run_result(self) -> RunResult | None:
        """The engine's result from the run's end (None: the run did not finish)."""
        return self._finished.result if self._finished is not None else None

    @property
    def earlier_actions(self) -> tuple[ActionRecord, ...]:
        """The actions done before the run was interrupted (and resumed)."""
        return tuple(self._actions[: self._earlier])

    def journaled_topology(self) -> Topology | None:
        """The topology the run journaled with its start (events.RunStarted.topology)."""
        return from_places(self._places) if self._places else None

    def considered_hosts(self) -> set[str]:
        """Hosts with at least one step that was not skipped."""
        return failed_and_considered(self._results)[1]

    def failed_hosts(self) -> set[str]:
        """Hosts that failed a check, by the same rule the engine holds actions on."""
        return failed_and_considered(self._results)[0]

    def busbw(self) -> dict[str, float]:
        """The last nccl-tests `avg_busbw` (GB/s) each host's steps registered."""
        return dict(self._busbw)

    def findings(self, topology: Topology) -> list[Finding]:
        """Correlated failures, and busbw stragglers among the hosts no correlated failure
        explains (a bad switch's hosts would drag the median; a node that failed its own
        nccl test is exactly the straggler to name, so failing alone does not hide it)."""
        found = correlated_failures(topology, self.failed_hosts(), self.considered_hosts())
        explained = {h for f in found for h in f.members}
        judged = {h: v for h, v in self._busbw.items() if h not in explained}
        found.extend(stragglers(judged, topology.gpu_models()))
        found.extend(intra_node_mismatches(self._links, expected_links(self._links, topology)))
        return found

    # -- the model ------------------------------------------------------------------------

    def model(
        self, topology: Topology | None = None, findings: Iterable[Finding] | None = None
    ) -> Report:
        """The report. Without `findings` they are computed from the run (without a topology
        only stragglers can be: every host then sits in one unknown domain)."""
        hosts = list(self._hosts) + [h for h in self._steps if h not in self._hosts]
        topology = (
            topology or self.journaled_topology() or Topology.from_hosts({h: {} for h in hosts})
        )
        chosen = tuple(findings) if findings is not None else tuple(self.findings(topology))
        stats = self._stats()
        run = self._run
        result = self._finished.result if self._finished else None
        outcome = result.outcome(check_changes_exit=self._check_exit()) if result else None
        return Report(
            run_id=self.run_id or _default_run_id(run),
            playbook=run.playbook if run else "",
            started=self._first_start,
            finished=self._finished.at if self._finished else None,
            check=run.check if run else False,
            outcome=outcome.name.lower() if outcome is not None else "incomplete",
            exit_code=int(outcome) if outcome is not None else None,
            plays=tuple(self._plays),
            hosts=tuple(self._host(h, topology, stats) for h in natural_sorted(hosts)),
            findings=chosen,
            tree=_tree(topology, hosts),
            actions=tuple(self._actions) + self._planned_actions(),
            safety_stops=tuple(self._stops),
            interrupted=bool(result and result.interrupted),
        )

    def _check_exit(self) -> bool:
        return self.detailed_exitcode and bool(self._run and self._run.check)

    def _stats(self) -> Mapping[str, HostStats]:
        """The engine's recap when the run finished (it knows about rescues), else recounted."""
        if self._finished is not None:
            return self._finished.result.stats
        stats: dict[str, HostStats] = {}
        for result in self._results:
            stats.setdefault(result.host, HostStats()).count(result)
        return stats

    def verdict(self, host: str) -> Verdict:
        """The engine's verdict on `host` (journaled with the run's end). A run that never
        finished has none: its hosts read "interrupted", never a status made up from counts."""
        verdicts = self._finished.result.verdicts if self._finished is not None else {}
        found = verdicts.get(host)
        if found is not None:
            return found
        why = "the run did not finish: no verdict was made" if not verdicts else "not judged"
        return Verdict(host, VerdictKind.INTERRUPTED, why)

    def _host(self, name: str, topology: Topology, stats: Mapping[str, HostStats]) -> HostReport:
        recap = stats[name].as_dict() if name in stats else HostStats().as_dict()
        try:
            domains = topology.domains_of(name)
        except KeyError:
            domains = {}
        return HostReport(
            name=name,
            verdict=self.verdict(name),
            recap=recap,
            domains=domains,
            steps=tuple(self._steps.get(name, ())),
            busbw=self._busbw.get(name),
            left=self._left.get(name),
        )

    # -- events ---------------------------------------------------------------------------

    def _command(self, event: CommandRan) -> None:
        result = event.result
        kept = kept_of(event.read_into_facts, self.excerpt_chars)
        record = CommandRecord(
            command=clean(result.command),
            rc=result.rc,
            duration=result.duration,
            timed_out=result.timed_out,
            planned_only=event.planned_only,
            # Cut first, then clean: cleaning 138 KB of XML to keep 4,000 characters of it
            # cost more than the rest of the event (a cut escape is replaced, never shown).
            # Output a probe read into facts keeps what the journal keeps of it: the facts
            # are the evidence, and a report rendered from the journal shows the same.
            stdout=clean(excerpt(result.stdout, kept)),
            stderr=clean(excerpt(result.stderr, self.excerpt_chars)),
            at=event.at,
        )
        self._open_step(event.host, event.step).commands.append(record)
        if event.planned_only:
            self._planned.setdefault((event.host, event.step), []).append(record.command)

    def _action(self, event: ActionTaken) -> None:
        open_step = self._open_step(event.host, event.step)
        ran = [c.command for c in open_step.commands[open_step.attributed :] if not c.planned_only]
        open_step.attributed = len(open_step.commands)
        key = (event.host, event.key or event.step, event.action)
        record = ActionRecord(
            host=event.host,
            step=event.step,
            action=event.action,
            failed=event.failed,
            planned=False,
            commands=tuple(ran),
            at=event.at,
        )
        settled = self._open_earlier.pop(key, None)
        if settled is not None:  # the interrupted attempt's action, settled now: one record
            earlier = self._actions[settled]
            record = replace(record, commands=earlier.commands + record.commands, at=earlier.at)
            self._actions[settled] = record
            index = settled
        else:
            index = len(self._actions)
            self._actions.append(record)
            self._keys.append(key)
        # By step name: a `verify` runs sub-steps of its own between this and the step's end.
        self._unfinished.setdefault((event.host, event.step), []).append(index)

    def _open_step(self, host: str, step: str) -> _OpenStep:
        """The host's running step; one is made up if events arrive without a start."""
        current = self._open.get(host)
        if current is None or current.step != step:
            current = _OpenStep(step, self._play, None)
            self._open[host] = current
        return current

    def _step_finished(self, event: HostStepFinished) -> None:
        result = event.result
        # Only what findings and the recap read: the output and facts are in the step record
        # and the journal, and kept here they would be most of a large run's memory.
        failed = {"failed": True} if result.data.get("failed") else {}
        self._results.append(replace(result, commands=(), data=failed))
        self._hosts.setdefault(result.host, None)
        opened = self._open.pop(result.host, None)
        if opened is None or opened.step != result.step:
            opened = _OpenStep(result.step, self._play, None)
        record = StepRecord(
            host=result.host,
            step=result.step,
            play=opened.play,
            status=result.status.value,
            changed=result.changed,
            message=excerpt(clean(result.message), self.excerpt_chars),
            attempts=result.attempts,
            duration=result.duration,
            started=opened.started,
            finished=event.at,
            commands=tuple(opened.commands),
        )
        self._steps.setdefault(result.host, []).append(record)
        acted = self._unfinished.pop((result.host, result.step), [])
        if VERIFICATION_FAILED in result.message and result.status.value in ("failed", "ignored"):
            self._mark_unverified(acted)
        busbw = registered_busbw(result.data)
        if busbw is not None:
            self._busbw[result.host] = busbw
        links = registered_gpu_links(result.data)
        if links is not None:
            self._links[result.host] = links

    def _mark_unverified(self, indexes: list[int]) -> None:
        """The step's actions ran, then its `verify` failed: the fix did not take."""
        for index in indexes:
            action = self._actions[index]
            if not action.failed:
                self._actions[index] = replace(action, verification_failed=True)

    def _planned_actions(self) -> tuple[ActionRecord, ...]:
        return tuple(
            ActionRecord(host=h, step=s, action=None, failed=False, planned=True, commands=tuple(c))
            for (h, s), c in self._planned.items()
        )


def run_collector(
    run_id: str | None, *, journaled: Iterable[Event] = (), detailed_exitcode: bool = False
) -> ReportCollector:
    """The collector of a run's reports, fed the run's `journaled` events first
    (Journal.events(RUN)): for `fleetfix report RUN` all of them; for a `--resume`, those of
    the attempts before it, so its report keeps what was done before the interruption."""
    collector = ReportCollector(run_id, detailed_exitcode=detailed_exitcode)
    for event in journaled:
        collector(event)
    return collector


def registered_gpu_links(data: Mapping[str, Any]) -> dict[str, dict[str, str]] | None:
    """The GPU-to-GPU part of a registered `topology` probe result (`facts.matrix`)."""
    facts = data.get("facts")
    if not isinstance(facts, Mapping) or not facts.get("complete", True):
        return None
    matrix = facts.get("matrix")
    if not isinstance(matrix, Mapping):
        return None
    gpus = [name for name in matrix if str(name).startswith("GPU")]
    return {a: {b: str(matrix[a].get(b)) for b in gpus if b != a} for a in gpus} or None


def expected_links(
    seen: Mapping[str, Mapping[str, Mapping[str, str]]], topology: Topology
) -> dict[str, Mapping[str, Mapping[str, str]]]:
    """Each host's expected GPU links: what most hosts of its GPU model show (at least two
    agreeing). A node that differs from its peers is the suspect; no config is needed."""
    models = topology.gpu_models()
    by_model: dict[str, list[str]] = {}
    for host in seen:
        by_model.setdefault(models.get(host, ""), []).append(host)
    expected: dict[str, Mapping[str, Mapping[str, str]]] = {}
    for hosts in by_model.values():
        shapes = Counter(json.dumps(seen[h], sort_keys=True) for h in hosts)
        shape, count = shapes.most_common(1)[0]
        if count >= 2 and count * 2 > len(hosts):
            expected.update(dict.fromkeys(hosts, json.loads(shape)))
    return expected


def registered_busbw(data: Mapping[str, Any]) -> float | None:
    """`facts.avg_busbw` of a registered result (or a top-level `avg_busbw`), when numeric."""
    facts = data.get("facts")
    candidates = [facts.get("avg_busbw") if isinstance(facts, Mapping) else None]
    candidates.append(data.get("avg_busbw"))
    for value in candidates:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and isfinite(value):
            return float(value)
    return None


def _tree(topology: Topology, hosts: list[str]) -> tuple[SpineNode, ...]:
    """The topology tree restricted to this run's hosts (others are not drawn)."""
    wanted = set(hosts)
    kept: dict[str, dict[str, list[str]]] = {}
    for spine, leaves in topology.tree().items():
        for leaf, members in leaves.items():
            mine = [h for h in members if h in wanted]
            if mine:
                kept.setdefault(spine, {})[leaf] = mine
    placed = {h for leaves in kept.values() for members in leaves.values() for h in members}
    strays = natural_sorted(wanted - placed)  # hosts the topology does not know
    if strays:
        kept.setdefault(NO_SPINE, {}).setdefault(NO_LEAF, []).extend(strays)
    return tuple(
        SpineNode(spine, tuple(_leaf(topology, leaf, members) for leaf, members in leaves.items()))
        for spine, leaves in kept.items()
    )


def _leaf(topology: Topology, leaf: str, members: list[str]) -> LeafNode:
    uplinks = tuple(topology.uplinks(leaf)) if leaf != NO_LEAF else ()
    return LeafNode(leaf, tuple(members), uplinks)


def _default_run_id(run: RunStarted | None) -> str:
    stamp = run.at if run else time.time()
    return time.strftime("run-%Y%m%d-%H%M%S", time.gmtime(stamp))


__all__ = ["ReportCollector", "registered_busbw", "run_collector"]
