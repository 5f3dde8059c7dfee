"""`fleetfix run` and `validate`: load, check, confirm, run, recap, pick the exit code."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetfix.actions import action_registry
from fleetfix.cli.ansible_options import resolve_ansible_options
from fleetfix.cli.heap import CollectorPause, collector_paused, frozen_heap
from fleetfix.cli.loading import builtin_catalog, builtin_task_loader
from fleetfix.cli.loading import load_builtin_playbook as _load_playbook
from fleetfix.cli.options import (
    add_connection_options,
    add_inventory_option,
    add_journal_option,
    add_lab_port_option,
    run_id,
    with_lab_port,
)
from fleetfix.cli.questions import CONFIRM_ABOVE, ask_each_step, confirm, leaf_steps
from fleetfix.cli.resume_scope import (
    refuse_another_scope,
    refuse_more_hosts,
    resume_command,
    scope_of,
    stored_scope,
)
from fleetfix.cli.retry import shown_path, write_retry_file
from fleetfix.cli.safety_options import (
    add_safety_options,
    hands_off,
    operator,
    override_hosts,
    repair_budget,
)
from fleetfix.cli.team_options import (
    add_team_options,
    resolve_team_options,
    run_observers,
    run_redactor,
    stored_argv,
    stored_extra_vars,
    tell_journal_lost,
)
from fleetfix.engine import Engine, RunOptions
from fleetfix.engine.playkeys import rendered_play
from fleetfix.engine.tags import PlayTags, selected
from fleetfix.errors import InputError, UsageError
from fleetfix.events import CommandRan, EventBus, HostStepFinished, RunFinished
from fleetfix.inventory import Inventory, load_inventory
from fleetfix.inventory.runtime import EMPTY_INVENTORY_WARNING, with_implicit_localhost
from fleetfix.inventory.runtime import select as select_hosts
from fleetfix.journal import LEASE_RENEW, Journal, JournalError, ResumeRefused, journal_target
from fleetfix.journal.failpoint import stop_at_from_env
from fleetfix.playbook.catalog import default_step_name
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.extravars import parse_extra_vars
from fleetfix.playbook.model import Play, Playbook, Step, StepKind
from fleetfix.playbook.role_loader import role_loader
from fleetfix.probes import probe_registry
from fleetfix.report.collect import run_collector
from fleetfix.report.console import ConsoleView
from fleetfix.report.publish import add_report_steps_option, fleet_topology
from fleetfix.report.render import check_report_path
from fleetfix.results import Outcome, ResumeState, RunResult
from fleetfix.runtime import Runtime, open_runtime
from fleetfix.secrets import Redactor
from fleetfix.transport.registry import make_transport

if TYPE_CHECKING:
    from rich.console import Console

    from fleetfix.report.model import Report
    from fleetfix.topology import Topology

JOURNAL_LOST = (
    "  fleetfix stopped: without its journal it starts no action (nothing unrecorded, no lease"
    " it can prove).\n  Hosts it had drained stay drained. Once the journal is back, go on with:"
)


def add_parsers(sub: Any) -> None:
    run = sub.add_parser("run", help="run a remediation playbook against an inventory")
    run.add_argument("playbook", help="playbook YAML file")
    add_inventory_option(run)
    add_connection_options(run)
    add_lab_port_option(run)
    run.add_argument("-l", "--limit", help="further limit hosts with a pattern (or @file)")
    run.add_argument(
        "-f", "--forks", type=int, help="hosts worked on at once ($ANSIBLE_FORKS, ansible.cfg, 50)"
    )
    run.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="k=v pairs, JSON/YAML, or @file; repeatable, later wins",
    )
    run.add_argument("-t", "--tags", action="append", default=[], help="only steps with these tags")
    run.add_argument("--skip-tags", action="append", default=[], help="skip steps with these tags")
    run.add_argument(
        "-C",
        "--check",
        action="store_true",
        help="dry run: probes run, actions and commands are planned and printed only",
    )
    run.add_argument("--diff", action="store_true", help="show what would change, where known")
    run.add_argument(
        "--flush-cache",
        action="store_true",
        help="accepted for Ansible's sake; no effect: fleetfix keeps no fact cache between runs",
    )
    run.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="with --check, exit 7 when changes would be made",
    )
    run.add_argument("--list-hosts", action="store_true", help="list matching hosts and exit")
    run.add_argument("--list-tasks", action="store_true", help="list the steps and exit")
    run.add_argument("--syntax-check", action="store_true", help="validate the playbook and exit")
    run.add_argument("--step", action="store_true", help="confirm each step (one at a time)")
    run.add_argument(
        "--force-handlers",
        action="store_true",
        default=None,
        help="run notified handlers on hosts that failed too (a play's force_handlers wins)",
    )
    run.add_argument("-v", "--verbose", action="count", default=0, help="more output (-vv, -vvv)")
    run.add_argument(
        "--yes",
        action="store_true",
        help=f"do not ask before mutating more than {CONFIRM_ABOVE} hosts",
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="default per-command timeout in seconds (300); steps may override (not"
        " ansible-playbook's --timeout: that is -T/--connect-timeout here)",
    )
    run.add_argument(
        "--report",
        action="append",
        default=[],
        metavar="PATH",
        help="write a report (.json, .html, .xml=JUnit); repeatable",
    )
    add_report_steps_option(run)
    run.add_argument(
        "--topology-file",
        metavar="PATH",
        help="switches and links (YAML, or an ibnetdiscover dump)",
    )
    run.add_argument(
        "--override-holds",
        action="store_true",
        help="allow disruptive actions in a domain fleetfix suspects (a bad switch)",
    )
    add_journal_option(run)
    run.add_argument(
        "--resume",
        metavar="RUN_ID",
        type=run_id,
        help="resume an interrupted run: replay finished host-steps, re-verify interrupted"
        " actions (never repeat them), go on",
    )
    add_safety_options(run)
    add_team_options(run)
    run.set_defaults(handler=run_command)

    validate = sub.add_parser("validate", help="check a playbook without running it")
    validate.add_argument("playbook")
    validate.set_defaults(handler=validate_command)


def validate_command(args: argparse.Namespace) -> int:
    playbook = _load_playbook(args.playbook)
    steps = sum(
        len(leaf_steps(play.pre_tasks + play.tasks + play.post_tasks)) for play in playbook.plays
    )
    print(f"{args.playbook}: OK ({len(playbook.plays)} plays, {steps} steps)")
    return Outcome.OK


def run_command(args: argparse.Namespace) -> int:
    with collector_paused():  # the start-up builds what the run keeps (cli/heap.py)
        plan = _plan(args)
    if plan is None:
        return Outcome.OK  # --syntax-check, --list-hosts, --list-tasks: nothing to run
    with frozen_heap():
        return asyncio.run(_run_paused_start(args, plan))


def _plan(args: argparse.Namespace) -> RunPlan | None:
    """The checked options, playbook, inventory and hosts of the run; None when the options
    asked only for a check or a list (printed here)."""
    resolve_ansible_options(args)
    if args.forks < 1:
        raise UsageError("--forks must be at least 1")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    for path in args.report:
        check_report_path(Path(path))  # a typo fails before anything runs
    resolve_team_options(args)
    args.parsed_extra_vars = parse_extra_vars(args.extra_vars, Path.cwd())
    make_transport(args.transport)  # an unknown transport fails before the journal opens a run
    playbook = _load_playbook(args.playbook, missing_handler_errors=args.error_on_missing_handler)
    if args.syntax_check:
        print(f"\nplaybook: {args.playbook}")
        return None
    _check_tags(args, playbook)
    inventory = load_inventory(args.inventory)
    playbook = _rendered_plays(args, playbook, inventory)
    if not inventory.host_names():
        print(f"[WARNING]: {EMPTY_INVENTORY_WARNING}", file=sys.stderr)
    inventory = with_implicit_localhost(inventory, [play.hosts for play in playbook.plays])
    inventory = with_lab_port(args, inventory)
    selection = _select(inventory, playbook, args.limit)
    if args.list_hosts or args.list_tasks:
        _list(args, inventory, playbook, selection)
        return None
    if not any(selection.values()):
        raise InputError("no hosts matched the playbook's patterns" + _limit_note(args.limit))
    confirm(args, playbook, selection)
    topology = fleet_topology(inventory, selection, args.topology_file)
    whole = None  # caps count every member of a domain, beyond --limit
    if any(play.max_unavailable_per for play in playbook.plays):
        whole = fleet_topology(inventory, {0: inventory.host_names()}, args.topology_file)
    return RunPlan(inventory, playbook, selection, topology, fleet_topology=whole)


def _limit_note(limit: str | None) -> str:
    return f" (with --limit {limit!r})" if limit else ""


def _select(inventory: Inventory, playbook: Playbook, limit: str | None) -> dict[int, list[str]]:
    """Hosts per play index: the play's pattern, then --limit."""
    selection: dict[int, list[str]] = {}
    for index, play in enumerate(playbook.plays):
        hosts = select_hosts(inventory, play.hosts)
        selection[index] = inventory.limit(hosts, limit) if limit else hosts
    return selection


