"""Run one contender as a whole process under `/usr/bin/time -v` and keep what it cost.

Wall time, user+system CPU and the largest single process's peak RSS come from GNU time (the
process and every child it waited for). While it runs, the runner samples the process tree's
memory and watches for the lab's first command (watch.py). The lab's CPU (its whole process
tree: server, SSH fronts, the shells they reaped) is read from /proc before and after, because
on one machine the lab's work competes with the controller's. Nothing here asserts a timing:
the caller prints the figures.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pinning import taskset_prefix
from proctree import tree_cpu_s
from watch import SAMPLE_S, FirstOpen, TreeSampler

TIME_BINARY = "/usr/bin/time"
RECAP_LINE = re.compile(
    r"^\S+\s+:\s+ok=(?P<ok>\d+)\s+changed=\d+\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)"
)


@dataclass(frozen=True, slots=True)
class TimeReport:
    """The figures GNU time printed for one process tree."""

    wall_s: float
    user_s: float
    system_s: float
    max_rss_kb: int
    exit_status: int


@dataclass(frozen=True, slots=True)
class RunCost:
    """GNU time's report, the lab's CPU, the machine's busy CPU and what the runner watched."""

    time: TimeReport
    lab_cpu_s: float
    machine_cpu_s: float
    tree_rss_kb: int = 0
    first_command_s: float | None = None
    tree_pss_kb: int = 0
    tree_cpu_seen_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Measurement:
    """One contender's run: what it cost and whether it did the work."""

    tool: str
    hosts: int
    cost: RunCost
    outcome: str = ""
    extra_cpu_s: float = 0.0
    extra_rss_kb: int = 0
    journal_bytes: int | None = None

    @property
    def time(self) -> TimeReport:
        return self.cost.time

    @property
    def lab_cpu_s(self) -> float:
        """CPU of the lab's whole process tree (server, SSH fronts, node shells) in the run."""
        return self.cost.lab_cpu_s

    @property
    def busy_percent(self) -> float:
        """How busy the whole machine was during the run (100 = every CPU all the time)."""
        return 100 * self.cost.machine_cpu_s / (self.time.wall_s * (os.cpu_count() or 1))

    @property
    def other_cpu_s(self) -> float:
        """Busy CPU on the machine that was neither the contender nor the lab (interference)."""
        return self.cost.machine_cpu_s - self.cpu_s - self.lab_cpu_s

    @property
    def cpu_s(self) -> float:
        """Controller CPU: the process tree, plus helpers it left behind (Ansible's ssh masters).

        The tree's is GNU time's, or the sampled sum of its processes' own CPU if that is larger
        (a child nobody waited for is invisible to GNU time).
        """
        timed = self.time.user_s + self.time.system_s
        return max(timed, self.cost.tree_cpu_seen_s) + self.extra_cpu_s

    @property
    def unseen_by_time_s(self) -> float:
        """CPU the samples saw that GNU time did not (0 when every child was waited for)."""
        return max(0.0, self.cost.tree_cpu_seen_s - self.time.user_s - self.time.system_s)

    @property
    def cpu_ms_per_host(self) -> float:
        return self.cpu_s * 1000 / self.hosts

    @property
    def per_100_hosts_s(self) -> float:
        return self.time.wall_s * 100 / self.hosts

    @property
    def tree_rss_kb(self) -> int:
        """Peak memory of the whole tree (at least GNU time's largest process), plus helpers."""
        return max(self.cost.tree_rss_kb, self.time.max_rss_kb) + self.extra_rss_kb

    @property
    def tree_pss_kb(self) -> int:
        """Peak sampled proportional set size of the tree (shared pages split), plus helpers."""
        return self.cost.tree_pss_kb + self.extra_rss_kb

    @property
    def rss_per_host_kb(self) -> float:
        return self.tree_rss_kb / self.hosts

    @property
    def journal_per_host_kb(self) -> float | None:
        return None if self.journal_bytes is None else self.journal_bytes / 1024 / self.hosts


