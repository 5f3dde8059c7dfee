"""Admission under the caps as the whole fleet stands, not as this run sees it.

A run's own count of who is out (engine/safety.py) misses what it did not do: nodes a human
drained, nodes down, nodes another controller took out, nodes a dead run left drained. Before a
host's first disruptive action, the scheduler is asked about every node sharing a capped domain
with it (`sinfo` on the host itself: Slurm's view is the cluster's, whichever controller asks),
and the journal's fleet transaction counts every controller's hosts out (journal/fleet.py).
A node out for any reason counts against its domain's cap; fleetfix still never touches a
node a human drained (engine/gates.py ownership). A scheduler that cannot be read holds the
action: a cap that cannot be evaluated is not assumed to have room.

Controllers that share no journal meet on the nodes instead: a slot on each capped domain's
cap node (engine/cap_slots.py).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from fleetfix.engine.cap_slots import claim, clear

if TYPE_CHECKING:
    from fleetfix.engine.hoststep import HostStep

SINFO = "sinfo -h -N -n {nodes} -o '%N|%T'"
"""Node and long state, one line per node (a node in two partitions shows twice)."""
OUT_WORDS = (
    *("drain", "drng", "down", "fail", "maint", "unk", "futur", "futr"),
    *("boot", "pow", "npc", "not_resp", "inval", "inval_reg"),
)
"""Slurm state words (long %T or short %t) of a node that runs no new jobs: out of service,
whoever did it."""
OUT_FLAGS = "*~#%!@$^"
"""sinfo's state suffixes: not responding, powered off, powering up/down, power down pending,
reboot requested, maintenance reservation, reboot issued."""
NO_SCHEDULER = 127


async def admit(hs: HostStep) -> str | None:
    """Safety's admission for this host, with the scheduler's view of its capped domains and,
    across controllers that share no journal, a slot on each domain's cap node."""
    safety, host = hs.ctx.safety, hs.state.name
    members = [] if host in safety.out else safety.capped_members(host)
    if not members:
        return safety.admit(host, dry=hs.dry)
    found = await _scheduler_out(hs, members)
    if isinstance(found, str):
        return f"held: {found}"
    held = safety.blocked(host, found)
    if held is not None or hs.dry:
        return held or safety.admit(host, dry=True, scheduler_out=found)
    slots = await claim(hs, safety.domain_caps(host, found))
    if isinstance(slots, str):
        return f"held: {slots}"
    held = safety.admit(host, dry=False, scheduler_out=found)
    if held is not None:
        await clear(hs.ctx, slots)
        return held
    hs.ctx.cap_slots.extend(slots)
    return None


async def _scheduler_out(hs: HostStep, members: list[str]) -> frozenset[str] | str:
    """The members Slurm has out of service; a reason string when Slurm cannot be read. A node
    without Slurm's client (exit 127) has no scheduler to ask: nothing is out by it."""
    command = SINFO.format(nodes=shlex.quote(",".join(members)))
    result = await hs.command(command, read_only=True)
    if result.rc == NO_SCHEDULER:
        return frozenset()
    if not result.ok:
        said = (result.stderr.strip() or result.stdout.strip())[:200]
        return (
            "cannot read Slurm's state of the nodes sharing its capped domains, so the caps "
            f"cannot be checked: {said or f'exit status {result.rc}'}"
        )
    return parse_out(result.stdout, members)


def parse_out(output: str, members: list[str]) -> frozenset[str]:
    """`NODE|state` lines -> the members whose state says out of service."""
    wanted = set(members)
    out: set[str] = set()
    for line in output.splitlines():
        name, _, state = line.strip().partition("|")
        lowered = state.lower()
        flagged = lowered[-1:] in OUT_FLAGS if lowered else False
        if name in wanted and (flagged or any(word in lowered for word in OUT_WORDS)):
            out.add(name)
    return frozenset(out)
