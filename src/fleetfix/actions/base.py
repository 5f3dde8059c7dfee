"""The action contract: facts + params in, a command plan out; the engine executes the plan."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class PlannedCommand:
    """One command an action wants run, with why, and how the engine should treat it."""

    command: str
    why: str
    timeout: float | None = None
    expect_unreachable: bool = False  # e.g. reboot: the connection drops, a new boot id follows
    ignore_rc: bool = False
    always: bool = False  # run even after an earlier command failed (restart what was stopped)
    defer_rc: int | None = None
    """This exit status means "not now" (e.g. jobs still running after a bounded wait): the
    host is deferred to the next run, its last output line saying why; not a failure."""
    park_for: float | None = None
    """With `defer_rc`: how much longer the wait may go on. The engine parks the host (its
    batch and the next ones go on), looks again with the action's `verify` probes and `check`
    until then, and runs its play again once the check passes; else it defers the host."""
    wait: float | None = None
    """With `park_for`: the whole wait the command stands for (its own look plus park_for), as
    the deferral tells it; the command's measured time is up to a second off (it counts
    whole seconds), and "after 59s" for a 60 s wait would be wrong."""
    on_controller: bool = False
    """Runs on the controller, not on the node (a BMC power cycle: the node's OS is what is in
    doubt); with expect_unreachable the engine still waits for the node's new boot id."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment for an `on_controller` command: secrets go here, never into the command
    line, which is printed and journaled."""


@dataclass(frozen=True, slots=True)
class ActionPlan:
    """What an action will do on one host. No commands and no refusal means nothing to do."""

    commands: tuple[PlannedCommand, ...] = ()
    refused: str | None = None  # a gate said no: the step fails, nothing runs
    notes: tuple[str, ...] = ()
    failure: str | None = None
    """The commands run (they record why, e.g. a drain reason), then the step fails with this."""
    before: Mapping[str, str] = field(default_factory=dict)
    """What the node had that the plan takes away and puts back (services it stops, modules it
    unloads), journaled with the intent: a resumed run that repeats the action after a crash
    in the middle restores these too, although they are gone by then."""

    @property
    def noop(self) -> bool:
        return not self.commands and self.refused is None and self.failure is None


@dataclass(frozen=True, slots=True)
class ActionContext:
    """What an action may look at: its params, the host's vars and fresh probe facts."""

    host: str
    params: Mapping[str, Any]
    facts: Mapping[str, Any]  # probe name -> parsed facts (typed dataclasses)
    vars: Mapping[str, Any]
    plan: ActionPlan | None = None  # for `check`: what the action set out to do
    interrupted: Mapping[str, str] = field(default_factory=dict)
    """The `before` an interrupted run journaled for this action here (see ActionPlan)."""


class Settle(enum.StrEnum):
    VERIFY = "verify"
    RERUN = "rerun"


@dataclass(frozen=True, slots=True)
class Action:
    """A mutating GPU-ops action. `requires` (and `optional`) probes run first and feed
    `plan`; `verify` probes run after and feed `check` (None = verified)."""

    name: str
    summary: str
    plan: Callable[[ActionContext], ActionPlan]
    params: Mapping[str, str] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    """Probes whose facts gates use when the node has the tool (e.g. slurm_node); None if not."""
    verify: tuple[str, ...] = ()
    check: Callable[[ActionContext], str | None] | None = None
    changes_state: bool = True
    """False for actions that only measure (nccl-tests): they never report "changed"."""
    disruptive: bool = False
    """Takes the node (or its GPUs) out of service: counts against topology caps and holds."""
    returns_to_service: bool = False
    """Puts the node back in service (slurm_resume): like a disruptive action, it is only
    done under this run's lease on the node, never on one another run is working on."""
    repeatable: bool = False
    """Running it again after an interrupted run started it does no harm (its plan reads the
    node's current state, e.g. a drain). Others are re-verified, never repeated."""
    settle: Callable[[Mapping[str, Any]], Settle] | None = None
    """How an attempt an interrupted run started is settled, from the action's params (the
    engine does it: engine/interrupted.py). None or VERIFY: judged by evidence, the boot id a
    reboot journaled, else the `verify` probes and `check`; RERUN: every change these params
    ask for can be made twice with no harm (start, stop, enable, mask), so the attempt simply
    runs again, as a new one (the interrupted intent no longer counts)."""
    validate: Callable[[Mapping[str, Any]], str | None] | None = None
    """Checks literal params before anything runs; None when fine, else what is wrong."""
    result_probe: str | None = None
    """Parse the last command's output with this probe; `check` then sees its facts."""
    repairs: bool = True
    """Changes the node's health when it changes anything (a reboot, a reset, a cleanup);
    False for taking the node out of service and back (drain, resume, reservations): a node
    reserved for a test and released is not a changed node (its verdict: fleetfix/verdicts.py)."""
    active_test: bool = False
    """Loads the GPUs or fabric (nccl-tests, dcgmi diag -r 2+): the engine runs it only on a
    node out of scheduling, drained or in a fleetfix reservation (engine/gates.py)."""


def remembered(ctx: ActionContext, key: str) -> list[str]:
    """A list an interrupted attempt journaled in its plan's `before` (comma-separated)."""
    return _listed(ctx.interrupted.get(key, ""))


def planned_before(ctx: ActionContext, key: str) -> list[str]:
    """A list this attempt's plan recorded in its `before` (what the node had before it)."""
    return _listed(ctx.plan.before.get(key, "") if ctx.plan is not None else "")


def _listed(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def union(first: Iterable[str], *more: Iterable[str]) -> list[str]:
    """Items of every iterable, each once, in first-seen order."""
    return list(dict.fromkeys(item for items in (first, *more) for item in items))
