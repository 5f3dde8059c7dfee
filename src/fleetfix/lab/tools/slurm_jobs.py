"""Emulated `scontrol show job` and `sacct -j`: the lab's running jobs, as the real tools print
them (layout of a Slurm 20.11+ multi-node job: tests/fixtures/slurm-job/, the TGCC capture).

A job the controller does not have is `slurm_load_jobs error: Invalid job id specified` (exit 1)
from scontrol, and no row from sacct (the lab keeps no accounting of finished jobs).
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetfix.lab.slurm_state import SlurmJob
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines
from fleetfix.lab.tools.slurm_base import CPUS, MEMORY_MB, compress_hostlist, stamp

INVALID = "slurm_load_jobs error: Invalid job id specified"
SACCT_FIELDS = ("JobID", "JobName", "User", "State", "ExitCode", "Start", "End", "NodeList")


def _job(ctx: ToolContext, text: str) -> SlurmJob | None:
    job_id = text.split("=", 1)[-1]
    return ctx.fleet.slurm.jobs.get(int(job_id)) if job_id.isdigit() else None


def show_job(ctx: ToolContext, args: list[str], oneliner: bool) -> ToolReply:
    """`scontrol show job ID` (also `show job=ID`, `show jobid ID`)."""
    target = args[0] if args else ""
    job = _job(ctx, target)
    if job is None:
        return fail(INVALID)
    rows = job_record(ctx, job)
    if oneliner:
        return ToolReply(stdout=" ".join(row.strip() for row in rows if row.strip()) + "\n")
    return ToolReply(stdout=lines(*rows, ""))


def _state(job: SlurmJob) -> str:
    return "RUNNING" if job.epilog_until is None else "COMPLETING"


def job_record(ctx: ToolContext, job: SlurmJob) -> list[str]:
    nodes = job.nodes
    gpus = sum(ctx.fleet.nodes[n].spec.gpus for n in nodes)
    elapsed = int(ctx.now - job.started)
    hostlist = compress_hostlist(list(nodes))
    return [
        f"JobId={job.job_id} JobName={job.name}",
        f"   UserId={job.user}(1001) GroupId={job.user}(1001) MCS_label=N/A",
        "   Priority=4294901758 Nice=0 Account=research QOS=normal",
        f"   JobState={_state(job)} Reason=None Dependency=(null)",
        "   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0",
        f"   RunTime={elapsed // 3600:02d}:{elapsed % 3600 // 60:02d}:{elapsed % 60:02d} "
        "TimeLimit=2-00:00:00 TimeMin=N/A",
        f"   SubmitTime={stamp(job.started - 60)} EligibleTime={stamp(job.started - 60)}",
        f"   AccrueTime={stamp(job.started - 60)}",
        f"   StartTime={stamp(job.started)} EndTime={stamp(job.started + 172800)} Deadline=N/A",
        f"   SuspendTime=None SecsPreSuspend=0 LastSchedEval={stamp(job.started)} Scheduler=Main",
        f"   Partition={ctx.fleet.slurm.partition} AllocNode:Sid=login01:4242",
        "   ReqNodeList=(null) ExcNodeList=(null)",
        f"   NodeList={hostlist}",
        f"   BatchHost={job.node}",
        f"   NumNodes={len(nodes)} NumCPUs={CPUS * len(nodes)} NumTasks={gpus} CPUs/Task=1 "
        "ReqB:S:C:T=0:0:*:*",
        f"   TRES=cpu={CPUS * len(nodes)},mem={MEMORY_MB * len(nodes)}M,node={len(nodes)},"
        f"billing={CPUS * len(nodes)},gres/gpu={gpus}",
        "   Socks/Node=* NtasksPerN:B:S:C=0:0:*:1 CoreSpec=*",
        "   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0",
        "   Features=(null) DelayBoot=00:00:00",
        "   OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null)",
        f"   Command=/home/{job.user}/{job.name}",
        f"   WorkDir=/home/{job.user}",
        f"   StdErr=/home/{job.user}/slurm-{job.job_id}.out",
        "   StdIn=/dev/null",
        f"   StdOut=/home/{job.user}/slurm-{job.job_id}.out",
        "   Power=",
    ]


def sacct(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    """`sacct -j ID -X -P -n -o FIELDS` for a running job (the fields fleetfix asks for)."""
    args = list(argv)
    job = None
    for index, arg in enumerate(args):
        if arg in ("-j", "--jobs") and index + 1 < len(args):
            job = _job(ctx, args[index + 1])
        elif arg.startswith("--jobs="):
            job = _job(ctx, arg)
    if job is None:
        return ToolReply()
    values = {
        "JobID": str(job.job_id),
        "JobName": job.name,
        "User": job.user,
        "State": _state(job),
        "ExitCode": "0:0",
        "Start": stamp(job.started),
        "End": "Unknown",
        "NodeList": compress_hostlist(list(job.nodes)),
    }
    return ToolReply(stdout="|".join(values[f] for f in SACCT_FIELDS) + "\n")
