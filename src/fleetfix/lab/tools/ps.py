"""Emulated procps `ps [-ww] -o FORMAT -p PIDS`: a node's GPU processes and NVIDIA daemons as
the node would show them, never the machine's own processes.

A lab GPU process is a real placeholder (`sleep` under the process's name) that the lab started,
so its user, cgroup and command line on the machine are the lab's, not the node's. This answers
from the node's state instead: its user (its own, else its job's, else root), its start time,
its command line (name and `args`), and its cgroup in Slurm's cgroup v2 layout
(`0::/system.slice/slurmstepd.scope/job_J/step_0/user/task_0`,
https://slurm.schedmd.com/cgroup_v2.html) when it is in a job, else a login session's. Its
`kill` is the real one (the shim runs bash's builtin on the placeholder), so what `ps` shows
and what `kill` does agree. PIDs the node does not have are left out, as ps leaves out PIDs
that do not exist; exit 1 when none is listed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines
from fleetfix.lab.tools.node import daemon_holders

_FIELD = re.compile(r"^(?P<name>[a-z]+)(?::(?P<width>\d+))?(?P<blank>=)?$")
_HEADERS = {
    "pid": "PID",
    "user": "USER",
    "lstart": "STARTED",
    "args": "COMMAND",
    "cmd": "CMD",
    "command": "COMMAND",
    "comm": "COMMAND",
    "cgroup": "CGROUP",
    "stat": "STAT",
}
USAGE = "ps: the fleetfix lab emulates only `ps -o FORMAT -p PIDS` (fields: " + ", ".join(_HEADERS)


@dataclass(frozen=True, slots=True)
class NodeProcess:
    """One process of the node as ps shows it."""

    pid: int
    user: str
    started: float
    args: str
    cgroup: str
    comm: str


def ps(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    fields, pids = _arguments(argv)
    if fields is None or pids is None:
        return fail(USAGE + ")")
    processes = {process.pid: process for process in node_processes(ctx)}
    listed = [processes[pid] for pid in dict.fromkeys(pids) if pid in processes]
    rows = [_row(fields, process) for process in sorted(listed, key=lambda p: p.pid)]
    if any(not blank for _, _, blank in fields):
        rows.insert(0, _row(fields, None))
    return ToolReply(stdout=lines(*rows), rc=0 if listed else 1)


def node_processes(ctx: ToolContext) -> list[NodeProcess]:
    """The node's GPU processes and the NVIDIA daemons that run on it."""
    node, jobs = ctx.node, ctx.fleet.slurm.jobs
    found = [
        NodeProcess(
            pid=daemon.pid,
            user="root",
            started=node.boot.started,
            args=f"/usr/bin/{daemon.command}",
            cgroup=f"0::/system.slice/{daemon.service}.service",
            comm=daemon.command[:15],
        )
        for daemon in daemon_holders(node)
    ]
    for process in node.processes:
        job = jobs.get(process.job_id) if process.job_id is not None else None
        user = process.user or (job.user if job is not None else "root")
        found.append(
            NodeProcess(
                pid=process.pid,
                user=user,
                started=process.started,
                args=f"{process.name} {process.args}".strip(),
                cgroup=_cgroup(process.job_id),
                comm=process.name[:15],
            )
        )
    return found


def _cgroup(job_id: int | None) -> str:
    if job_id is None:
        return "0::/user.slice/user-0.slice/session-1.scope"
    return f"0::/system.slice/slurmstepd.scope/job_{job_id}/step_0/user/task_0"


_Field = tuple[str, int | None, bool]


def _arguments(argv: Sequence[str]) -> tuple[list[_Field] | None, list[int] | None]:
    """`-o`/`--format` fields and `-p`/`--pid` PIDs; None for anything else."""
    fields: list[_Field] = []
    pids: list[int] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-w", "-ww"):  # wide output: the lab never cuts a line
            continue
        key, value = _option(arg, args)
        if key in ("-o", "--format", "-O") and value is not None:
            parsed = _fields(value)
            if parsed is None:
                return None, None
            fields.extend(parsed)
        elif key in ("-p", "--pid", "-q") and value is not None:
            words = value.replace(",", " ").split()
            if not all(word.isdigit() for word in words):
                return None, None
            pids.extend(int(word) for word in words)
        else:
            return None, None
    return (fields, pids) if fields and pids else (None, None)


def _option(arg: str, rest: list[str]) -> tuple[str, str | None]:
    if arg.startswith("--") and "=" in arg:
        key, _, value = arg.partition("=")
        return key, value
    if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
        return arg[:2], arg[2:]
    return arg, rest.pop(0) if rest else None


def _fields(value: str) -> list[_Field] | None:
    """`pid=,user:32=,lstart=,args=`: each field's name, width and whether its header is
    blank (a trailing `=` blanks it; the last field takes the rest of the words as header)."""
    found: list[_Field] = []
    for word in value.split(","):
        match = _FIELD.match(word.strip())
        if match is None or match["name"] not in _HEADERS:
            return None
        width = int(match["width"]) if match["width"] else None
        found.append((match["name"], width, match["blank"] is not None))
    return found


def _row(fields: list[_Field], process: NodeProcess | None) -> str:
    cells = []
    for index, (name, width, _) in enumerate(fields):
        last = index == len(fields) - 1
        text = _HEADERS[name] if process is None else _value(name, process)
        cells.append(_aligned(name, text, width, last))
    return " ".join(cells).rstrip()


def _value(name: str, process: NodeProcess) -> str:
    if name == "pid":
        return str(process.pid)
    if name == "user":
        return process.user
    if name == "lstart":
        # procps: strftime "%a %b %e %H:%M:%S %Y" in the node's zone (UTC)
        return time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(process.started))
    if name == "cgroup":
        return process.cgroup
    if name == "stat":
        return "Sl"
    if name == "comm":
        return process.comm
    return process.args


def _aligned(name: str, text: str, width: int | None, last: bool) -> str:
    if name == "pid":
        return text.rjust(width or 7)
    if last:
        return text
    return text.ljust(width or (24 if name == "lstart" else 8))
