"""`make bench`: fleetfix vs a bare asyncssh fan-out, ansible-playbook, pdsh and pssh on the lab.

    .venv/bin/python benchmarks/run.py [--hosts 300,1000[,10000]] [--tool-hosts 200]
        [--workers N] [--first-command-hosts 10000] [--no-pin] [--shared-cores] [--quick]
        [--no-ansible] [--no-pdsh] [--no-pssh] [--no-warm-up] [--profile PATH] [--keep]

1. Times `load_inventory` on a generated 10,000-host INI (min/median of 5; target < 0.3 s).
2. Starts one lab big enough for every run (10,000 nodes by default: `healthy-10000` if the
   lab ships it, else `healthy-1000` grown) and writes an inventory for it without the scenario
   line (so nothing embedded starts), with the connection vars.
3. Pins the lab to one set of cores and every contender's process tree to the others
   (pinning.py; `--no-pin` to not; `--shared-cores` adds a second, unpinned round).
4. Runs a 5-probe workload (workload.py) on the first N hosts, each contender as a whole
   process under GNU time: the bare fan-out (the floor), `fleetfix run -f 50` as it runs by
   default (one process, workers only on measured saturation) and with `--workers` forced
   shard workers (`--shards N`) at every `--hosts` count; ansible-playbook, pdsh and pssh with
   the same commands, fan-out 50, at `--tool-hosts` (with a bare run there too, for their
   wall ratio).
5. Times fleetfix from start to the first command the lab sees on `--first-command-hosts` hosts
   (ended as soon as it arrives), unless a full run covered that count.
6. Prints a table, the verdicts against the targets (issues 10 and 21), and parse_cost.py's
   tables.
Never asserts a timing. The lab is stopped by PID at the end, also on failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.metadata
import os
import pstats
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from bench_inventory import inventory_text, time_host_vars, time_parse
from contenders import (
    Setup,
    fleetfix_first_command,
    profile_fleetfix,
    run_ansible,
    run_bare,
    run_fleetfix,
    run_pdsh,
    run_pssh,
    venv_bin,
    warm_up,
)
from facts_cost import facts_cost_lines
from measure import TIME_BINARY, Measurement, load_average
from parse_cost import (
    cost_table,
    nvidia_smi_paths,
    parse_costs,
    probe_totals,
    workload_costs,
    workload_table,
)
from pinning import CpuPlan, pin_tree, plan_pinning
from proctree import descendants
from shell_tools import PDSH, PSSH_NAMES, found_tool
from table import first_command_line, measurement_table, parse_lines, ratio_lines
from workload import lab_inventory, probe_commands

import fleetfix
from fleetfix.errors import LabError
from fleetfix.lab.control import LabHandle, start_lab
from fleetfix.lab.scenario_file import resolve_scenario

SMALL_SCENARIO = "healthy-1000"
LARGE_SCENARIO = "healthy-10000"
QUICK_HOSTS = 100
LAB_START_TIMEOUT = 600.0
LAB_IDLE_TIMEOUT = 60.0

Runner = Callable[[Setup, int], Measurement]


@dataclass(frozen=True, slots=True)
class Options:
    """What to run: host counts per contender, pinning, and the optional extras."""

    hosts: tuple[int, ...]
    tool_hosts: int
    workers: int
    """Forced shard workers of the second fleetfix row at each host count (0: no such row)."""
    first_command_hosts: int
    inventory_hosts: int
    pin: bool
    shared_cores: bool
    ansible: bool
    pdsh: bool
    pssh: bool
    warm_up: bool
    profile: Path | None
    keep: bool

    @property
    def tools(self) -> bool:
        return self.ansible or self.pdsh or self.pssh

    @property
    def run_nodes(self) -> int:
        """The hosts the full runs use (the warm-up touches these)."""
        return max(*self.hosts, self.tool_hosts if self.tools else 0)

    @property
    def lab_nodes(self) -> int:
        return max(self.run_nodes, self.first_command_hosts)


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of host counts: {text!r}") from exc
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("host counts must be at least 1")
    return counts


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("--hosts", type=_counts, default=(300, 1000), help="fleetfix and bare: 300,1000[,10000]")
    add(
        "--workers",
        type=int,
        help="forced shard workers for the second fleetfix row (default: the contender's usable"
        " cores beyond the first, at least 1; 0: no such row)",
    )
    add("--tool-hosts", "--ansible-hosts", type=int, default=200, help="ansible, pdsh, pssh")
    add("--first-command-hosts", type=int, default=10_000, help="0: skip")
    add("--inventory-hosts", type=int, default=10_000)
    add("--quick", action="store_true", help=f"{QUICK_HOSTS} hosts for all, no 10k extras")
    add("--no-pin", action="store_true", help="do not pin the lab and contenders to cores")
    add("--shared-cores", action="store_true", help="also run unpinned, on shared cores")
    for tool in ("ansible", "pdsh", "pssh"):
        add(f"--no-{tool}", action="store_true", help=f"skip {tool}")
    add("--no-warm-up", action="store_true", help="skip the untimed warm-up")
    add("--profile", type=Path, help="also run fleetfix under cProfile to PATH")
    add("--keep", action="store_true", help="keep the scratch dir (outputs)")
    return parser


def parse_options(argv: list[str]) -> Options:
    parser = _parser()
    args = parser.parse_args(argv)
    hosts, tool_hosts, first = args.hosts, args.tool_hosts, args.first_command_hosts
    inventory_hosts = args.inventory_hosts
    if args.quick:
        hosts, tool_hosts, first, inventory_hosts = (QUICK_HOSTS,), QUICK_HOSTS, 0, 1000
    if min(tool_hosts, inventory_hosts) < 1 or first < 0:
        parser.error("host counts must be at least 1 (--first-command-hosts 0 skips it)")
    if args.workers is not None and args.workers < 0:
        parser.error("--workers must be 0 or more")
    return Options(
        hosts=hosts,
        tool_hosts=tool_hosts,
        workers=args.workers if args.workers is not None else -1,
        first_command_hosts=first,
        inventory_hosts=inventory_hosts,
        pin=not args.no_pin,
        shared_cores=args.shared_cores,
        ansible=not args.no_ansible,
        pdsh=not args.no_pdsh,
        pssh=not args.no_pssh,
        warm_up=not args.no_warm_up,
        profile=args.profile.resolve() if args.profile else None,
        keep=args.keep,
    )


def _say(text: str) -> None:
    print(text, flush=True)


def _versions() -> str:
    found = []
    for package in ("fleetfix", "ansible-core", "asyncssh"):
        try:
            found.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package} ?")
    return ", ".join(found)


def bench_inventory(work: Path, hosts: int) -> list[str]:
    path = work / f"inventory-{hosts}.ini"
    path.write_text(inventory_text(hosts), encoding="utf-8")
    return parse_lines(time_parse(path), time_host_vars(path))


def scenario_for(nodes: int) -> str:
    """healthy-10000 for a big lab if the lab ships it, else healthy-1000 grown to `nodes`."""
    if nodes > 1000:
        try:
            resolve_scenario(LARGE_SCENARIO)
        except LabError:
            return SMALL_SCENARIO
        return LARGE_SCENARIO
    return SMALL_SCENARIO


def _start(options: Options, work: Path) -> LabHandle:
    nodes = options.lab_nodes
    scenario = scenario_for(nodes)
    started = time.perf_counter()
    lab = start_lab(scenario, work / "lab", port=0, nodes=nodes, timeout=LAB_START_TIMEOUT)
    _say(
        f"lab {scenario}: {len(lab.hosts)} nodes on port {lab.port}, sandbox {lab.sandbox}, "
        f"pid {lab.pid}, up in {time.perf_counter() - started:.1f} s"
    )
    return lab


@dataclass(frozen=True, slots=True)
class Round:
    """One pass over every contender: pinned (a CPU plan) or on shared cores (None)."""

    label: str
    plan: CpuPlan | None


def rounds(options: Options, usable: set[int]) -> list[Round]:
    """The pinned round when possible and asked for; the unpinned one if not, or on request."""
    plan = plan_pinning(usable) if options.pin else None
    found = [Round("pinned", plan)] if plan else []
    if not found or options.shared_cores:
        found.append(Round("shared", None))
    return found


def _apply(round_: Round, lab: LabHandle, usable: set[int]) -> None:
    """Pin the lab tree and this runner (which starts the contenders) for the round."""
    if round_.plan is None:
        pin_tree(lab.pid, frozenset(usable))
        os.sched_setaffinity(0, usable)
        _say(f"round {round_.label}: not pinned; lab and contenders share CPU {sorted(usable)}")
        return
    threads = pin_tree(lab.pid, round_.plan.lab)
    # The runner only samples /proc and waits; it sits with the contenders, whose cores have
    # idle time, not with the lab, whose core is the bottleneck.
    os.sched_setaffinity(0, round_.plan.contenders)
    _say(f"round {round_.label}: {round_.plan.describe()} ({threads} lab threads pinned)")


def _tool_runners(options: Options) -> list[tuple[str, Runner]]:
    found: list[tuple[str, Runner]] = []
    if options.ansible:
        found.append(("ansible-playbook", run_ansible))
    for wanted, name, names, runner in (
        (options.pdsh, "pdsh", (PDSH,), run_pdsh),
        (options.pssh, "pssh", PSSH_NAMES, run_pssh),
    ):
        tool = found_tool(names) if wanted else None
        if tool is not None:
            found.append((name, _with_tool(runner, tool)))
        elif wanted:
            _say(f"{name}: not installed, skipped (apt-get install {name}, or make bench-tools)")
    return found


def _with_tool(
    runner: Callable[[Setup, int, str], Measurement], tool: str
) -> Callable[[Setup, int], Measurement]:
    return lambda setup, hosts: runner(setup, hosts, tool)


def forced_workers(options: Options, contender_cpus: int) -> int:
    """--workers, else the contender's usable cores beyond the first, at least one."""
    return options.workers if options.workers >= 0 else max(1, contender_cpus - 1)


