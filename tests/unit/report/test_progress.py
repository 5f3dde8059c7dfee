"""The live view on a terminal, fed a recorded event stream shaped like the demo's run (serial
batches, a busy node parked on its drain, a revisit, bob's node left alone): hosts done never
pass the play's hosts, and the slow host is named with how long it has been on its step."""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Iterator

from rich.console import Console

from fleetfix.errors import SourcePosition
from fleetfix.events import (
    BatchStarted,
    Event,
    HostLeft,
    HostStepFinished,
    HostStepStarted,
    PlayFinished,
    PlayStarted,
    RunFinished,
    RunStarted,
    TaskStarted,
)
from fleetfix.report.console import ConsoleView
from fleetfix.report.progress import PARKED_KEY, LiveProgress
from fleetfix.results import HostStats, RunResult, Status, StepResult
from fleetfix.verdicts import Verdict, VerdictKind

T0 = 1_714_532_400.0
PLAY = "Xid 79 remediation"
HOSTS = tuple(f"gpu{n:03d}" for n in range(1, 17))
BATCHES = (HOSTS[:1], HOSTS[1:6], HOSTS[6:11], HOSTS[11:])
STEPS = ("read the kernel Xid log", "read nvidia-smi", "decide")
DRAIN = "drain in Slurm and wait for jobs to leave"
BUSY, BOB = "gpu005", "gpu014"
PARKED_AT = T0 + 10.0
POS = SourcePosition("playbooks/xid79.yml", 1)


def step_events(host: str, step: str, at: float, **data: object) -> list[Event]:
    result = StepResult(host, step, Status.CHANGED if data else Status.OK, data=data, key=step)
    return [
        HostStepStarted(host=host, step=step, at=at),
        HostStepFinished(result=result, at=at + 0.5),
    ]


def demo_stream() -> Iterator[Event]:
    """Events in the engine's order; gpu005 parks on its drain at T0+10 and is deferred at the
    end; gpu014 is left alone; every task's banner comes once per batch."""
    yield RunStarted(run_id="r1", playbook="playbooks/xid79.yml", hosts=HOSTS, check=False, at=T0)
    yield PlayStarted(name=PLAY, hosts=HOSTS, position=POS, at=T0)
    at = T0
    for index, batch in enumerate(BATCHES, 1):
        yield BatchStarted(index=index, count=len(BATCHES), hosts=batch, at=at)
        for step in STEPS:
            yield TaskStarted(name=step, position=POS, key=step, at=at)
            for host in batch:
                yield from step_events(host, step, at)
            at += 1.0
        if BUSY in batch:
            yield TaskStarted(name=DRAIN, position=POS, key=DRAIN, at=PARKED_AT)
            yield HostStepStarted(host=BUSY, step=DRAIN, at=PARKED_AT)
            parked = StepResult(BUSY, DRAIN, Status.CHANGED, data={PARKED_KEY: {"until": 1.0}})
            yield HostStepFinished(result=parked, at=PARKED_AT + 1)
            at = PARKED_AT + 2
        if BOB in batch:
            yield HostLeft(host=BOB, kind="owned", reason="left alone: owned by bob", at=at)
    yield BatchStarted(index=1, count=1, hosts=(BUSY,), revisit=True, at=at)
    yield HostLeft(host=BUSY, kind="deferred", reason="deferred: job(s) 48213", at=at + 1)
    yield PlayFinished(name=PLAY, at=at + 1)
    yield RunFinished(result=run_result(), at=at + 1)


def run_result() -> RunResult:
    verdicts = {h: Verdict(h, VerdictKind.HEALTHY) for h in HOSTS}
    verdicts[BUSY] = Verdict(BUSY, VerdictKind.DEFERRED, "deferred: job(s) 48213 still running")
    verdicts[BOB] = Verdict(BOB, VerdictKind.LEFT_ALONE, "left alone: owned by bob")
    stats = {h: HostStats(ok=3) for h in HOSTS}
    return RunResult(stats=stats, verdicts=verdicts)


def drawn(view: LiveProgress, now: float) -> str:
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=120, color_system=None).print(view.renderable(now))
    return out.getvalue()


