"""`--resume` after a crash or a Ctrl-C ends where a clean run ends, whatever the instant.

Property-style, for every shipped playbook: xid79.yml on the xid79 lab, ecc.yml and
driver-reload.yml on the `protected` lab (each has an unprotected node to fix and busy,
human-drained and Slurm-unreadable nodes to leave alone), recover.yml on the `boards` lab
(resets per board, reboots, IMEX, drains for field diagnostics); drain.yml, shm.yml,
persistence.yml, resume.yml, nccl-health.yml and health-sweep.yml on small scenarios in
tests/e2e/scenarios/ (the `protected` lab's hygiene faults on busy, human-drained and
Slurm-unreadable nodes; fleetfix's drains and a human's; a slow NCCL node among healthy ones, a
busy one and a human's; the sweep's hygiene faults, two nodes a batch). A node with slow SSH
keeps the short runs going past the last intent of the others, so a stop there is mid-run.
The nccl and sweep labs end healthy, so their clean runs exit 0. A clean reference
run first; then, for each kill point, a fresh lab and journal, `fleetfix run` stopped by a
signal the moment the journal holds a given event (the controller stops itself there,
fleetfix.journal.failpoint, so a stop after the last banner is not lost to a run that
already finished), and `--resume RUN_ID`. The outcome must be
the reference's: every node's boot count, faults and Slurm record, the set of (host, action)
the journal says were carried out, one delivered reboot per rebooted node, and an intent in the
journal for every disruptive call the lab saw. A second --resume of the finished run is refused
(exit 5) and changes nothing; a --resume while the first controller lives is refused (exit 6)
and changes nothing.

Kill points: every step of each playbook (every place a TASK banner can be printed: blocks,
rescues and meta steps included), at the first batch in the reference run where the step did
something on a host (else its first banner); steps the lab never reaches are listed per
playbook and checked to stay unreached. Then the intent of each disruptive action, the moment
after a reboot was sent, and SIGINT/SIGTERM at intents and verification.

The cases are independent (one lab and one journal each), so they run four at a time in
threads as soon as the module starts; each waits for its playbook's reference run. A lab's
reboot takes 0.3 s.
"""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleetfix.cli.loading import builtin_catalog
from fleetfix.playbook.loader import load_playbook
from fleetfix.playbook.model import Step, StepKind
from tests.e2e.labrun import (
    PLAYBOOKS,
    Run,
    fault_kinds,
    fleetfix_run,
    nodes,
    run_argv,
    write_inventory,
)
from tests.e2e.safety_support import (
    ActionRow,
    StopAt,
    action_rows,
    count_events,
    delivered,
    interrupt,
    only_run_id,
    query,
    reboots,
    slurm_view,
    started_run,
    unjournaled,
    wait_stopped,
)
from tests.lab.support import running_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REBOOT_TIME = 0.3
WORKERS = 4
INTERRUPTED = 99
FINISHED_REFUSED = 5
LIVE_REFUSED = 6


RUN_TAG = re.compile(r"\(run [^)]*\)")


@dataclass(frozen=True, slots=True)
class Lab:
    """A playbook on a lab scenario, with its extra arguments."""

    id: str
    scenario: str
    playbook: str
    extra: tuple[str, ...] = ()
    reference_rc: int = 2
    """The clean run's exit code on this lab."""
    unreached: frozenset[str] = frozenset()
    """Steps (by name) the reference run never announces on this lab: no kill point there. A
    block whose `when` is false on every host is announced, and so are its children, each
    skipped (Ansible evaluates a block's `when` on each of its steps)."""


