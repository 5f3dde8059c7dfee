"""Emulated Slurm-managed reboots: `scontrol reboot [ASAP] [nextstate=RESUME|DOWN] [reason=R] N`.

Follows `man scontrol` (24.05): the node gets REBOOT_REQUESTED and, once no job holds it, its
RebootProgram runs (REBOOT_ISSUED; the lab reboots the node as `reboot` would). ASAP also
drains it (no new job starts) and, without a nextstate, undrains it after the reboot (Slurm's
nextstate=UNDRAIN). When slurmd registers again: RESUME returns the node to service and clears
its reason and drain; DOWN leaves it DOWN; with neither, the node is as it was (a drain and its
reason stay). The reason is the given one, else "Reboot ASAP" (ASAP) or "reboot requested"
when the node has none; " : reboot issued" and, for DOWN, " : reboot complete" are appended as
slurmctld appends them. A node a reboot is already pending for ignores the request, as Slurm
does. The lab issues a requested reboot whenever someone runs scontrol and the node's job has
ended (slurmctld does it on its own; the lab, like its epilogs, when someone looks).

`nextstate` accepts only RESUME and DOWN (scontrol's own list); anything else is refused with
the lab's wording (no capture of scontrol's message was available).
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetfix.lab.slurm_state import SlurmNode
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail
from fleetfix.lab.tools.slurm_base import expand_hostlist

NEXT_STATES = ("RESUME", "DOWN")
ISSUED = " : reboot issued"
COMPLETE = " : reboot complete"


def reboot_command(ctx: ToolContext, args: Sequence[str]) -> ToolReply:
    """`scontrol reboot ...` (args after the word `reboot`)."""
    options = _options(args, list(ctx.fleet.nodes))
    if isinstance(options, str):
        return fail(options)
    asap, next_state, reason, names = options
    unknown = [n for n in names if n not in ctx.fleet.nodes]
    if not names or unknown:
        return fail(f"scontrol_reboot_nodes error: Invalid node name specified: {unknown or ''}")
    for name in names:
        _request(ctx, name, asap=asap, next_state=next_state, reason=reason)
    issue_due_reboots(ctx)
    return ToolReply()


def _options(
    args: Sequence[str], every_node: list[str]
) -> tuple[bool, str | None, str | None, list[str]] | str:
    asap, next_state, reason, names = False, None, None, []
    for arg in args:
        key, eq, value = arg.partition("=")
        if arg.upper() == "ASAP":
            asap = True
        elif eq and key.lower() == "nextstate":
            if value.upper() not in NEXT_STATES:
                return f"Invalid nextstate {value!r}: valid values are RESUME and DOWN"
            next_state = value.upper()
        elif eq and key.lower() == "reason":
            reason = value
        elif eq:
            return f"Invalid input: {arg}\nRequest aborted"
        else:
            names.extend(every_node if arg.upper() == "ALL" else expand_hostlist(arg))
    return asap, next_state, reason, names


def _request(
    ctx: ToolContext, name: str, *, asap: bool, next_state: str | None, reason: str | None
) -> None:
    record = ctx.fleet.slurm.nodes[name]
    if record.reboot is not None or ctx.fleet.nodes[name].status != "up":
        return  # Slurm ignores a request for a node already rebooting
    record.reboot = "requested"
    record.next_state = next_state or ("UNDRAIN" if asap else None)
    record.drain = record.drain or asap
    default = "Reboot ASAP" if asap else ("reboot requested" if not record.reason else None)
    if reason or default:
        record.reason = reason or default
        record.reason_user, record.reason_time = ctx.user, ctx.now


def issue_due_reboots(ctx: ToolContext) -> None:
    """Run the RebootProgram of every requested node no job holds any more."""
    slurm = ctx.fleet.slurm
    for name, record in slurm.nodes.items():
        if record.reboot != "requested" or record.job_id is not None:
            continue
        record.reboot = "issued"
        record.reason = (record.reason or "reboot requested") + ISSUED
        ctx.hooks.reboot(ctx.fleet.nodes[name])


def slurmd_registered(record: SlurmNode) -> None:
    """slurmd registered after the reboot Slurm issued: apply the node's nextstate."""
    if record.reboot != "issued":
        return
    if record.next_state in ("RESUME", "UNDRAIN"):
        record.drain = False
        record.base = "IDLE" if record.base == "DOWN" else record.base
        record.reason = record.reason_user = None
        record.reason_time = None
    elif record.next_state == "DOWN":
        record.base, record.drain = "DOWN", False
        record.reason = (record.reason or "") + COMPLETE
    record.reboot = record.next_state = None