def _rendered_plays(args: argparse.Namespace, playbook: Playbook, inventory: Inventory) -> Playbook:
    """The plays with their templated keywords (hosts, serial, ...) rendered, as
    ansible-core does before each play; one that cannot render stops the run here."""
    playbook_dir = str(Path(playbook.path).resolve().parent)
    groups = {g: inventory.hosts_in(g) for g in inventory.group_names()}
    extra_vars = args.parsed_extra_vars
    plays = tuple(
        rendered_play(Templar(), play, extra_vars, playbook_dir, groups) for play in playbook.plays
    )
    return replace(playbook, plays=plays)


def _list(
    args: argparse.Namespace,
    inventory: Inventory,
    playbook: Playbook,
    selection: dict[int, list[str]],
) -> None:
    """--list-hosts and --list-tasks in ansible-playbook's layout (cli/playbook.py)."""
    print(f"\nplaybook: {args.playbook}")
    for term in inventory.range_terms(args.limit) if args.limit else ():
        print(f"  note: {term!r} in --limit is read as a host range (no group by that name)")
    for index, play in enumerate(playbook.plays):
        # The play's own tags as written: ansible-playbook prints them before rendering, in
        # its set's order (this prints them sorted).
        written = ",".join(sorted(play.tags))
        print(f"\n  play #{index + 1} ({play.hosts}): {play.name}\tTAGS: [{written}]")
        if args.list_hosts:
            hosts = selection[index]
            print(f"    pattern: {[play.hosts]}")
            print(f"    hosts ({len(hosts)}):")
            for host in hosts:
                print(f"      {host}")
        if args.list_tasks:
            lines = _listed_steps(args, play, _play_tags(args, playbook, play))
            print("\n".join(["    tasks:", *lines]))