XID79 = Lab(
    "xid79",
    "xid79",
    "xid79.yml",
    # gpu005's job outlives the drain (the demo's busy node): deferred after 3 s, not 5 minutes
    ("-e", "drain_wait=3s"),
)
ECC = Lab(
    "ecc",
    "protected",
    "ecc.yml",
    ("-e", "drain_wait=3s"),
    unreached=frozenset(
        {
            # no row-remap failure on the protected lab (tests/e2e/test_playbooks_mixed.py has
            # one): every host ends the RMA play at its first step; the reset block's rescue
            # has a "mark the node failed" too
            "drain for RMA",
            "keep evidence",
            "mark the node failed",
            # the engine defers a busy node itself: the playbook's own rescue is the fallback
            "jobs still running, reset deferred",
            "leave the node draining for the next run",
            # every reset verifies
            "leave drained, saying why",
        }
    ),
)
DRIVER = Lab(
    "driver",
    "protected",
    "driver-reload.yml",
    ("-e", "drain_wait=3s"),
    unreached=frozenset(
        {
            # every reload verifies (the block for a node lacking only some modules,
            # tests/e2e/test_playbooks_mixed.py gpu015, is announced and skipped here)
            "leave drained, saying why",
            "mark the node failed",
        }
    ),
)
RECOVER = Lab(
    "recover",
    "boards",
    "recover.yml",
    ("-e", "drain_wait=3s"),
    # the repair play fixes every node a reset, IMEX or a reboot fixes (bd11's stopped Fabric
    # Manager included); then bd05 and bd06 are drained for field diagnostics, each in a rack
    # of its own (exit 2)
    reference_rc=2,
    unreached=frozenset({"leave drained, saying what it needs next", "mark the node failed"}),
)
SCENARIOS = Path(__file__).parent / "scenarios"
# hp01 runs dave's job (drained, its job keeps running: no wait), bob drained hp02 (left alone),
# hp03's Slurm cannot be read (refused); hp04 (slow SSH, last) and hp05 are drained
DRAIN = Lab(
    "drain",
    str(SCENARIOS / "hygiene-protected.yml"),
    "drain.yml",
    # three drains of five nodes are past the default budget (25%): which two it held would
    # depend on which host came first
    ("-e", "reason=fan-swap", "--repair-budget", "none"),
)
# rs01 and rs04 resumed; rs03 (GPU 7 gone) kept drained by the validation; bob's rs02 left
RESUME = Lab("resume", str(SCENARIOS / "resume-drained.yml"), "resume.yml")
# stale segments and persistence off on hp01 (busy: fixed, both are safe under a job), hp02
# (bob's: left alone), hp03 (Slurm unreadable) and hp04 (slow SSH, last); none on hp05
SHM = Lab("shm", str(SCENARIOS / "hygiene-protected.yml"), "shm.yml")
PERSISTENCE = Lab("persistence", str(SCENARIOS / "hygiene-protected.yml"), "persistence.yml")
# nc02 below the floor alone and in pairs: drained; nc01, whose pair with it failed, passes
# across leaves; dave's nc07 and bob's nc08 untested. A drained node is known: exit 0
NCCL = Lab("nccl", str(SCENARIOS / "nccl-pairs.yml"), "nccl-health.yml", reference_rc=0)
# every node ends healthy (bob's sw05 only probed, dave's sw04 cleaned, not tested): exit 0
SWEEP = Lab("sweep", str(SCENARIOS / "sweep-small.yml"), "health-sweep.yml", reference_rc=0)
LABS = (XID79, ECC, DRIVER, RECOVER, DRAIN, RESUME, SHM, PERSISTENCE, NCCL, SWEEP)


def _walk(steps: tuple[Step, ...]) -> Iterator[Step]:
    for step in steps:
        yield step
        if step.kind is StepKind.BLOCK:
            yield from _walk((*step.block, *step.rescue, *step.always))


def playbook_steps(lab: Lab) -> list[Step]:
    """Every step of the playbook that can print a TASK banner, in file order."""
    book = load_playbook(PLAYBOOKS / lab.playbook, builtin_catalog())
    sections = ((p.pre_tasks, p.tasks, p.post_tasks, p.handlers) for p in book.plays)
    return [step for parts in sections for part in parts for step in _walk(part)]


@dataclass(frozen=True, slots=True)
class KillPoint:
    """Stop the controller with `signum` once the journal holds `nth` `kind` events (whose
    body contains `contains`). A step point (`line` set) stops at the TASK banner of the
    step at that line, in the batch the reference run chooses: the `working`-th batch where
    the step did something on a host."""

    id: str
    lab: Lab
    signum: signal.Signals
    kind: str = "TaskStarted"
    nth: int = 1
    contains: str | None = None
    step: str | None = None
    line: int | None = None
    working: int = 1


def _step_points(lab: Lab) -> list[KillPoint]:
    points = []
    for step in playbook_steps(lab):
        line = step.position.line
        point_id = f"{lab.id}-kill-step{line:03d}"
        points.append(KillPoint(point_id, lab, signal.SIGKILL, step=step.name, line=line))
    return points