def plan_runs(
    options: Options, tools: list[tuple[str, Runner]], workers: int = 1
) -> list[tuple[str, Runner, int]]:
    """bare, fleetfix and fleetfix with `workers` forced shard workers at every --hosts count;
    the tools (and bare) at --tool-hosts."""
    runs: list[tuple[str, Runner, int]] = []
    for hosts in options.hosts:
        runs += [("bare", run_bare, hosts), ("fleetfix", run_fleetfix, hosts)]
        if workers:
            runs.append((f"fleetfix --shards {workers}", _forced(workers), hosts))
    if tools and options.tool_hosts not in options.hosts:
        runs.append(("bare", run_bare, options.tool_hosts))
    runs += [(name, runner, options.tool_hosts) for name, runner in tools]
    return runs


def _forced(workers: int) -> Runner:
    return lambda setup, hosts: run_fleetfix(setup, hosts, shards=workers)


def _run_round(setup: Setup, runs: list[tuple[str, Runner, int]]) -> list[Measurement]:
    found: list[Measurement] = []
    for key, runner, hosts in runs:
        _say(f"running {key} on {hosts} hosts ({setup.label}) ...")
        measured = runner(setup, hosts)
        found.append(measured)
        _say(f"  {measured.time.wall_s:.1f} s wall; {measured.outcome}")
    return found


