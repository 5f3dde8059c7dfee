"""Who a GPU process belongs to: its user, command line, start time and Slurm job (gpu_processes).

The gpu_processes probe prints two more sections after its compute-apps and fuser ones:

    ### fleetfix owners
    pid 48213 alice Mon Dec  7 15:31:58 2026 python3 train.py --epochs 90
    cgroup 48213 0::/system.slice/slurmstepd.scope/job_48213/step_0/user/task_0
    ### fleetfix end rc=0
    ### fleetfix slurm-jobs
    48213
    ### fleetfix end rc=0

`pid` lines are `ps -ww -o pid=,user:32=,lstart=,args=` (-ww: whole command lines, whatever
$COLUMNS says; the start time is ps's `lstart`, five words, what `kill_orphans` compares again
right before it signals: a PID a new process took in between starts at another time).
`cgroup` lines are `ps -ww -o pid=,cgroup=`: the entries of /proc/PID/cgroup that are not the
root ("/"), joined with commas (procps). The Slurm job is read from the path Slurm gives its
processes:

- cgroup v1 (Slurm's cgroup/v1 plugin, src/plugins/cgroup/v1/xcgroup.c):
  `/slurm/uid_<uid>/job_<job>/step_<step>/task_<n>` in every controller's hierarchy, or
  `/slurm_<nodename>/...` under multiple-slurmd;
- cgroup v2 (https://slurm.schedmd.com/cgroup_v2.html, "slurmd startup"):
  `/system.slice/slurmstepd.scope/job_<job>/step_<step>/user/task_<n>` (steps `batch`,
  `extern`, `interactive` or a number).

A process in neither has no job (None). The second section lists the jobs Slurm has on the node
(`squeue -h -w NODE -o %A`, every state squeue shows: running, completing, suspended).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from fleetfix.errors import ProbeParseError

NAME = "gpu_processes"
_PID_LINE = re.compile(
    r"^pid\s+(?P<pid>\d+)\s+(?P<user>\S+)\s+"
    r"(?P<started>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})"
    r"(?:\s+(?P<args>.*?))?\s*$"
)
_CGROUP_LINE = re.compile(r"^cgroup\s+(?P<pid>\d+)\s+(?P<cgroup>\S.*?)\s*$")
_ENTRY_START = re.compile(r",(?=\d+:)")
"""procps joins a process's cgroup entries with commas; each entry starts `ID:`."""
_SLURM_JOB = re.compile(
    r"(?:^|:)/slurm(?:_[^/]+)?/uid_\d+/job_(?P<v1>\d+)(?:/|$)"
    # v2; `<node>_slurmstepd.scope` where Slurm is built for several daemons per node
    # (Debian and Ubuntu's packages: plazonic/cgroup_exporter#8, treydock/cgroup_exporter#30)
    r"|/(?:[^/]+_)?slurmstepd\.scope/job_(?P<v2>\d+)(?:/|$)"
)
_JOB_ID = re.compile(r"^\s*(\d+)\s*$")
OWNERS_OK_RC = (0, 1)
"""ps exits 1 when none of the PIDs is there any more: they exited, not an error."""


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    """One process as ps saw it."""

    pid: int
    user: str
    started: str
    """ps's `lstart` (`Mon Dec  7 15:31:58 2026`): the same PID later with another start
    time is another process."""
    command_line: str
    cgroup: str | None = None
    job_id: int | None = None


def job_of(cgroup: str | None) -> int | None:
    """The Slurm job a cgroup path (or a whole /proc/PID/cgroup, lines or ps's commas) puts a
    process in; None outside Slurm's hierarchy."""
    if not cgroup:
        return None
    for entry in _entries(cgroup):
        match = _SLURM_JOB.search(entry)
        if match is not None:
            return int(match["v1"] or match["v2"])
    return None


def _entries(cgroup: str) -> list[str]:
    return [part for line in cgroup.splitlines() for part in _ENTRY_START.split(line) if part]


def read_owners(lines: Iterable[tuple[int, str]], text: str) -> tuple[ProcessOwner, ...]:
    """The owners section's `pid` and `cgroup` lines (numbered), by PID.

    Raises:
        ProbeParseError: a line that is neither, or a cgroup for a PID ps did not list."""
    found: dict[int, ProcessOwner] = {}
    cgroups: dict[int, str] = {}
    for number, line in lines:
        if not line.strip() or line.strip() == "-":
            continue
        owner = _PID_LINE.match(line.strip())
        group = _CGROUP_LINE.match(line.strip()) if owner is None else None
        if owner is not None:
            pid = int(owner["pid"])
            found[pid] = ProcessOwner(pid, owner["user"], owner["started"], owner["args"] or "")
        elif group is not None:
            value = group["cgroup"]
            if value != "-":
                cgroups[int(group["pid"])] = value
        else:
            raise ProbeParseError(
                NAME, "not a 'pid' or 'cgroup' line of the owners section", text, line=number
            )
    return tuple(_with_cgroup(found[pid], cgroups.get(pid)) for pid in sorted(found))


def _with_cgroup(owner: ProcessOwner, cgroup: str | None) -> ProcessOwner:
    return ProcessOwner(
        owner.pid, owner.user, owner.started, owner.command_line, cgroup, job_of(cgroup)
    )


def read_jobs(lines: Iterable[tuple[int, str]], text: str) -> tuple[int, ...]:
    """squeue's job ids, one a line.

    Raises:
        ProbeParseError: a line that is not a job id."""
    jobs: set[int] = set()
    for number, line in lines:
        if not line.strip():
            continue
        match = _JOB_ID.match(line)
        if match is None:
            raise ProbeParseError(NAME, "not a job id in the slurm-jobs section", text, line=number)
        jobs.add(int(match[1]))
    return tuple(sorted(jobs))