def _intent(
    lab: Lab, signum: signal.Signals, action: str, nth: int = 1, kind: str = "ActionStarted"
) -> KillPoint:
    word = {signal.SIGKILL: "kill", signal.SIGINT: "int", signal.SIGTERM: "term"}[signum]
    what = {"ActionStarted": "intent", "ActionTaken": "done"}.get(kind, kind)
    return KillPoint(
        f"{lab.id}-{word}-{action}-{what}{nth}", lab, signum, kind, nth, f'"action": "{action}"'
    )


def _reboot_step(nth_working: int) -> KillPoint:
    name = "reboot (restart bare metal)"
    (line,) = [s.position.line for s in playbook_steps(XID79) if s.name == name]
    return KillPoint(
        f"xid79-kill-reboot-step-batch{nth_working}",
        XID79,
        signal.SIGKILL,
        step=name,
        line=line,
        working=nth_working,
    )


KILL_POINTS = (
    *(point for lab in LABS for point in _step_points(lab)),
    # xid79: a later batch (racks of two, batches of four: gpu003 and gpu007, whose fix fails,
    # reboot in one batch, gpu011 in the next)
    _reboot_step(2),
    _intent(XID79, signal.SIGKILL, "slurm_drain"),
    _intent(XID79, signal.SIGKILL, "reboot", 1),
    _intent(XID79, signal.SIGKILL, "reboot", 2),
    _intent(XID79, signal.SIGKILL, "reboot", 3),
    _intent(XID79, signal.SIGKILL, "reboot", 1, "ActionTaken"),
    KillPoint(
        "xid79-kill-reboot-verdict1",
        XID79,
        signal.SIGKILL,
        "HostStepFinished",
        1,
        '"step": "reboot (restart bare metal)"',
    ),
    _intent(XID79, signal.SIGINT, "slurm_drain"),
    _intent(XID79, signal.SIGINT, "reboot"),
    _intent(XID79, signal.SIGINT, "reboot", 1, "ActionTaken"),
    _intent(XID79, signal.SIGTERM, "slurm_drain", 2),
    _intent(XID79, signal.SIGTERM, "reboot", 2),
    _intent(XID79, signal.SIGTERM, "reboot", 2, "ActionTaken"),
    # ecc: gpu01's deferral, gpu04's drain, reset and return
    _intent(ECC, signal.SIGKILL, "slurm_drain", 1),
    _intent(ECC, signal.SIGKILL, "slurm_drain", 2),
    _intent(ECC, signal.SIGKILL, "gpu_reset"),
    _intent(ECC, signal.SIGKILL, "gpu_reset", 1, "ActionTaken"),
    _intent(ECC, signal.SIGKILL, "slurm_resume"),
    _intent(ECC, signal.SIGINT, "gpu_reset"),
    _intent(ECC, signal.SIGTERM, "gpu_reset"),
    # driver-reload: gpu05's deferral, gpu08's reload and return
    _intent(DRIVER, signal.SIGKILL, "slurm_drain", 1),
    _intent(DRIVER, signal.SIGKILL, "reload_driver"),
    _intent(DRIVER, signal.SIGKILL, "reload_driver", 1, "ActionTaken"),
    _intent(DRIVER, signal.SIGKILL, "slurm_resume"),
    _intent(DRIVER, signal.SIGINT, "reload_driver"),
    _intent(DRIVER, signal.SIGTERM, "reload_driver"),
    # recover: resets per board, reboots, IMEX, field diagnostics on the boards lab
    _intent(RECOVER, signal.SIGKILL, "gpu_reset", 1),
    _intent(RECOVER, signal.SIGKILL, "gpu_reset", 2),
    _intent(RECOVER, signal.SIGKILL, "reboot", 1),
    _intent(RECOVER, signal.SIGKILL, "imex_restart", 1),
    _intent(RECOVER, signal.SIGKILL, "slurm_resume", 1),
    _intent(RECOVER, signal.SIGTERM, "gpu_reset", 1),
    # drain: hp01 (busy), hp05, then hp04
    _intent(DRAIN, signal.SIGKILL, "slurm_drain", 1),
    _intent(DRAIN, signal.SIGKILL, "slurm_drain", 2),
    _intent(DRAIN, signal.SIGKILL, "slurm_drain", 1, "ActionTaken"),
    _intent(DRAIN, signal.SIGINT, "slurm_drain", 1),
    _intent(DRAIN, signal.SIGTERM, "slurm_drain", 2),
    # resume: rs01 and rs04 back to service
    _intent(RESUME, signal.SIGKILL, "slurm_resume", 1),
    _intent(RESUME, signal.SIGKILL, "slurm_resume", 2),
    _intent(RESUME, signal.SIGKILL, "slurm_resume", 1, "ActionTaken"),
    _intent(RESUME, signal.SIGINT, "slurm_resume", 1),
    _intent(RESUME, signal.SIGTERM, "slurm_resume", 2),
    # shm and persistence: hp01 (busy), then hp04
    _intent(SHM, signal.SIGKILL, "clean_shm", 1),
    _intent(SHM, signal.SIGKILL, "clean_shm", 2),
    _intent(SHM, signal.SIGKILL, "clean_shm", 1, "ActionTaken"),
    _intent(SHM, signal.SIGINT, "clean_shm", 1),
    _intent(SHM, signal.SIGTERM, "clean_shm", 2),
    _intent(PERSISTENCE, signal.SIGKILL, "persistence_mode", 1),
    _intent(PERSISTENCE, signal.SIGKILL, "persistence_mode", 2),
    _intent(PERSISTENCE, signal.SIGKILL, "persistence_mode", 1, "ActionTaken"),
    _intent(PERSISTENCE, signal.SIGINT, "persistence_mode", 1),
    _intent(PERSISTENCE, signal.SIGTERM, "persistence_mode", 2),
    # nccl-health: reservations, the tests alone (1: the first, which a resumed run failed as
    # 'not repeated' and then drained three healthy nodes, 131b769), in pairs (7) and across
    # leaves (13), nc02's drain, the releases
    _intent(NCCL, signal.SIGKILL, "slurm_reserve", 1),
    _intent(NCCL, signal.SIGKILL, "nccl_tests", 1),
    _intent(NCCL, signal.SIGKILL, "nccl_tests", 1, "ActionTaken"),
    _intent(NCCL, signal.SIGKILL, "nccl_tests", 7),
    _intent(NCCL, signal.SIGKILL, "nccl_tests", 13),
    _intent(NCCL, signal.SIGKILL, "slurm_drain", 1),
    _intent(NCCL, signal.SIGKILL, "slurm_release", 1),
    _intent(NCCL, signal.SIGINT, "slurm_reserve", 1),
    _intent(NCCL, signal.SIGINT, "nccl_tests", 1),
    _intent(NCCL, signal.SIGINT, "slurm_drain", 1),
    _intent(NCCL, signal.SIGINT, "slurm_release", 1),
    _intent(NCCL, signal.SIGTERM, "slurm_reserve", 2),
    _intent(NCCL, signal.SIGTERM, "nccl_tests", 7),
    _intent(NCCL, signal.SIGTERM, "slurm_drain", 1),
    _intent(NCCL, signal.SIGTERM, "slurm_release", 2),
    # health-sweep: each hygiene fix, the reservation, test and release around it
    *(
        _intent(SWEEP, signum, action)
        for signum in (signal.SIGKILL, signal.SIGINT)
        for action in (
            "clean_shm",
            "persistence_mode",
            "reset_ecc",
            "slurm_reserve",
            "nccl_tests",
            "slurm_release",
        )
    ),
    _intent(SWEEP, signal.SIGTERM, "clean_shm", 2),
    _intent(SWEEP, signal.SIGTERM, "reset_ecc", 1),
    _intent(SWEEP, signal.SIGTERM, "nccl_tests", 3),
    _intent(SWEEP, signal.SIGTERM, "slurm_release", 3),
)


