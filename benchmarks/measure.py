"""Run one contender as a whole process under `/usr/bin/time -v` and keep what it cost.

Wall time, peak RSS and user+system CPU come from GNU time (the process and every child it
waited for). The lab server's CPU (itself plus the shells it reaped) is read from /proc before
and after, because on one machine the lab's work competes with the controller's for the same
cores. Nothing here asserts a timing: the caller prints the figures.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TIME_BINARY = "/usr/bin/time"
RECAP_LINE = re.compile(
    r"^\S+\s+:\s+ok=(?P<ok>\d+)\s+changed=\d+\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)"
)


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Seconds of CPU a process used itself and through the children it reaped."""

    own: float
    children: float

    @property
    def total(self) -> float:
        return self.own + self.children

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.own - other.own, self.children - other.children)


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
    """GNU time's report, the lab's CPU and the whole machine's busy CPU during one run."""

    time: TimeReport
    lab_cpu: CpuTimes
    machine_cpu_s: float


@dataclass(frozen=True, slots=True)
class Measurement:
    """One contender's run: what it cost and whether it did the work."""

    tool: str
    hosts: int
    cost: RunCost
    outcome: str = ""
    extra_cpu_s: float = 0.0

    @property
    def time(self) -> TimeReport:
        return self.cost.time

    @property
    def lab_cpu(self) -> CpuTimes:
        return self.cost.lab_cpu

    @property
    def busy_percent(self) -> float:
        """How busy the whole machine was during the run (100 = every CPU all the time)."""
        return 100 * self.cost.machine_cpu_s / (self.time.wall_s * (os.cpu_count() or 1))

    @property
    def quiet_wall_s(self) -> float:
        """Wall time this run would take with nobody else on the machine, if CPU-bound.

        On the 2-core dev box the lab and the contender saturate the CPUs (busy % near 100), so
        wall ~ (contender CPU + lab CPU) / CPUs; other processes' CPU is left out.
        """
        return (self.cpu_s + self.lab_cpu.total) / (os.cpu_count() or 1)

    @property
    def other_cpu_s(self) -> float:
        """Busy CPU on the machine that was neither the contender nor the lab (interference)."""
        return self.cost.machine_cpu_s - self.cpu_s - self.lab_cpu.total

    @property
    def cpu_s(self) -> float:
        """Controller CPU: the process tree, plus helpers it left behind (Ansible's ssh masters)."""
        return self.time.user_s + self.time.system_s + self.extra_cpu_s

    @property
    def per_100_hosts_s(self) -> float:
        return self.time.wall_s * 100 / self.hosts

    @property
    def rss_per_host_kb(self) -> float:
        return self.time.max_rss_kb / self.hosts


def process_cpu(pid: int) -> CpuTimes:
    """utime+stime and cutime+cstime of `pid` from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return CpuTimes((utime + stime) / tick, (cutime + cstime) / tick)


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
    """A command line to time, its environment and where its output goes."""

    argv: Sequence[str]
    stdout: Path
    env: Mapping[str, str] | None = None
    timeout: float = 3600.0


def run_timed(invocation: Invocation, lab_pid: int) -> RunCost:
    """Run under GNU time; returns its report and the lab's and machine's CPU meanwhile.

    The child gets its own session so that a timeout or Ctrl-C ends exactly its process group
    (by id) and nothing else.
    """
    report_path = invocation.stdout.with_suffix(".time")
    argv = [TIME_BINARY, "-v", "-o", str(report_path), *invocation.argv]
    lab_before, machine_before = process_cpu(lab_pid), machine_busy_s()
    with open(invocation.stdout, "wb") as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(invocation.env) if invocation.env is not None else None,
            start_new_session=True,
        )
        try:
            process.wait(invocation.timeout)
        finally:
            _end_group(process)
    lab_used, machine_used = process_cpu(lab_pid) - lab_before, machine_busy_s() - machine_before
    report = parse_time_report(report_path.read_text(encoding="utf-8"))
    return RunCost(report, lab_used, machine_used)


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
