"""ReportCollector: a real event stream in, the report model out."""

from __future__ import annotations

from fleetfix.events import (
    CommandRan,
    HostStepFinished,
    HostStepStarted,
    RunFinished,
    RunStarted,
)
from fleetfix.report.collect import ReportCollector, registered_busbw
from fleetfix.report.model import Report
from fleetfix.report.text import EXCERPT_CHARS
from fleetfix.results import (
    PARSED_EXCERPT,
    CommandResult,
    HostStats,
    RunResult,
    Status,
    StepResult,
)
from fleetfix.topology.findings import FindingCategory
from fleetfix.topology.graph import NO_LEAF, NO_SPINE, Topology
from fleetfix.verdicts import Verdict, VerdictKind
from tests.unit.report.conftest import collect
from tests.unit.report.fleetrun import (
    NOISE_FAILURE,
    PLAY,
    PLAYBOOK,
    SECRET,
    STRAGGLER,
    T0,
    UNREACHABLE,
    FleetRun,
    fleet_events,
    host_vars,
)


def test_run_header_and_outcome(report: Report) -> None:
    assert report.run_id == "20240501-030000-abc123"
    assert report.playbook == PLAYBOOK
    assert report.plays == (PLAY,)
    assert report.check is False
    assert report.outcome == "unreachable"  # unreachable wins over failed, as Ansible
    assert report.exit_code == 4
    assert report.started is not None and report.started > T0
    assert report.finished is not None and report.finished > report.started


def test_every_host_with_its_verdict(report: Report) -> None:
    assert len(report.hosts) == 32
    expected = {"unreachable": 1, "held": 7, "failed": 1, "fixed": 1, "healthy": 22}
    assert report.status_counts() == {k.value: expected.get(k.value, 0) for k in VerdictKind}
    assert report.host(UNREACHABLE).status is VerdictKind.UNREACHABLE
    held = report.host("gpu017")
    assert held.status is VerdictKind.HELD and held.held
    assert held.domains == {"rack": "r05", "leaf": "leaf-03", "spine": "spine-02"}
    assert report.host("gpu002").status is VerdictKind.FAILED  # failed, not under a suspect
    assert report.host("gpu024").status is VerdictKind.HEALTHY
    assert report.host(STRAGGLER).status is VerdictKind.FIXED
    # The engine's verdict, as the RunFinished event carried it: not re-derived from counts.
    finished = fleet_events()[-1]
    assert isinstance(finished, RunFinished)
    assert all(h.verdict == finished.result.verdicts[h.name] for h in report.hosts)


def test_recap_is_the_engines(report: Report) -> None:
    finished = fleet_events()[-1]
    assert isinstance(finished, RunFinished)
    stats = finished.result.stats
    for host in report.hosts:
        assert dict(host.recap) == stats[host.name].as_dict()
    assert report.recap_totals()["skipped"] == 22


def test_steps_commands_and_timing(report: Report) -> None:
    host = report.host("gpu017")
    assert [s.step for s in host.steps] == ["probe GPUs", "nccl all_reduce_perf"]
    nccl = host.steps[1]
    assert nccl.status == "failed"
    assert nccl.message == "avg busbw 13.0 GB/s is below the 150 GB/s floor"
    assert nccl.play == PLAY
    assert nccl.started is not None and nccl.finished is not None
    assert nccl.started < nccl.finished
    (command,) = nccl.commands
    assert command.command == "all_reduce_perf -b 8 -e 8G -f 2 -g 8"
    assert command.rc == 0 and command.duration == 61.2
    assert "Avg bus bandwidth" in command.stdout
    # Hostile output is kept as text with terminal escapes and control characters removed.
    assert "\x1b" not in command.stdout and "\x00" not in command.stdout
    assert "<script>" in command.stdout  # escaping is the renderers' job, tested there
    assert report.timeline[0].started is not None
    assert all(
        a.started is not None and b.started is not None and a.started <= b.started
        for a, b in zip(report.timeline, report.timeline[1:], strict=False)
    )


def test_no_log_output_stays_redacted(report: Report) -> None:
    step = report.host("gpu001").steps[2]
    assert step.step == "store ticket token"
    assert step.commands[0].command.startswith("the output has been hidden")
    assert SECRET not in repr(report)


