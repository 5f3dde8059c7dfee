"""Judging each host once: the verdict every output reads (fleetfix/verdicts.py).

A host the engine leaves during the run (deferred, owned, refused, leased) is judged when it
is left (`left`); every other host at the end of the run (`judge_rest`), from what the engine
itself saw: its recap, the actions done on it, its last probe facts (the fault still showing,
Slurm's view of it) and the holds. Nothing here reads a report or an event stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.health import current_problems, out_of_service
from fleetfix.engine.remediate import HOLD_KEY
from fleetfix.events import HostLeft
from fleetfix.knowledge.remedy import is_rma_reason
from fleetfix.verdicts import LeftKind, Verdict, VerdictKind

EVIDENCE_CHARS = 300
"""Each evidence line is cut to this: a verdict says why, the journal keeps the detail."""

LEFT_VERDICTS: Mapping[LeftKind, tuple[VerdictKind, str]] = {
    LeftKind.OWNED: (
        VerdictKind.LEFT_ALONE,
        "ask the owner named above; fleetfix leaves the node until they resume it",
    ),
    LeftKind.DEFERRED: (
        VerdictKind.DEFERRED,
        "run the playbook again for it once its jobs end (the retry file lists it)",
    ),
    LeftKind.REFUSED: (
        VerdictKind.NEEDS_HUMAN,
        "fix what the refusal names (or act by hand), then run the playbook again for it",
    ),
    LeftKind.LEASED: (
        VerdictKind.LEFT_OUT,
        "wait for that run to end (fleetfix history), then run the playbook again for it",
    ),
}
NEXT_STEPS: Mapping[VerdictKind, str] = {
    VerdictKind.UNREACHABLE: "check it from its BMC console (power, network, sshd), then run"
    " the playbook again for it",
    VerdictKind.NEEDS_RMA: "open an RMA ticket with the evidence (fleetfix report RUN, or the"
    " webhook's RMA message); after NVIDIA's field diagnostic, resume or replace the node",
    VerdictKind.NEEDS_HUMAN: "do what the reason names by hand; the node stays drained until then",
    VerdictKind.HELD: "look at the suspect domain or the full cap first; then run the playbook"
    " again for it",
    VerdictKind.UNHEALTHY: "run playbooks/recover.yml for it (or drain it by hand): it is in"
    " service with a fault",
    VerdictKind.FAILED: "read the failed step's output (fleetfix report RUN) and run the"
    " playbook again for it",
}


def left(ctx: RunContext, host: str, kind: LeftKind, reason: str) -> None:
    """The engine leaves `host` here: its verdict now, and every consumer told (HostLeft)."""
    verdict_kind, next_step = LEFT_VERDICTS.get(kind, (VerdictKind.FAILED, ""))
    if kind is LeftKind.UNHEALTHY:
        judged = _judge(ctx, host, reason)
    else:
        said = reason.removeprefix(f"{verdict_kind.label}: ")  # "deferred: deferred: ..."
        judged = _verdict(ctx, host, verdict_kind, said, next_step=next_step)
    ctx.result.verdicts[host] = judged
    ctx.bus.emit(HostLeft(host=host, kind=kind, reason=reason))


def judge_rest(ctx: RunContext, hosts: Iterable[str]) -> None:
    """A verdict for every host of the run not judged yet (those left judged themselves)."""
    for host in hosts:
        if host not in ctx.result.verdicts:
            ctx.result.verdicts[host] = _judge(ctx, host, None)


def _judge(ctx: RunContext, host: str, unhealthy: str | None) -> Verdict:
    if ctx.result.interrupted:
        return _verdict(
            ctx,
            host,
            VerdictKind.INTERRUPTED,
            "the run was interrupted before it was done with this host",
            next_step=f"resume the run: fleetfix run ... --resume {ctx.options.run_id}",
        )
    state = ctx.hosts.get(host)
    stats = ctx.result.stats.get(host)
    if state is None or stats is None or not _ran(stats.as_dict()):
        return _verdict(ctx, host, VerdictKind.NOT_RUN, "no step ran on it")
    failed = bool(_failures(ctx, state) or unhealthy)
    return _judge_failure(ctx, state, failed) or _judge_standing(ctx, state)


def _failures(ctx: RunContext, state: HostState) -> int:
    """The host's failed steps, less those a `meta: clear_host_errors` cleared (as Ansible's
    exit code forgets them)."""
    return ctx.result.stats[state.name].failed - state.cleared_failures


def _judge_failure(ctx: RunContext, state: HostState, failed: bool) -> Verdict | None:
    """Unreachable, needs RMA (drained for it by fleetfix), held, needs a human (drained by
    fleetfix saying what it needs), failed; None when none of them."""
    host, stats = state.name, ctx.result.stats[state.name]
    failure = state.last_trouble
    if stats.unreachable:
        return _verdict(ctx, host, VerdictKind.UNREACHABLE, failure or "could not be reached")
    drained_by_us = _drained_by_this_run(ctx, state)
    if drained_by_us is not None and is_rma_reason(drained_by_us):
        return _verdict(ctx, host, VerdictKind.NEEDS_RMA, drained_by_us, (failure,))
    held = _held(ctx, state)
    if held is not None and failed:
        return _verdict(ctx, host, VerdictKind.HELD, held, (failure,))
    if _failures(ctx, state) and drained_by_us is not None:
        return _verdict(ctx, host, VerdictKind.NEEDS_HUMAN, drained_by_us, (failure,))
    if _failures(ctx, state):
        return _verdict(ctx, host, VerdictKind.FAILED, failure or "a step failed")
    return None


def _judge_standing(ctx: RunContext, state: HostState) -> Verdict:
    """No step failed: unhealthy (a fault showing, in service), drained, or how the run
    left a good node (fixed, changed, healthy)."""
    host, slurm = state.name, state.probe_data.get("slurm_node")
    problems = current_problems(ctx, state, planned=ctx.options.check)
    if problems and not out_of_service(slurm):
        return _verdict(ctx, host, VerdictKind.UNHEALTHY, "; ".join(problems), tuple(problems))
    if out_of_service(slurm):  # someone's drain, a past run's RMA drain, down: its reason says
        why = str((slurm or {}).get("reason") or "out of service in Slurm")
        return _verdict(ctx, host, VerdictKind.DRAINED, why, tuple(problems))
    if ctx.options.check and state.changed_node:
        now = current_problems(ctx, state, planned=False)
        shows = f"; it shows now: {'; '.join(now)}" if now else ""
        return _verdict(ctx, host, VerdictKind.CHANGED, f"check mode: would change it{shows}")
    repairs = _repairs(ctx, state)
    if repairs:
        return _verdict(ctx, host, VerdictKind.FIXED, "repaired by " + ", ".join(repairs))
    if state.changed_node:
        return _verdict(ctx, host, VerdictKind.CHANGED, "changed, no fault found")
    return _verdict(ctx, host, VerdictKind.HEALTHY, _healthy_why(state))


def _verdict(
    ctx: RunContext,
    host: str,
    kind: VerdictKind,
    reason: str,
    evidence: tuple[str, ...] = (),
    *,
    next_step: str | None = None,
) -> Verdict:
    state = ctx.hosts.get(host)
    judged = Verdict(
        host=host,
        kind=kind,
        reason=_cut(reason),
        evidence=tuple(_cut(e) for e in evidence if e and e != reason),
        next_step=NEXT_STEPS.get(kind, "") if next_step is None else next_step,
        actions=tuple(state.actions_done) if state is not None else (),
    )
    # Its reason quotes step messages as they were, before any sink masked them: a secret (or
    # a value made from one) is masked here, once, for every output that reads the verdict.
    return ctx.bus.redactor.redact(judged)


def _ran(recap: Mapping[str, int]) -> bool:
    return any(count for name, count in recap.items() if name != "skipped")


def _repairs(ctx: RunContext, state: HostState) -> list[str]:
    """The actions done that change the node's health (not a drain, resume or evidence)."""
    actions = [ctx.actions.get(name) for name in state.actions_done if name in ctx.actions]
    return list(dict.fromkeys(a.name for a in actions if a.repairs and a.changes_state))