COUNTS = re.compile(r"(\d+)/(\d+) hosts done")


def test_hosts_done_never_pass_the_total_and_reach_it() -> None:
    view = LiveProgress()
    seen = []
    for event in demo_stream():
        view(event)
        done, total = view.counts
        assert 0 <= done <= total
        found = COUNTS.search(drawn(view, event.at))
        assert found is not None
        shown, of = int(found[1]), int(found[2])
        assert shown <= of
        seen.append((shown, of))
    assert seen[-1] == (16, 16)
    assert len({done for done, _ in seen}) > 3  # it moves during the run, not only at the end


def test_the_parked_host_is_named_as_the_slowest_with_its_time() -> None:
    view = LiveProgress()
    for event in demo_stream():
        if isinstance(event, BatchStarted) and event.revisit:
            break
        view(event)
    assert BUSY not in view.done  # parked: its batch is over, its step is not
    now = PARKED_AT + 41
    assert view.slowest(now) == (BUSY, f"{DRAIN}, waiting for its jobs", 41.0)
    text = drawn(view, now)
    assert f"slowest: {BUSY}: {DRAIN}, waiting for its jobs, 41 s" in text
    assert f"{BUSY}  {DRAIN} (parked: waiting for its jobs)  41 s" in text


def test_a_long_step_shows_minutes() -> None:
    view = LiveProgress()
    view(PlayStarted(name=PLAY, hosts=HOSTS[:2], position=POS, at=T0))
    view(HostStepStarted(host="gpu002", step="reboot", at=T0))
    view(HostStepStarted(host="gpu001", step="reboot", at=T0 + 30))
    assert "slowest: gpu002: reboot, 2 min 05 s" in drawn(view, T0 + 125)


def test_many_hosts_at_work_are_capped_and_counted() -> None:
    hosts = tuple(f"n{n:02d}" for n in range(50))
    view = LiveProgress()
    view(PlayStarted(name=PLAY, hosts=hosts, position=POS, at=T0))
    for index, host in enumerate(hosts):
        view(HostStepStarted(host=host, step="nccl", at=T0 + index))
    text = drawn(view, T0 + 100)
    assert "0/50 hosts done · 50 at work" in text
    assert "... and 42 more at work" in text
    assert "slowest: n00: nccl, 1 min 40 s" in text


def feed(view: ConsoleView) -> None:
    for event in demo_stream():
        view(event)


def terminal_view(verbosity: int = 0) -> tuple[ConsoleView, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    ticks = itertools.count()  # the live view's refresh thread reads it too: count is atomic
    return ConsoleView(verbosity=verbosity, console=console, clock=lambda: T0 + next(ticks)), out


def test_on_a_terminal_the_live_view_replaces_the_task_stream() -> None:
    view, out = terminal_view()
    feed(view)
    text = out.getvalue()
    assert "TASK [" not in text and "PLAY RECAP" not in text and "ok: [" not in text
    assert f"[{BOB}] left alone: owned by bob" in text  # said while it runs, above the view
    assert "hosts done" in text  # the view was drawn (each line printed above it redraws it)
    for found in COUNTS.finditer(text):
        assert int(found[1]) <= int(found[2])


def test_on_a_terminal_v_brings_the_stream_back() -> None:
    view, out = terminal_view(verbosity=1)
    feed(view)
    text = out.getvalue()
    assert f"TASK [{STEPS[0]}]" in text and "PLAY RECAP" in text
    assert "hosts done" in text


def test_off_a_terminal_the_stream_is_ansibles_and_the_left_list_reads_the_verdicts() -> None:
    out = io.StringIO()
    view = ConsoleView(out)
    feed(view)
    text = out.getvalue()
    assert f"TASK [{STEPS[0]}]" in text and "ok: [gpu001]" in text
    assert "hosts done" not in text
    _, _, left = text.partition("LEFT UNHEALTHY OR UNTOUCHED")
    assert f"  {BUSY}: deferred: job(s) 48213 still running" in left
    assert f"  {BOB}: left alone: owned by bob" in left
    # the deferral is said once: at the end, not also when the host was left
    assert text.count("job(s) 48213") == 1