@dataclass(frozen=True, slots=True)
class Banner:
    """One TASK banner of the reference run."""

    line: int
    name: str
    occurrence: int
    """How many banners of this step so far, this one included."""
    worked: bool
    """Some host's result for this step in this batch was not `skipped`."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run (or an interrupted run and its resume) left: lab truth, audit, journal."""

    run: Run
    truth: dict[str, dict[str, Any]]
    audit: dict[str, list[dict[str, Any]]]
    rows: list[ActionRow]
    banners: list[Banner]

    @property
    def view(self) -> dict[str, dict[str, Any]]:
        """Per node: boots, the Slurm record and the faults still present. A fleetfix drain
        reason names its run, and the reference is another run: `(run ...)` stands for it."""
        view = slurm_view(self.truth)
        for name, node in self.truth.items():
            view[name]["faults"] = sorted(fault_kinds(node))
            if isinstance(view[name].get("reason"), str):
                view[name]["reason"] = RUN_TAG.sub("(run ...)", view[name]["reason"])
        return view


@dataclass(frozen=True, slots=True)
class Interrupted:
    """A case: the first controller's exit code and output, then its resume's outcome, and
    what a second --resume of the finished run did. None when the reference never reaches
    the kill point's step."""

    first_rc: int
    first_output: str
    said_run_id: bool
    """The first run printed its run id (an operator needs it for --resume)."""
    journaled_outcome: int | None
    """The first run's outcome in the journal: None after a kill -9, 99 after a signal."""
    banner_at_kill: str | None
    resumed: Outcome
    again: Run
    truth_after_again: dict[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class LiveResume:
    refused: Run
    first_alive_after: bool
    first_rc: int
    first_output: str
    outcome: Outcome
    run_started: int


def _banners(journal: Path) -> list[Banner]:
    """The TASK banners of a run in order, each with whether its step did something in its
    batch (a host's result for it, in that batch, was not skipped)."""
    rows = query(
        journal,
        "SELECT type, body FROM events WHERE type IN"
        " ('BatchStarted', 'TaskStarted', 'HostStepFinished') ORDER BY id",
    )
    announced: list[tuple[int, str, int]] = []  # line, name, batch
    worked: set[tuple[int, str]] = set()  # batch, step name
    batch = 0
    for kind, raw in rows:
        body = json.loads(raw)
        if kind == "BatchStarted":
            batch += 1
        elif kind == "TaskStarted":
            announced.append((int(body["position"]["line"]), str(body["name"]), batch))
        elif body["result"]["status"] != "skipped":
            worked.add((batch, str(body["result"]["step"])))
    seen: Counter[int] = Counter()
    banners = []
    for line, name, in_batch in announced:
        seen[line] += 1
        banners.append(Banner(line, name, seen[line], (in_batch, name) in worked))
    return banners


def _outcome(run: Run, lab: Any, journal: Path) -> Outcome:
    return Outcome(run, nodes(lab.truth()), lab.audit(), action_rows(journal), _banners(journal))


def _reference(lab_case: Lab, base: Path) -> Outcome:
    with running_lab(lab_case.scenario, base / "lab", reboot_time=REBOOT_TIME) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        run = fleetfix_run(lab_case.playbook, inventory, base, *lab_case.extra, timeout=600)
        return _outcome(run, lab, base / "j.sqlite")


def stop_at(point: KillPoint, reference: Outcome) -> tuple[str, int, str | None] | None:
    """(event kind, how many, body text) to stop at; None when the reference never reaches
    the point's step."""
    if point.line is None:
        return point.kind, point.nth, point.contains
    mine = [b for b in reference.banners if b.line == point.line]
    working = [b for b in mine if b.worked]
    if len(working) >= point.working:
        chosen = working[point.working - 1]
    elif point.working == 1 and mine:
        chosen = mine[0]
    else:
        return None
    return "TaskStarted", chosen.occurrence, f'"line": {point.line}, "column"'


def _banner(journal: Path, line: int, occurrence: int) -> str | None:
    rows = query(
        journal,
        "SELECT json_extract(body, '$.name') FROM events WHERE type='TaskStarted'"
        " AND json_extract(body, '$.position.line') = ? ORDER BY id LIMIT 1 OFFSET ?",
        (line, occurrence - 1),
    )
    return str(rows[0][0]) if rows else None


def _interrupted(point: KillPoint, base: Path, reference: Future[Outcome]) -> Interrupted | None:
    at = stop_at(point, reference.result())
    if at is None:
        return None
    kind, nth, contains = at
    lab_case = point.lab
    with running_lab(lab_case.scenario, base / "lab", reboot_time=REBOOT_TIME) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        journal = base / "j.sqlite"
        argv = run_argv(lab_case.playbook, inventory, journal, *lab_case.extra)
        with started_run(argv, base, "first", StopAt(kind, nth, contains)) as first:
            wait_stopped(first)
            first_rc = interrupt(first, point.signum)
            first_output = first.output()
            said_run_id = "run id: " in first.stdout.read_text(errors="replace")
        banner = _banner(journal, point.line, nth) if point.line is not None else None
        run_id = only_run_id(journal)
        journaled = query(journal, "SELECT outcome FROM runs WHERE run_id=?", (run_id,))[0][0]
        resume = ("--resume", run_id, *lab_case.extra)
        resumed = fleetfix_run(lab_case.playbook, inventory, base, *resume, timeout=600)
        outcome = _outcome(resumed, lab, journal)
        again = fleetfix_run(lab_case.playbook, inventory, base, *resume, timeout=120)
        truth_again = nodes(lab.truth())
    return Interrupted(
        first_rc, first_output, said_run_id, journaled, banner, outcome, again, truth_again
    )


def _live_resume(base: Path) -> LiveResume:
    """A --resume of a run whose controller still lives, from a second process."""
    with running_lab("xid79", base / "lab", reboot_time=REBOOT_TIME) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        journal = base / "j.sqlite"
        argv = run_argv("xid79.yml", inventory, journal, *XID79.extra)
        with started_run(argv, base, "first", StopAt("TaskStarted")) as first:
            wait_stopped(first)
            run_id = only_run_id(journal)
            resume = ("--resume", run_id, *XID79.extra)
            refused = fleetfix_run("xid79.yml", inventory, base, *resume, timeout=120)
            alive = first.process.poll() is None
            first.process.send_signal(signal.SIGCONT)
            first_rc = first.wait(300)
            first_output = first.output()
        run = Run(first_rc, first_output, "")
        started = count_events(journal, "RunStarted")
        return LiveResume(
            refused, alive, first_rc, first_output, _outcome(run, lab, journal), started
        )


@dataclass
class Cases:
    reference: dict[str, Future[Outcome]]
    interrupted: dict[str, Future[Interrupted | None]]
    live: Future[LiveResume] | None


def _selected(request: pytest.FixtureRequest) -> list[pytest.Item]:
    here = request.path
    return [item for item in request.session.items if item.path == here]


@pytest.fixture(scope="module")
def cases(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cases]:
    """Every selected case started at once (WORKERS at a time); the references first, and
    each test waits for its own case."""
    items = _selected(request)
    params = [getattr(item, "callspec", None) for item in items]
    points = {p.params["point"].id for p in params if p is not None and "point" in p.params}
    wanted = [point for point in KILL_POINTS if point.id in points]
    live_wanted = any(item.name.startswith("test_resume_of_a_live_run") for item in items)
    labs = {point.lab.id for point in wanted} | ({"xid79"} if live_wanted else set())
    labs |= {p.params["lab"].id for p in params if p is not None and "lab" in p.params}
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="resume-case") as pool:
        reference = {
            lab.id: pool.submit(_reference, lab, tmp_path_factory.mktemp(f"reference-{lab.id}"))
            for lab in LABS
            if lab.id in labs
        }
        interrupted = {
            point.id: pool.submit(
                _interrupted, point, tmp_path_factory.mktemp(point.id), reference[point.lab.id]
            )
            for point in wanted
        }
        live = pool.submit(_live_resume, tmp_path_factory.mktemp("live")) if live_wanted else None
        try:
            yield Cases(reference, interrupted, live)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _same_outcome(outcome: Outcome, reference: Outcome, label: str) -> None:
    """The invariants every interrupted-and-resumed run must meet against the reference."""
    context = f"{label}\n{outcome.run.output[-4000:]}"
    assert outcome.run.returncode == reference.run.returncode, context
    differing = {
        name: (node, reference.view.get(name))
        for name, node in outcome.view.items()
        if node != reference.view.get(name)
    }
    assert outcome.view == reference.view, f"{differing}\n{context}"
    assert delivered(outcome.rows) == delivered(reference.rows), context
    open_rows = [row for row in outcome.rows if row.state not in ("ok", "failed", "undelivered")]
    assert open_rows == [], f"intents never settled: {open_rows}\n{context}"
    reboot_intents = Counter(
        row.host for row in outcome.rows if row.action == "reboot" and row.state != "undelivered"
    )
    twice = {host for host, count in reboot_intents.items() if count > 1}
    assert twice == set(), f"two delivered reboot intents: {outcome.rows}\n{context}"
    lab_reboots = {host: n for host, n in reboots(outcome.audit).items() if n}
    assert lab_reboots == {h: n for h, n in reboots(reference.audit).items() if n}, context
    assert unjournaled(outcome.audit, outcome.rows) == [], context


