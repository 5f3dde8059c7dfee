"""The run observer behind `--webhook`: hears every event, decides which ones a team is told
about, and delivers them in the background on the run's event loop.

`__call__` runs for every event of a 10,000-host run, so it only looks at an event's type,
keeps references and queues; bodies are rendered and sent by one task per webhook, in order.
`finish()` gives what is still queued FINISH_WITHIN seconds in all, the last RESERVED of them
kept for `run_finished`: what came before it stops trying when its share is over, so a slow
receiver cannot crowd the run's end out. Then it gives up, with a warning that says what is
known of each notification left: not sent, not delivered, or not confirmed (a request went
out and no answer came: it may have been received). Nothing here raises into the run or
changes its exit code.

A run that loses its journal stops without a RunFinished (the engine's result is lost with
the exception); `journal_lost()` then queues its `run_finished` from what was heard: each
host's verdicts, the hosts left, the holds and the safety stop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

from fleetfix.events import (
    ActionStarted,
    ActionTaken,
    BatchStarted,
    CommandRan,
    Event,
    FindingRaised,
    HostLeft,
    HostStepFinished,
    PlayFinished,
    RunFinished,
    RunStarted,
    SafetyStop,
)
from fleetfix.notify.evidence import EvidenceTracker
from fleetfix.notify.kinds import Kind
from fleetfix.notify.model import (
    LIST_LIMIT,
    Body,
    BudgetRefused,
    Hold,
    HostCounts,
    LeftHost,
    Notification,
    RunEnd,
    RunInfo,
)
from fleetfix.notify.render import render
from fleetfix.notify.webhook import DeliveryFailed, DeliveryPolicy, Sending, Webhook, deliver
from fleetfix.results import HostStats, Outcome, RunResult
from fleetfix.verdicts import VerdictKind

FINISH_WITHIN = 15.0
"""Seconds `finish()` waits, in all, for what is still queued when the run ends."""
RESERVED = 5.0
"""Of FINISH_WITHIN, the seconds kept for `run_finished` (one request's timeout): what is
queued before it stops trying in time to leave them (at most half of the wait)."""
GRACE = 0.5
"""finish() cancels a delivery still running this long after its deadline (a hung TLS close)."""
HOLD_KEY = "fleetfix_hold"
"""engine/remediate.py's HOLD_KEY: a held action's registered result says why (a test keeps
them equal; the engine is not imported here, as the report does not import it)."""
BUDGET_MARK = "repair budget reached"

Warn = Callable[[str], None]


class _Outbox:
    """One webhook's queue and the task that empties it."""

    def __init__(self, webhook: Webhook) -> None:
        self.webhook = webhook
        self.queue: deque[Notification] = deque()
        self.task: asyncio.Task[None] | None = None
        self.sending: Sending | None = None
        """The delivery of the queue's first notification, while it goes on."""


class Notifier:
    """A RunObserver that tells webhooks about RMAs, holds, budget refusals and the run's end."""

    def __init__(
        self,
        webhooks: Sequence[Webhook],
        kinds: frozenset[Kind],
        *,
        controller: str,
        warn: Warn,
        detailed_exitcode: bool = False,
        policy: DeliveryPolicy | None = None,
        finish_within: float = FINISH_WITHIN,
    ) -> None:
        self._outboxes = [_Outbox(w) for w in webhooks]
        self._kinds = kinds
        self._controller = controller
        self._warn = warn
        self._detailed_exitcode = detailed_exitcode
        self._policy = policy or DeliveryPolicy()
        self._finish_within = finish_within
        self._run = RunInfo(run_id="", playbook="", controller=controller, check=False)
        self._started: float | None = None
        self._sequence = 0
        self._ends_at: float | None = None
        """The end of finish()'s wait (the loop's clock), once the run ended."""
        self._evidence = EvidenceTracker()
        self._rma_pending: dict[str, tuple[str, float]] = {}
        self._rma_sent: set[str] = set()
        self._refused: dict[str, str] = {}
        self._refused_at = 0.0
        self._failed_inside = False
        self._heard = RunResult()
        """What the run's events said so far (stats, left, holds, safety stop): its end when
        no RunFinished comes (journal_lost)."""
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            RunStarted: self._run_started,
            HostStepFinished: self._step_finished,
            FindingRaised: self._finding,
            SafetyStop: self._safety_stop,
            HostLeft: self._host_left,
            BatchStarted: self._between_batches,
            PlayFinished: self._between_batches,
            RunFinished: self._run_finished,
        }
        if Kind.RMA in kinds:
            self._handlers[ActionStarted] = self._evidence.action_started
            self._handlers[ActionTaken] = self._evidence.action_taken
            self._handlers[CommandRan] = self._evidence.command_ran

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is None:
            return
        try:
            handler(event)
        except Exception as exc:  # a notification bug must never stop a run
            self._inside(exc)

    async def finish(self) -> None:
        """Deliver what is queued, FINISH_WITHIN seconds in all (the last RESERVED of them for
        run_finished); never raises."""
        try:
            self._flush(time.time())
            self._ends_at = asyncio.get_running_loop().time() + self._finish_within
            for outbox in self._outboxes:
                self._start(outbox)
            running = [o.task for o in self._outboxes if o.task is not None and not o.task.done()]
            if running:
                await asyncio.wait(running, timeout=self._finish_within + GRACE)
        except Exception as exc:
            self._inside(exc)
        finally:
            await self._abandon_the_rest()

    def journal_lost(self, reason: str) -> None:
        """The run stopped because its journal failed (exit 6) and no RunFinished will come:
        queue its `run_finished` from what the events said until then; never raises."""
        try:
            at = time.time()
            self._flush(at)
            result = self._heard
            end = self._run_end(result, at, Outcome.SAFETY_ABORT)
            self._queue(Kind.RUN_FINISHED, at, dataclasses.replace(end, journal_lost=reason))
        except Exception as exc:
            self._inside(exc)

    # --- deciding --------------------------------------------------------------------------

    def _run_started(self, event: RunStarted) -> None:
        self._run = RunInfo(event.run_id, event.playbook, self._controller, event.check)
        self._started = event.at

    def _step_finished(self, event: HostStepFinished) -> None:
        if event.retrying:
            return
        result = event.result
        stats = self._heard.stats.get(result.host)
        if stats is None:
            stats = self._heard.stats[result.host] = HostStats()
        stats.count(result)
        if Kind.RMA in self._kinds:
            reason = self._evidence.step_finished(result)
            if reason is not None and result.host not in self._rma_sent:
                self._rma_pending[result.host] = (reason, event.at)
        held = result.data.get(HOLD_KEY)
        if isinstance(held, str):
            self._heard.holds.append(held)
        if Kind.BUDGET_REFUSED in self._kinds and isinstance(held, str) and BUDGET_MARK in held:
            self._refused.setdefault(result.host, held[held.index(BUDGET_MARK) :])
            self._refused_at = event.at

    def _finding(self, event: FindingRaised) -> None:
        if event.hold:
            hosts = tuple(event.hosts)
            shown = hosts[:LIST_LIMIT]
            body = Hold("finding", event.message, event.kind, event.domain, shown, len(hosts))
            self._queue(Kind.HOLD, event.at, body)

    def _safety_stop(self, event: SafetyStop) -> None:
        self._heard.aborted_by_safety = event.reason
        self._queue(Kind.HOLD, event.at, Hold("safety_stop", event.reason))

    def _host_left(self, event: HostLeft) -> None:
        self._heard.left[event.host] = event.reason

    def _between_batches(self, event: Event) -> None:
        """A batch ended: its hosts' tickets are complete (evidence kept, all tried)."""
        self._flush(event.at)

    def _run_finished(self, event: RunFinished) -> None:
        self._flush(event.at)
        check_changes = self._run.check and self._detailed_exitcode
        outcome = event.result.outcome(check_changes_exit=check_changes)
        self._queue(Kind.RUN_FINISHED, event.at, self._run_end(event.result, event.at, outcome))

    def _flush(self, at: float) -> None:
        for host, (reason, _) in sorted(self._rma_pending.items(), key=lambda i: i[1][1]):
            self._rma_sent.add(host)
            self._queue(Kind.RMA, at, self._evidence.rma(host, reason))
        self._rma_pending.clear()
        if self._refused:
            hosts = tuple(self._refused)
            reason = next(iter(self._refused.values()))
            body = BudgetRefused(reason, hosts[:LIST_LIMIT], len(hosts))
            self._queue(Kind.BUDGET_REFUSED, self._refused_at, body)
            self._refused.clear()

    def _run_end(self, result: RunResult, at: float, outcome: Outcome) -> RunEnd:
        failing = sorted((v for v in result.verdicts.values() if v.failing), key=lambda v: v.host)
        left = tuple(LeftHost(v.host, v.reason, v.kind.value) for v in failing)
        if not result.verdicts:  # a run that lost its journal stops before any verdict
            left = tuple(LeftHost(h, why) for h, why in sorted(result.left.items()))
        verdicts = Counter(v.kind.value for v in result.verdicts.values())
        return RunEnd(
            outcome=outcome.name.lower(),
            exit_code=int(outcome),
            duration_s=round(at - self._started, 3) if self._started else None,
            host_counts=host_counts(result),
            left=left[:LIST_LIMIT],
            left_total=len(left),
            verdicts=dict(sorted(verdicts.items())),
            holds=len(result.holds),
            interrupted=result.interrupted,
            safety_stop=result.aborted_by_safety,
        )

    # --- delivering ------------------------------------------------------------------------

    def _queue(self, kind: Kind, at: float, body: Body) -> None:
        if kind not in self._kinds:
            return
        self._sequence += 1
        session = int(self._started * 1000) if self._started else 0
        key = f"{self._run.run_id}:{session}:{self._sequence}"
        note = Notification(kind, at, self._run, body, key)
        for outbox in self._outboxes:
            outbox.queue.append(note)
            self._start(outbox)

    def _start(self, outbox: _Outbox) -> None:
        if not outbox.queue or (outbox.task is not None and not outbox.task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (fleetfix as a library, sync): finish() sends it
            return
        outbox.task = loop.create_task(self._drain(outbox))

    async def _drain(self, outbox: _Outbox) -> None:
        while outbox.queue:
            note = outbox.queue[0]
            outbox.sending = Sending(note.key)
            body = render(note, outbox.webhook.form)
            try:
                await deliver(
                    outbox.webhook,
                    body,
                    self._policy,
                    outbox.sending,
                    functools.partial(self._deadline, outbox, note),
                )
            except DeliveryFailed as exc:
                self._warn(f"webhook {outbox.webhook.where}: {_what(note)} {exc.verdict}")
            except Exception as exc:
                self._inside(exc)
            outbox.sending = None
            outbox.queue.popleft()

    def _deadline(self, outbox: _Outbox, note: Notification) -> float | None:
        """None while the run goes on; at its end, finish()'s, less RESERVED for a note with
        a run_finished queued behind it."""
        if self._ends_at is None:
            return None
        behind = note is not outbox.queue[-1] and outbox.queue[-1].kind is Kind.RUN_FINISHED
        reserved = min(RESERVED, self._policy.timeout, self._finish_within / 2)
        return self._ends_at - reserved if behind else self._ends_at

    async def _abandon_the_rest(self) -> None:
        for outbox in self._outboxes:
            sending = outbox.sending
            if outbox.task is not None and not outbox.task.done():
                outbox.task.cancel()
                await asyncio.wait([outbox.task])
            if not outbox.queue:
                continue
            where = f"webhook {outbox.webhook.where}"
            if sending is not None and sending.unanswered:
                self._warn(
                    f"{where}: {_what(outbox.queue.popleft())} not confirmed (no answer before"
                    " the run's end; may have been received)"
                )
            if outbox.queue:
                kinds = ", ".join(sorted({str(n.kind) for n in outbox.queue}))
                self._warn(
                    f"{where}: {len(outbox.queue)} notification(s) ({kinds}) not sent: no time"
                    f" left within {self._finish_within:g}s of the run's end"
                )
            outbox.queue.clear()

    def _inside(self, exc: Exception) -> None:
        if not self._failed_inside:
            self._failed_inside = True
            self._warn(
                f"notifications: internal error ({type(exc).__name__}: {exc}); some may be missing"
            )


def _what(note: Notification) -> str:
    node = getattr(note.body, "node", None)
    return f"{note.kind} notification" + (f" for {node}" if node else "")


def host_counts(result: RunResult) -> HostCounts:
    """Hosts in the four buckets of schema v1, read from the engine's verdicts: unreachable;
    failed (every other verdict that fails the run); changed (fixed or changed); ok (the
    rest). Without verdicts (the run lost its journal first), from the recap."""
    if result.verdicts:
        worst = [_bucket(v.kind) for v in result.verdicts.values()]
    else:
        worst = [_worst(stats) for stats in result.stats.values()]
    return HostCounts(
        total=len(worst),
        ok=worst.count("ok"),
        changed=worst.count("changed"),
        failed=worst.count("failed"),
        unreachable=worst.count("unreachable"),
    )


def _bucket(kind: VerdictKind) -> str:
    if kind is VerdictKind.UNREACHABLE:
        return "unreachable"
    if kind.failing:
        return "failed"
    return "changed" if kind in (VerdictKind.FIXED, VerdictKind.CHANGED) else "ok"


def _worst(stats: HostStats) -> str:
    if stats.unreachable:
        return "unreachable"
    if stats.failed:
        return "failed"
    return "changed" if stats.changed else "ok"