def _held(ctx: RunContext, state: HostState) -> str | None:
    """Why this host's fix was held: its last failure was a hold (caps, budget, a suspect
    domain), or a finding holds its domain."""
    if state.last_failure is not None:
        hold = state.last_failure[1].data.get(HOLD_KEY)
        if isinstance(hold, str):
            return hold
    if state.name in ctx.safety.held:
        return f"held: {ctx.safety.why_held(state.name)}"
    return None


def _fleetfix_reason(slurm: Mapping[str, Any] | None) -> str | None:
    """The Slurm reason of a node fleetfix has drained (or down) with its own reason."""
    if not slurm or not slurm.get("reason_is_fleetfix"):
        return None
    if not any(slurm.get(k) for k in ("drained", "draining", "down")):
        return None
    return str(slurm.get("reason") or "")


def _drained_by_this_run(ctx: RunContext, state: HostState) -> str | None:
    """The Slurm reason of a node this run drained (an earlier run's RMA drain is that run's
    verdict: here the node is `drained`, which does not fail a sweep every night)."""
    slurm = state.probe_data.get("slurm_node")
    reason = _fleetfix_reason(slurm)
    if reason is None:
        return None
    ours = (slurm or {}).get("fleetfix_run") == ctx.options.run_id
    return reason if ours or "slurm_drain" in state.actions_done else None


def _healthy_why(state: HostState) -> str:
    read = sorted(state.probe_data)
    return "no fault found by " + ", ".join(read) if read else "every step ok"


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 3] + "..."


__all__ = ["judge_rest", "left"]