def test_busbw_findings_and_actions(report: Report) -> None:
    assert report.busbw["gpu001"] == 195.0
    assert report.busbw["gpu017"] == 13.0
    assert UNREACHABLE not in report.busbw
    categories = [f.category for f in report.findings]
    assert categories == [FindingCategory.CORRELATED_FAILURE] + [FindingCategory.STRAGGLER] * 2
    correlated, *stragglers = report.findings
    assert (correlated.kind, correlated.domain) == ("leaf", "leaf-03")
    assert correlated.message.startswith("7 of 9 failures sit under leaf leaf-03 (7 of 8 nodes")
    # The bad leaf's nodes are explained by it and not judged; a node that failed on its own
    # (gpu002, below the floor) is a straggler as much as the slow one that passed.
    assert {f.domain for f in stragglers} == {NOISE_FAILURE, STRAGGLER}
    (action,) = report.actions
    assert (action.host, action.action, action.planned, action.failed) == (
        STRAGGLER,
        "clean_shm",
        False,
        False,
    )
    assert action.commands == ("find /dev/shm -maxdepth 1 -name 'nccl-*' -mmin +60 -delete",)


def test_check_mode_lists_planned_commands(check_report: Report) -> None:
    assert check_report.check
    (action,) = check_report.actions
    assert action.planned and action.action is None
    assert action.commands[0].startswith("find /dev/shm")
    step = check_report.host(STRAGGLER).steps[-1]
    assert step.commands[0].planned_only
    assert step.commands[0].rc is None


def test_tree_is_spine_leaf_hosts(report: Report) -> None:
    assert [s.name for s in report.tree] == ["spine-01", "spine-02"]
    leaves = {leaf.name: leaf for spine in report.tree for leaf in spine.leaves}
    assert list(leaves) == ["leaf-01", "leaf-02", "leaf-03", "leaf-04"]
    assert leaves["leaf-03"].hosts == tuple(f"gpu{i:03d}" for i in range(17, 25))
    assert leaves["leaf-03"].spines == ("spine-02",)
    assert set(report.suspects()) == {("leaf", "leaf-03")}


def test_the_journaled_topology_draws_the_same_tree(report: Report) -> None:
    collector = ReportCollector(run_id=report.run_id)
    for event in fleet_events():
        collector(event)
    replayed = collector.model()  # no topology given: the one RunStarted carried
    assert replayed.tree == report.tree
    assert [h.domains for h in replayed.hosts] == [h.domains for h in report.hosts]
    assert replayed.findings == report.findings
    assert replayed == report


def test_explicit_findings_and_no_topology() -> None:
    collector = ReportCollector()
    for event in fleet_events(places=False):
        collector(event)
    bare = collector.model()  # no topology: one unknown leaf, no correlation possible
    assert bare.tree[0].name == NO_SPINE
    assert bare.tree[0].leaves[0].name == NO_LEAF
    assert len(bare.tree[0].leaves[0].hosts) == 32
    # No topology, no correlation: every slow node is judged alone, the bad leaf's included.
    assert {f.category for f in bare.findings} == {FindingCategory.STRAGGLER}
    assert {f.domain for f in bare.findings} >= {NOISE_FAILURE, STRAGGLER, "gpu017"}
    assert bare.run_id == "run-20240501-030000"
    quiet = collector.model(Topology.from_hosts(host_vars()), findings=())
    assert quiet.findings == ()
    assert quiet.host("gpu017").status is VerdictKind.HELD  # the engine's verdict, not ours


def test_unfinished_run_is_incomplete_and_recounted() -> None:
    collector = ReportCollector()
    for event in FleetRun(finish=False, safety_stop="topology hold on leaf-03").build():
        collector(event)
    report = collector.model(Topology.from_hosts(host_vars()))
    assert report.outcome == "incomplete"
    assert report.exit_code is None and report.finished is None
    assert report.safety_stops == ("topology hold on leaf-03",)
    assert report.host("gpu001").recap["ok"] == 3
    # No RunFinished, no verdict: never a status made up from the counts.
    assert {h.status for h in report.hosts} == {VerdictKind.INTERRUPTED}


def test_events_without_a_start_and_hosts_outside_the_topology() -> None:
    collector = ReportCollector()
    collector(RunStarted(playbook="p.yml", hosts=("stray1", "gpu001"), check=False, at=T0))
    command = CommandResult("true", 0, "", "", 0.1)
    collector(CommandRan(host="stray1", step="s", result=command, at=T0 + 1))
    result = StepResult("stray1", "s", Status.OK, data={"facts": {"avg_busbw": True}})
    collector(HostStepFinished(result=result, at=T0 + 2))
    collector(HostStepStarted(host="stray2", step="s2", at=T0 + 3))
    report = collector.model(Topology.from_hosts(host_vars()))
    stray = report.host("stray1")
    assert stray.steps[0].commands[0].command == "true"
    assert stray.steps[0].started is None
    assert stray.busbw is None  # a bool is not a bandwidth
    assert report.tree[-1].leaves[-1].hosts == ("stray1",)
    assert report.host("gpu001").status is VerdictKind.INTERRUPTED  # the run did not finish
    assert [h.name for h in report.hosts] == ["gpu001", "stray1"]  # only the run's hosts