def _first_command(setup: Setup, options: Options, done: list[Measurement]) -> list[str]:
    """The start-to-first-command figure at --first-command-hosts, if no full run gave it."""
    hosts = options.first_command_hosts
    if not hosts or any(m.tool == "fleetfix" and m.hosts == hosts for m in done):
        return []
    _say(f"fleetfix on {hosts} hosts until its first command ({setup.label}) ...")
    baseline = len(list(descendants(setup.lab.pid)))
    seconds = fleetfix_first_command(setup, hosts)
    _wait_lab_idle(setup.lab, baseline)
    return [first_command_line(hosts, seconds, " (run ended there)")]


def _wait_lab_idle(lab: LabHandle, baseline: int) -> None:
    """Let the lab finish the commands of the run just ended, so they skew no later figure."""
    deadline = time.monotonic() + LAB_IDLE_TIMEOUT
    while len(list(descendants(lab.pid))) > baseline and time.monotonic() < deadline:
        time.sleep(0.1)


def _profile(setup: Setup, hosts: int, path: Path) -> list[str]:
    """Run fleetfix once more under cProfile; the functions with the most own time."""
    seconds = profile_fleetfix(setup, hosts, path)
    stats = pstats.Stats(str(path))
    # get_stats_profile() keys rows by bare function name, merging every `<genexpr>`; the raw
    # table (untyped in typeshed) keeps file and line apart.
    table: dict[tuple[str, int, str], tuple[Any, ...]] = vars(stats)["stats"]
    # Time blocked in epoll is the event loop waiting for the lab, not work.
    idle = sum(row[2] for key, row in table.items() if "select.epoll" in key[2])
    busy = {key: row for key, row in table.items() if "select.epoll" not in key[2]}
    total = sum(row[2] for row in busy.values())
    lines = [
        f"cProfile of fleetfix on {hosts} hosts: {seconds:.1f} s wall, {total:.1f} s "
        f"profiled CPU, {idle:.1f} s waiting (cProfile inflates Python code ~2x); {path}",
        "  own s    cum s  function",
    ]
    top = sorted(busy.items(), key=lambda item: float(item[1][2]), reverse=True)
    for (filename, line, name), row in top[:15]:
        lines.append(f"  {row[2]:6.1f} {row[3]:8.1f}  {Path(filename).name}:{line}({name})")
    return lines