def test_an_exit_code_unlike_a_clean_zero_is_caught() -> None:
    """The comparison holds the exit code against every reference, one that exits 0 (the nccl
    and sweep labs) too: a resumed run exiting 2, 4 or 6 with the fleet otherwise the same
    fails it."""
    clean = Outcome(Run(0, "", ""), {}, {}, [], [])
    _same_outcome(Outcome(Run(0, "", ""), {}, {}, [], []), clean, "the same outcome")
    for returncode in (2, 4, 6):
        with pytest.raises(AssertionError):
            _same_outcome(Outcome(Run(returncode, "", ""), {}, {}, [], []), clean, "exit code")


@pytest.mark.parametrize("lab", LABS, ids=[lab.id for lab in LABS])
def test_reference_run(cases: Cases, lab: Lab) -> None:
    """The clean runs the others are held against: every disruptive call journaled, every
    step announced except those listed as unreached on that lab."""
    reference = cases.reference[lab.id].result()
    assert reference.run.returncode == lab.reference_rc, reference.run.output
    assert unjournaled(reference.audit, reference.rows) == []
    assert {row.state for row in reference.rows} <= {"ok", "failed"}
    announced = {banner.line for banner in reference.banners}
    never = {step.name for step in playbook_steps(lab) if step.position.line not in announced}
    assert never == set(lab.unreached), "update the lab's list of unreached steps"