def _play_tags(args: argparse.Namespace, playbook: Playbook, play: Play) -> PlayTags:
    playbook_dir = str(Path(playbook.path).resolve().parent)
    return PlayTags.of_play(Templar(), play, args.parsed_extra_vars, playbook_dir)


def _listed_steps(args: argparse.Namespace, play: Play, tags: PlayTags) -> list[str]:
    """The steps --tags/--skip-tags select, as ansible-playbook lists them: a block's own steps
    (not its rescue or always), each with the play's tags as written and its own rendered."""
    only, skip = _tag_option(args.tags), _tag_option(args.skip_tags)
    lines: list[str] = []

    def walk(steps: tuple[Step, ...], inherited: frozenset[str]) -> None:
        for step in steps:
            if step.kind is StepKind.BLOCK:
                walk(step.block, inherited | step.tags)
                continue
            own = tags.of(step.tags | inherited | play.tags, step.position)
            if selected(own, only, skip):
                lines.append(
                    f"      {_listed_name(step)}\tTAGS: [{', '.join(sorted(own | play.tags))}]"
                )

    walk(play.pre_tasks + play.tasks + play.post_tasks, frozenset())
    return lines


def _listed_name(step: Step) -> str:
    """A step's name as --list-tasks prints it: an unnamed meta or include_role is listed by
    its action alone (the run's banner says 'meta: NAME' and 'include_role : ROLE')."""
    if step.name == default_step_name(step.kind, step.args):
        if step.kind is StepKind.META:
            return "meta"
        if step.kind is StepKind.INCLUDE_ROLE:
            return "include_role"
    return step.name


