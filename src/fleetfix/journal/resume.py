"""Reading an interrupted run back for `--resume`: may it resume, and what did it already do."""

from __future__ import annotations

import json

from fleetfix.journal.db import Database
from fleetfix.journal.rows import STEPS_QUERY, step_data
from fleetfix.results import JournaledStep, OpenIntent, Outcome, ResumeState, Status


def resume_state(db: Database, run_id: str) -> ResumeState:
    """The last verdict of every host-step the run finished, and the actions it started in a
    step that got no verdict after them: the controller died between intent and verdict (the
    commands may or may not have run, verification may not have finished)."""
    steps: dict[tuple[str, str], JournaledStep] = {}
    finished_at: dict[tuple[str, str], float] = {}
    for row in db.execute(STEPS_QUERY, (run_id,)):
        host, _step, key, status, changed, message, _attempts, _duration, data, at = row[:10]
        registered = step_data(data, *row[10:])
        steps[(host, key)] = JournaledStep(Status(status), bool(changed), message, registered)
        finished_at[(host, key)] = float(at)
    intents: dict[tuple[str, str, str], OpenIntent] = {}
    for record, host, key, action, at, evidence in db.execute(
        "SELECT id, host, step_key, action, at, evidence FROM actions"
        " WHERE run_id=? AND state!='undelivered' ORDER BY id",
        (run_id,),
    ):
        if finished_at.get((host, key), -1.0) < float(at):
            intents[(host, key, action)] = OpenIntent(
                action, float(at), json.loads(evidence), int(record)
            )
    return ResumeState(run_id=run_id, steps=steps, intents=intents)


def why_not_resumable(
    finished: float | None, outcome: int | None, live_holder: str | None
) -> str | None:
    """A run may be resumed only when it was interrupted (Ctrl-C, a signal, kill -9) and no
    controller still runs it; resuming a finished or live run would act twice."""
    if live_holder is not None:
        return f"it is still running ({live_holder}); wait for it or stop it first"
    if finished is not None and outcome != Outcome.INTERRUPTED:
        return f"it finished (exit {outcome}); start a new run instead"
    return None