def load_average() -> float:
    """The 1-minute load average: other work on the machine skews every figure."""
    with open("/proc/loadavg", encoding="ascii") as handle:
        return float(handle.read().split()[0])


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all CPUs, idle and iowait excluded)."""
    with open("/proc/stat", encoding="ascii") as handle:
        ticks = [int(v) for v in handle.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: steal is the hypervisor's, not ours,
    # and guest time is already inside user time.
    user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _clock(text: str) -> float:
    """GNU time's `h:mm:ss` or `m:ss.ss` as seconds."""
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def parse_time_report(text: str) -> TimeReport:
    """Read `/usr/bin/time -v` output; raises ValueError if a figure is missing."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().rpartition(": ")
        if sep:
            found[key] = value.strip()
    try:
        return TimeReport(
            wall_s=_clock(found["Elapsed (wall clock) time (h:mm:ss or m:ss)"]),
            user_s=float(found["User time (seconds)"]),
            system_s=float(found["System time (seconds)"]),
            max_rss_kb=int(found["Maximum resident set size (kbytes)"]),
            exit_status=int(found["Exit status"]),
        )
    except KeyError as exc:
        raise ValueError(f"GNU time output lacks {exc}: {text[-300:]!r}") from exc


def recap_outcome(text: str, hosts: int, tasks: int) -> str:
    """Summarise a PLAY RECAP (fleetfix and Ansible print the same line format)."""
    ok = failed = unreachable = seen = 0
    for line in text.splitlines():
        match = RECAP_LINE.match(line)
        if match:
            seen += 1
            ok += int(match["ok"])
            failed += int(match["failed"])
            unreachable += int(match["unreachable"])
    verdict = "ok" if (seen, ok, failed, unreachable) == (hosts, hosts * tasks, 0, 0) else "CHECK"
    return f"{verdict}: {ok}/{hosts * tasks} tasks ok, {failed} failed, {unreachable} unreachable"


@dataclass(frozen=True, slots=True)
class Invocation:
    """A command line to time, its environment, its cores and where its output goes.

    `first_open`: a file whose first open the runner times from the start (the lab's bash_env).
    """

    argv: Sequence[str]
    stdout: Path
    env: Mapping[str, str] | None = None
    timeout: float = 4 * 3600.0  # a 10,000-host run on a one-core lab takes over half an hour
    cpus: frozenset[int] | None = None
    first_open: Path | None = None


def run_timed(invocation: Invocation, lab_pid: int) -> RunCost:
    """Run under GNU time; returns its report, the lab's and machine's CPU and what was watched.

    The child gets its own session so that a timeout or Ctrl-C ends exactly its process group
    (by id) and nothing else.
    """
    report_path = invocation.stdout.with_suffix(".time")
    argv = [TIME_BINARY, "-v", "-o", str(report_path), *invocation.argv]
    lab_before, machine_before = tree_cpu_s(lab_pid), machine_busy_s()
    watched = _watched_run(invocation, argv, stop_at_first_command=False)
    lab_used, machine_used = tree_cpu_s(lab_pid) - lab_before, machine_busy_s() - machine_before
    report = parse_time_report(report_path.read_text(encoding="utf-8"))
    return RunCost(
        report,
        lab_used,
        machine_used,
        watched.tree_rss_kb,
        watched.first_command_s,
        watched.tree_pss_kb,
        watched.tree_cpu_seen_s,
    )


def time_to_first_command(invocation: Invocation) -> float | None:
    """Start the command, and end it as soon as the lab opens `first_open`; seconds, or None."""
    return _watched_run(invocation, invocation.argv, stop_at_first_command=True).first_command_s


@dataclass(frozen=True, slots=True)
class _Watched:
    tree_rss_kb: int
    first_command_s: float | None
    tree_pss_kb: int
    tree_cpu_seen_s: float


def _watched_run(
    invocation: Invocation, argv: Sequence[str], *, stop_at_first_command: bool
) -> _Watched:
    watch = FirstOpen(invocation.first_open) if invocation.first_open else None
    try:
        with open(invocation.stdout, "wb") as out:
            started = time.monotonic()
            process = subprocess.Popen(
                [*taskset_prefix(invocation.cpus), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(invocation.env) if invocation.env is not None else None,
                start_new_session=True,
            )
            try:
                sampled = _wait(process, watch, started + invocation.timeout, stop_at_first_command)
            finally:
                _end_group(process)
    finally:
        if watch is not None:
            watch.close()
    opened = watch.opened_at if watch is not None else None
    first = None if opened is None else opened - started
    return _Watched(sampled.peak_kb, first, sampled.peak_pss_kb, sampled.cpu_seen_s)


def _wait(
    process: subprocess.Popen[bytes], watch: FirstOpen | None, deadline: float, stop_early: bool
) -> TreeSampler:
    """Sample the tree until the process ends (or the watched open comes, if `stop_early`)."""
    sampled = TreeSampler(process.pid)
    while process.poll() is None:
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(process.args, deadline)
        if watch is not None and not watch.check():
            select.select([watch], [], [], SAMPLE_S)
            if watch.check() and stop_early:
                break
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(SAMPLE_S)
        sampled.sample()
    return sampled


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """If the timed child is still running (timeout, Ctrl-C), end its process group."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