def _check_tags(args: argparse.Namespace, playbook: Playbook) -> None:
    """Every templated tag renders with its play's variables, or the run is refused before
    anything runs (ansible-playbook fails the play when it reaches it)."""
    for play in playbook.plays:
        tags = _play_tags(args, playbook, play)
        steps = list(play.pre_tasks + play.tasks + play.post_tasks + play.handlers)
        while steps:
            step = steps.pop()
            tags.of(step.tags, step.position)
            steps.extend(step.block + step.rescue + step.always)
        tags.of(play.tags, play.position)


def _tag_option(values: list[str]) -> frozenset[str]:
    """-t/--skip-tags as given: repeatable, each comma-separated."""
    return frozenset(t.strip() for item in values for t in item.split(",") if t.strip())


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals that stop a run cleanly (interrupted, journaled, resumable with --resume). SIGHUP:
the operator's terminal hung up (a dropped SSH session); no one is left to watch the run."""


@dataclass(frozen=True, slots=True)
class RunPlan:
    """A validated run: the inventory, the playbook and the hosts of each play."""

    inventory: Inventory
    playbook: Playbook
    selection: dict[int, list[str]]
    topology: Topology
    fleet_topology: Topology | None = None
    """Every inventory host's domains: caps count domain members beyond --limit."""
    leased: dict[str, str] = field(default_factory=dict)
    """Hosts another live run holds -> who: left out of every play's selection."""


def _without(plan: RunPlan, leased: dict[str, str]) -> RunPlan:
    """The plan without the hosts other live runs hold: each is named once, the rest run."""
    if not leased:
        return plan
    selection = {i: [h for h in hs if h not in leased] for i, hs in plan.selection.items()}
    return replace(plan, selection=selection, leased=dict(leased))


START_PAUSE_LIMIT = 10.0
"""Seconds a run's start keeps the collector paused at most (cli/heap.py), when its first
result is slow to come (a first step that waits)."""
FIRST_RESULTS = (CommandRan, HostStepFinished, RunFinished)


async def _run_paused_start(args: argparse.Namespace, plan: RunPlan) -> int:
    """The run, the collector paused from its start to its first result: in between the
    engine makes each host's state and task (10,000 of each), and the full collections that
    walked them freed nothing (0.07 s before the first command at 10,000 hosts)."""
    pause = CollectorPause()
    timer = asyncio.get_running_loop().call_later(START_PAUSE_LIMIT, pause.end)
    try:
        return await _run(args, plan, pause)
    finally:
        timer.cancel()
        pause.end()