def test_registered_busbw_is_tolerant() -> None:
    assert registered_busbw({"facts": {"avg_busbw": 180}}) == 180.0
    assert registered_busbw({"avg_busbw": 12.5}) == 12.5
    assert registered_busbw({"facts": None}) is None
    assert registered_busbw({"facts": {"avg_busbw": "fast"}}) is None
    assert registered_busbw({"facts": {"avg_busbw": float("nan")}}) is None
    assert registered_busbw({}) is None


def test_excerpts_are_bounded(topology: Topology) -> None:
    collector = ReportCollector(excerpt_chars=200)
    collector(HostStepStarted(host="gpu001", step="s", at=T0))
    big = "x" * 150 + "MIDDLE" + "y" * 1000 + "THE ERROR"
    collector(CommandRan(host="gpu001", step="s", result=CommandResult("c", 1, big, ""), at=T0))
    collector(HostStepFinished(result=StepResult("gpu001", "s", Status.FAILED), at=T0 + 1))
    stdout = collector.model(topology).host("gpu001").steps[0].commands[0].stdout
    assert len(stdout) < 260
    assert stdout.endswith("THE ERROR")
    assert "characters omitted" in stdout
    assert collect(topology).host("gpu017").steps[1].commands[0].stdout.count("\n") >= 5


def test_an_escape_cut_by_the_excerpt_never_reaches_the_report(topology: Topology) -> None:
    collector = ReportCollector(excerpt_chars=200)
    collector(HostStepStarted(host="gpu001", step="s", at=T0))
    # The cut lands inside the colour sequence that starts the tail.
    big = "x" * 1000 + "\x1b[1;31mRED\x1b[0m" + "y" * 140
    collector(CommandRan(host="gpu001", step="s", result=CommandResult("c", 1, big, ""), at=T0))
    collector(HostStepFinished(result=StepResult("gpu001", "s", Status.FAILED), at=T0 + 1))
    stdout = collector.model(topology).host("gpu001").steps[0].commands[0].stdout
    assert "\x1b" not in stdout
    assert stdout.endswith("y" * 140)


def test_a_rescued_failure_still_counts_for_correlation() -> None:
    collector = ReportCollector()
    failed = StepResult("gpu001", "reset", Status.FAILED, message="gpu reset failed")
    rescue = StepResult("gpu001", "reload driver", Status.CHANGED, changed=True)
    for step in (failed, rescue):
        collector(HostStepStarted(host="gpu001", step=step.step, at=T0))
        collector(HostStepFinished(result=step, at=T0 + 1))
    assert collector.failed_hosts() == {"gpu001"}  # while running: what the steps said
    stats = HostStats(ok=1, changed=1, rescued=1)  # the engine's recap after the rescue
    # The engine judges the rescued host by its recap and actions: changed, no fault left.
    verdict = Verdict("gpu001", VerdictKind.CHANGED, "changed, no fault found")
    run = RunResult(stats={"gpu001": stats}, results=[failed, rescue], verdicts={"gpu001": verdict})
    collector(RunFinished(result=run, at=T0 + 2))
    assert collector.failed_hosts() == {"gpu001"}  # the node showed the symptom
    report = collector.model(Topology.from_hosts(host_vars()))
    assert report.host("gpu001").status is VerdictKind.CHANGED
    assert report.outcome == "ok"


def test_output_read_into_facts_keeps_what_the_journal_keeps(topology: Topology) -> None:
    collector = ReportCollector()
    collector(HostStepStarted(host="gpu001", step="s", at=T0))
    xml = "<x>" + "y" * 20_000 + "</x>"
    result = CommandResult("nvidia-smi -q -x", 0, xml, "")
    collector(CommandRan(host="gpu001", step="s", result=result, read_into_facts=True, at=T0))
    collector(HostStepFinished(result=StepResult("gpu001", "s", Status.OK), at=T0 + 1))
    stdout = collector.model(topology).host("gpu001").steps[0].commands[0].stdout
    assert len(stdout) < PARSED_EXCERPT + 60 < EXCERPT_CHARS
    assert stdout.endswith("</x>")
