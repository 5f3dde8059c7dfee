"""The detect phase counts a host's own work, not the time it queued behind other hosts: with
one fork, four hosts each probe for a while before their first action, and each host's detect
time is its own probing, not the sum of everyone's (issue 19)."""

from __future__ import annotations

from fleetfix.actions.base import Action, ActionPlan, PlannedCommand
from fleetfix.events import ActionStarted, Event, HostStepFinished, HostStepStarted
from fleetfix.metrics.exposition import render
from fleetfix.metrics.phases import PhaseClock
from fleetfix.metrics.run import RunMetrics
from fleetfix.transport.fake import FakeTransport, Reply
from tests.unit.engine.conftest import Runner, fake, run_playbook
from tests.unit.metrics.promtext import parse, value

__all__ = ["fake", "run_playbook"]  # the engine's fixtures, used here

PROBE_SECONDS = 0.2
HOSTS = ["gpu001", "gpu002", "gpu003", "gpu004"]
PLAYBOOK = f"""
- hosts: gpu
  tasks:
    - name: read the node
      shell: slow_read
      timeout: {PROBE_SECONDS}
      ignore_errors: true
    - name: fix it
      action: poke
"""
POKE = Action(
    name="poke",
    summary="a harmless fixing action",
    plan=lambda _ctx: ActionPlan(commands=(PlannedCommand("poke", "poke it"),)),
)


def detect_times(events: list[Event]) -> list[float]:
    """Each host's detect time, fed to a PhaseClock as RunMetrics feeds it."""
    found: list[float] = []
    clock = PhaseClock(lambda phase, s: found.append(s) if phase == "detect" else None, print)
    for event in events:
        if isinstance(event, HostStepStarted):
            clock.step_started(event.host, event.at)
        elif isinstance(event, ActionStarted):
            clock.action_started(event.host, event.key, event.action, event.at)
        elif isinstance(event, HostStepFinished) and not event.retrying:
            result = event.result
            clock.step_finished(result.host, result.key, True, event.at)
    return found


async def test_detect_is_each_hosts_own_work_with_one_fork(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    for host in HOSTS:
        fake.host(host).on("slow_read", Reply(hang=True))  # runs until the step's timeout
    metrics = RunMetrics("detect.yml")
    inventory = "[gpu]\n" + "".join(f"{h} fleetfix_slurm=false\n" for h in HOSTS)
    run = await run_playbook(
        PLAYBOOK, inventory=inventory, actions=(POKE,), subscribe=metrics, forks=1
    )
    families = parse(render(metrics.families(0.0, None)))
    assert value(families, "fleetfix_repair_phase_seconds_count", phase="detect") == len(HOSTS)
    total = value(families, "fleetfix_repair_phase_seconds_sum", phase="detect")
    # Queued behind the others (one fork, step by step) the first host would count 4 probes,
    # the second 3, ...: ~10 probes in all. Its own work is one probe each: ~4.
    assert len(HOSTS) * PROBE_SECONDS * 0.9 <= total < len(HOSTS) * PROBE_SECONDS * 1.75, total
    each = detect_times(run.events)
    assert len(each) == len(HOSTS)
    assert all(PROBE_SECONDS * 0.9 <= s < PROBE_SECONDS * 1.75 for s in each), each
    # and the run really did queue: the last host's probe started after three others' ended
    starts = [e.at for e in run.events if isinstance(e, HostStepStarted)]
    assert starts[3] - starts[0] >= 3 * PROBE_SECONDS * 0.9