async def _run(args: argparse.Namespace, plan: RunPlan, pause: CollectorPause) -> int:
    redactor = run_redactor(args)
    failpoint = stop_at_from_env()
    bus = EventBus(redactor)
    bus.subscribe(lambda event: pause.end() if isinstance(event, FIRST_RESULTS) else None)
    bus.subscribe(ConsoleView(verbosity=args.verbose, diff=args.diff))
    journal = Journal(journal_target(args.journal))
    try:
        hosts = sorted({h for hs in plan.selection.values() for h in hs})
        try:
            resume = _resume_state(args, journal, redactor, hosts)
        except ResumeRefused as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return Outcome.SAFETY_ABORT if exc.live else Outcome.BAD_OPTIONS
        command_line = stored_argv(args, sys.argv, redactor)
        journal.start_run(
            args.playbook,
            command_line,
            check=args.check,
            hosts=len(hosts),
            run_id=args.resume,
        )
        busy = {} if args.check else journal.acquire_leases(hosts)
        if busy and set(busy) >= set(hosts):
            for host, holder in sorted(busy.items()):
                print(f"ERROR: {host} is being remediated by {holder}", file=sys.stderr)
            print(f"nothing to do: all {len(hosts)} host(s) are leased by other runs")
            journal.finish_run(Outcome.SAFETY_ABORT)
            return Outcome.SAFETY_ABORT
        plan = _without(plan, busy)
        bus.subscribe(journal)
        # A resumed run keeps its id: its reports cover the actions done before the stop too.
        earlier = list(journal.events(args.resume)) if args.resume else []
        collector = run_collector(
            journal.run_id, journaled=earlier, detailed_exitcode=args.detailed_exitcode
        )
        bus.subscribe(collector)
        observers = run_observers(args, journal)
        for observer in observers:
            bus.subscribe(observer)
        if failpoint is not None:
            bus.subscribe(failpoint)  # last: after the journal committed the event
        print(f"run id: {journal.run_id} (journal: {journal.where})")
        options = _engine_options(args, plan, resume, journal)
        try:
            try:
                async with (
                    open_runtime(args, plan.inventory, bus, hosts=len(hosts)) as runtime,
                    _renewing(journal),
                ):
                    result = await _execute(args, plan, runtime, bus, options)
            except JournalError as exc:
                go_on = resume_command(command_line, journal.run_id)
                print(f"ERROR: {exc}\n{JOURNAL_LOST}\n  {go_on}", file=sys.stderr)
                tell_journal_lost(observers, redactor.text(str(exc)))
                _reports(collector.model(plan.topology), args.report, steps=args.report_steps)
                return Outcome.SAFETY_ABORT
            outcome = result.outcome(check_changes_exit=args.check and args.detailed_exitcode)
            journal.finish_run(outcome)
            report = collector.model(plan.topology)
            outcome = _tell_the_end(
                args, result, outcome, report, command_line=command_line, run=journal.run_id
            )
        finally:
            for observer in observers:
                await observer.finish()
        return int(outcome)
    finally:
        journal.release_leases()
        journal.close()


def _reports(
    report: Report, paths: list[str], console: Console | None = None, *, steps: bool = False
) -> bool:
    """Print the fleet view and write the report files; False when one could not be written
    (said on stderr: the run's work and its journal stand, the file is what is missing)."""
    # The end of the run draws (rich) and writes: imported now, off the way to the first command
    from fleetfix.report.publish import publish  # noqa: PLC0415
    from fleetfix.report.terminal import output_console  # noqa: PLC0415

    failed = publish(report, paths, console or output_console(), steps=steps)
    for why in failed:
        print(f"ERROR: {why}", file=sys.stderr)
    return not failed


def _tell_the_end(
    args: argparse.Namespace,
    result: RunResult,
    outcome: Outcome,
    report: Report,
    *,
    command_line: list[str],
    run: str | None,
) -> Outcome:
    """The fleet view and the report files, then, last, the summary; the run's exit code (a
    clean run whose report could not be written is not clean)."""
    from fleetfix.report.terminal import output_console  # noqa: PLC0415 (rich: the end)

    console = output_console()
    if not _reports(report, args.report, console, steps=args.report_steps):
        # the run's own code says more; a clean run whose report is missing is not
        outcome = outcome if outcome != Outcome.OK else Outcome.ERROR
    if outcome == Outcome.INTERRUPTED:
        print(f"to go on where it stopped: {resume_command(command_line, run)}")
    _summary(args, result, run or "", int(outcome), console)
    return outcome


def _summary(
    args: argparse.Namespace, result: RunResult, run: str, code: int, console: Console
) -> None:
    """Last in the output: the verdicts grouped and the next steps, naming the retry file."""
    from fleetfix.report.summary import RunPlace, summary_lines  # noqa: PLC0415 (rich: the end)

    retry = None
    try:
        retry = write_retry_file(result.verdicts.values(), run)
    except OSError as exc:
        print(f"WARNING: cannot write the retry file: {exc}", file=sys.stderr)
    place = RunPlace(
        run_id=run,
        playbook=args.playbook,
        inventory=tuple(args.inventory),
        retry_file=shown_path(retry) if retry else None,
        json_report=next((p for p in args.report if Path(p).suffix.lower() == ".json"), None),
        exit_code=code,
    )
    for line in summary_lines(result.verdicts.values(), place):
        console.print(line, soft_wrap=True)  # a command stays one line to copy, on a tty too