def test_the_xid79_reference_is_the_documented_run(cases: Cases) -> None:
    """What tests/e2e/test_playbooks_lab.py shows: three reboots, gpu007 left needing a cold
    power cycle (none allowed here), the human-drained gpu014 untouched."""
    view = cases.reference["xid79"].result().view
    assert {n for n, v in view.items() if v["boots"] == 2} == {"gpu003", "gpu007", "gpu011"}
    assert view["gpu007"]["drain"]
    assert "needs a human: cold power cycle" in str(view["gpu007"]["reason"])
    assert not view["gpu003"]["drain"] and not view["gpu011"]["drain"]
    assert view["gpu014"]["reason"] == "reseat GPU 4, ticket OPS-1187"


@pytest.mark.parametrize("point", KILL_POINTS, ids=[p.id for p in KILL_POINTS])
def test_resume_after_a_stop_ends_like_a_clean_run(cases: Cases, point: KillPoint) -> None:
    case = cases.interrupted[point.id].result()
    reference = cases.reference[point.lab.id].result()
    if case is None:
        assert point.step in point.lab.unreached, f"{point.step!r} was never announced"
        return
    expected_rc = -signal.SIGKILL if point.signum == signal.SIGKILL else INTERRUPTED
    assert case.first_rc == expected_rc, case.first_output
    expected_outcome = None if point.signum == signal.SIGKILL else INTERRUPTED
    assert case.journaled_outcome == expected_outcome, "the stop came after the run finished"
    if point.step is not None:
        assert case.banner_at_kill == point.step
    assert case.said_run_id, case.first_output
    _same_outcome(case.resumed, reference, f"resumed after {point.id}")

    assert case.again.returncode == FINISHED_REFUSED, case.again.output
    assert "finished" in case.again.stderr, case.again.output
    assert case.truth_after_again == case.resumed.truth, "a refused resume changed the lab"


def test_resume_of_a_live_run_is_refused_and_changes_nothing(cases: Cases) -> None:
    assert cases.live is not None
    live = cases.live.result()
    reference = cases.reference["xid79"].result()
    assert live.first_alive_after, "the first run ended before the refused resume: proves nothing"
    assert live.refused.returncode == LIVE_REFUSED, live.refused.output
    assert "still running" in live.refused.stderr, live.refused.output
    assert "run id:" not in live.refused.stdout, live.refused.output
    assert live.run_started == 1, "the refused resume started the run a second time"
    _same_outcome(live.outcome, reference, "first run, after a refused live resume")