def parse_cost_lines(repeats: int = 20) -> list[str]:
    """parse_cost.py's figures: per probe over its fixture samples, nvidia_smi's two paths,
    and one host of the benchmark workload in ms."""
    costs = parse_costs(repeats=repeats)
    return [
        f"parse cost per probe (benchmarks/parse_cost.py; fixture samples, best of {repeats}):",
        *cost_table(probe_totals(costs)),
        "",
        *cost_table(nvidia_smi_paths(repeats=repeats)),
        "",
        "one host of the benchmark workload, on the lab's own outputs:",
        *workload_table(workload_costs(repeats=repeats)),
        "",
        *facts_cost_lines(repeats=repeats),
    ]


def run(options: Options, work: Path) -> None:
    usable = os.sched_getaffinity(0)
    _say(
        f"machine: {os.cpu_count()} CPUs ({len(usable)} usable), load {load_average():.1f}; "
        f"{_versions()}"
    )
    for line in bench_inventory(work, options.inventory_hosts):
        _say(line)
    lab = _start(options, work)
    try:
        inventory = work / "lab-inventory.ini"
        inventory.write_text(lab_inventory(lab), encoding="utf-8")
        base = Setup(lab, work, inventory, probe_commands(), venv_bin())
        tools = _tool_runners(options)
        for number, round_ in enumerate(rounds(options, usable)):
            _apply(round_, lab, usable)
            cpus = round_.plan.contenders if round_.plan else None
            setup = replace(base, cpus=cpus, label=round_.label)
            if options.warm_up and number == 0:
                nodes = options.run_nodes
                _say(f"warm-up (untimed): one command on {nodes} hosts: ...")
                _say(f"  {warm_up(setup, nodes):.1f} s")
            _report_round(setup, options, tools)
    finally:
        os.sched_setaffinity(0, usable)
        lab.stop()
    for line in parse_cost_lines():
        _say(line)


def _report_round(setup: Setup, options: Options, tools: list[tuple[str, Runner]]) -> None:
    cpus = len(setup.cpus) if setup.cpus else len(os.sched_getaffinity(0))
    results = _run_round(setup, plan_runs(options, tools, forced_workers(options, cpus)))
    first = _first_command(setup, options, results)
    profile = _profile(setup, options.hosts[0], options.profile) if options.profile else []
    _say("")
    _say(f"== {setup.label} ==")
    _say(measurement_table(results))
    _say("")
    for line in [*ratio_lines(results), *first, *profile]:
        _say(line)
    _say("")


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM unwinds like Ctrl-C, so `finally` stops the lab."""
    raise KeyboardInterrupt


def compile_bytecode() -> None:
    """fleetfix's modules compiled once, as a wheel install compiles them: an editable install
    under PYTHONDONTWRITEBYTECODE=1 (as on some CI machines) otherwise compiles every module
    edited since its last .pyc at each start, which is not fleetfix's cost."""
    package = Path(fleetfix.__file__).parent
    if not compileall.compile_dir(str(package), quiet=1):
        _say(f"could not compile {package}: fleetfix's start-up is measured with compiling")


def main(argv: list[str]) -> int:
    options = parse_options(argv)
    if not Path(TIME_BINARY).exists():
        _say(f"{TIME_BINARY} is missing: apt-get install time")
        return 1
    signal.signal(signal.SIGTERM, _terminate)
    compile_bytecode()
    # Short path: Ansible's ControlPath sockets live under it (108-byte socket path limit).
    work = Path(tempfile.mkdtemp(prefix="ffb-", dir="/tmp"))
    try:
        run(options, work)
    except KeyboardInterrupt:
        _say("interrupted; lab stopped")
        return 99
    except LabError as exc:
        _say(f"the lab failed: {exc}")
        return 1
    finally:
        if options.keep:
            _say(f"outputs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