def _resume_state(
    args: argparse.Namespace, journal: Journal, redactor: Redactor, hosts: Sequence[str]
) -> ResumeState:
    if not args.resume:
        return ResumeState()
    previous = journal.run(args.resume)
    if Path(previous.playbook).resolve() != Path(args.playbook).resolve():
        raise UsageError(
            f"run {args.resume} ran {previous.playbook}, not {args.playbook}; resume it with that"
        )
    then = stored_scope(_run_parser(), journal.run_argv(args.resume))
    now = scope_of({**vars(args), "extra_vars": stored_extra_vars(args, redactor)})
    refuse_another_scope(args.resume, then, now)
    refuse_more_hosts(args.resume, journal.run_hosts(args.resume), hosts)
    return journal.resume_state(args.resume)


def _run_parser() -> argparse.ArgumentParser:
    """A parser of `fleetfix run` command lines as the journal stores them."""
    parser = argparse.ArgumentParser(prog="fleetfix", add_help=False)
    add_parsers(parser.add_subparsers())
    return parser


@asynccontextmanager
async def _renewing(journal: Journal) -> AsyncIterator[None]:
    """Renew this run's host leases while it lives, so a long run keeps them and a dead
    controller's lapse within LEASE_SECONDS."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(LEASE_RENEW)
            journal.renew_leases()

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _engine_options(
    args: argparse.Namespace, plan: RunPlan, resume: ResumeState, journal: Journal
) -> RunOptions:
    return RunOptions(
        forks=args.forks,
        check=args.check,
        diff=args.diff,
        tags=_tag_option(args.tags),
        skip_tags=_tag_option(args.skip_tags),
        extra_vars=args.parsed_extra_vars,
        command_timeout=args.timeout,
        become=args.become,
        become_user=args.become_user,
        verbosity=args.verbose or 0,
        resume=resume,
        memory=journal,
        step_gate=ask_each_step() if args.step else None,
        force_handlers=bool(args.force_handlers),
        error_on_missing_handler=args.error_on_missing_handler,
        gathering=getattr(args, "gathering", "implicit"),
        override_holds=args.override_holds,
        run_id=journal.run_id or "",
        leased=plan.leased,
        run_alive=journal.run_alive,
        limit=args.limit,
        repair_budget=repair_budget(args.repair_budget, len(plan.inventory.host_names())),
        hands_off=hands_off(args.hands_off),
        override_ownership=override_hosts(args.override_ownership),
        operator=operator(),
        task_loader=builtin_task_loader(),
        role_loader=role_loader(builtin_catalog()),
        inventory_loader=_inventory_loader(args, plan.playbook),
    )


def _inventory_loader(args: argparse.Namespace, playbook: Playbook) -> Callable[[], Inventory]:
    """meta: refresh_inventory's: the sources read again as the run first read them."""
    patterns = [play.hosts for play in playbook.plays]

    def load() -> Inventory:
        fresh = with_implicit_localhost(load_inventory(args.inventory), patterns)
        return with_lab_port(args, fresh)

    return load


async def _execute(
    args: argparse.Namespace,
    plan: RunPlan,
    runtime: Runtime,
    bus: EventBus,
    options: RunOptions,
) -> RunResult:
    engine = Engine(
        inventory=plan.inventory,
        transport=runtime.transport,
        templar=Templar(bus.redactor),  # what a template makes from a secret is masked too
        spec_factory=runtime.spec_factory,
        probes=probe_registry(),
        actions=action_registry(),
        bus=bus,
        options=options,
        topology=plan.topology,
        fleet_topology=plan.fleet_topology,
    )
    by_pattern = {play.hosts: plan.selection[i] for i, play in enumerate(plan.playbook.plays)}
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await engine.run(plan.playbook, lambda pattern: by_pattern.get(pattern, []))
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
