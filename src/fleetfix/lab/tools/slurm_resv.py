"""Emulated Slurm reservations: `scontrol create|delete|show reservation`.

Follows Slurm 24.05 (src/scontrol/create_res.c, info_res.c, scontrol.c `_delete_it`,
src/api/reservation_info.c): `create` prints `Reservation created: NAME`; a refusal prints
`Error creating the reservation: <Slurm's error text>` and exits 1 (nodes with running jobs
without `Flags=IGNORE_JOBS`, a duplicate name, nodes another reservation holds unless one of
them has MAINT or OVERLAP, an unknown node, a caller who is not root). `delete` is silent, or
`delete_reservation ReservationName=N: Requested reservation is invalid`. `show` prints each
record in the 24.05 layout (no `Watts=`, which 24.05 dropped), `No reservations in the system`
or `Reservation N not found` (exit 1).

While a reservation is active its nodes show RESERVED (and MAINTENANCE for a MAINT one) in
`scontrol show node` and sinfo, and Slurm starts no job there that did not ask for it
(lab/changes.py). A reservation ends at its end time; `Duration=UNLIMITED` lasts a year, as
in slurmctld.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from fleetfix.lab.slurm_state import Reservation, SlurmState
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail, lines
from fleetfix.lab.tools.slurm_base import CORES, CPUS, compress_hostlist, expand_hostlist, stamp

YEAR = 365 * 86400.0
"""What slurmctld makes of an UNLIMITED/INFINITE duration."""
FLAG_ORDER = (
    "MAINT",
    "NO_MAINT",
    "FLEX",
    "OVERLAP",
    "IGNORE_JOBS",
    "HOURLY",
    "DAILY",
    "WEEKDAY",
    "WEEKEND",
    "WEEKLY",
    "SPEC_NODES",
    "ALL_NODES",
)
"""The reservation flags the lab knows, in the order reservation_flags_string prints them."""
_NOT_CREATED = "No reservation created."
# (canonical key, shortest abbreviation create_res.c accepts)
_CREATE_KEYS = (
    ("ReservationName", 1),
    ("StartTime", 2),
    ("EndTime", 1),
    ("Duration", 1),
    ("Nodes", 5),
    ("Users", 1),
    ("Accounts", 1),
    ("Flags", 2),
    ("PartitionName", 1),
)
_DURATION = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_NOW_PLUS = re.compile(r"^now(?:\+(\d+)(seconds|minutes|hours|days|s|m|h|d)?)?$", re.I)
_PLUS_UNITS = {"s": 1, "seconds": 1, "m": 60, "minutes": 60, "h": 3600, "hours": 3600}


def reservation_command(ctx: ToolContext, args: list[str], oneliner: bool) -> ToolReply | None:
    """Answer a reservation command, or None when `args` is not one."""
    if len(args) >= 2 and args[0] == "create" and _is_reservation_word(args[1]):
        return _create(ctx, args[1:])
    if args[:1] == ["delete"] and len(args) >= 2 and _is_reservation_word(args[1]):
        return _delete(ctx, args[1:])
    if args[:1] == ["show"] and len(args) >= 2 and _is_reservation_word(args[1]):
        return _show(ctx, args[1:], oneliner)
    return None


def _is_reservation_word(word: str) -> bool:
    key = word.partition("=")[0].lower()
    return (len(key) >= 3 and "reservationname".startswith(key)) or key == "reservations"


# --- create ----------------------------------------------------------------------------------


def _create(ctx: ToolContext, args: Sequence[str]) -> ToolReply:
    options = _create_options(args)
    if isinstance(options, str):
        return _error(options)
    slurm = ctx.fleet.slurm
    start = _start_time(options.get("StartTime"), ctx.now)
    if start is None:
        given = options.get("StartTime")
        return _error(
            "A start time must be given."
            if given is None
            else f"Invalid start time StartTime={given}."
        )
    end = _end_time(options, start)
    if isinstance(end, str):
        return _error(end)
    if not options.get("Users") and not options.get("Accounts"):
        return _error("Either Users/Groups and/or Accounts must be specified.")
    nodes = _nodes(ctx, options.get("Nodes", ""))
    if isinstance(nodes, str):
        return _refused(nodes)
    flags = _flags(options.get("Flags", ""), options.get("Nodes", ""))
    if isinstance(flags, str):
        return _error(flags)
    name = options.get("ReservationName") or _default_name(slurm, options)
    problem = _create_refusal(ctx, name, nodes, flags, (start, end))
    if problem is not None:
        return _refused(problem)
    users = tuple(u for u in (options.get("Users") or "").split(",") if u)
    slurm.reservations[name] = Reservation(name, nodes, start, end, users, flags, ctx.user, ctx.now)
    return ToolReply(stdout=f"Reservation created: {name}\n")


def _create_options(args: Sequence[str]) -> dict[str, str] | str:
    options: dict[str, str] = {}
    for arg in args:
        tag, eq, value = arg.partition("=")
        if not eq and tag.lower().startswith("res"):
            continue
        key = _create_key(tag) if eq else None
        if key is None:
            return f"Unknown parameter {arg}."
        options[key] = value
    return options


def _create_key(tag: str) -> str | None:
    lowered = tag.lower()
    for key, shortest in _CREATE_KEYS:
        if len(lowered) >= shortest and key.lower().startswith(lowered):
            return key
    return None


def _start_time(text: str | None, now: float) -> float | None:
    if text is None:
        return None
    relative = _NOW_PLUS.match(text.strip())
    if relative is not None:
        amount = int(relative.group(1) or 0)
        unit = (relative.group(2) or "s").lower()
        return now + amount * _PLUS_UNITS.get(unit, 86400)
    for form in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"):
        try:
            return datetime.strptime(text, form).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


def _end_time(options: dict[str, str], start: float) -> float | str:
    if "Duration" not in options:
        return "An end time or duration must be given."
    text = options["Duration"].strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return start + YEAR
    minutes = _duration_minutes(text)
    if minutes is None:
        return f"Invalid duration Duration={text}."
    return start + minutes * 60.0


def _duration_minutes(text: str) -> int | None:
    """Slurm's time_str2mins: `120` (minutes), `mm:ss`, `hh:mm:ss`, `d-hh[:mm[:ss]]`."""
    match = _DURATION.match(text)
    if match is None:
        return None
    days, first, second, third = (int(g) if g else None for g in match.groups())
    assert first is not None
    if days is not None:  # d-hh, d-hh:mm, d-hh:mm:ss
        return days * 1440 + first * 60 + (second or 0) + (1 if third else 0)
    if third is not None:  # hh:mm:ss
        return first * 60 + (second or 0) + (1 if third else 0)
    if second is not None:  # mm:ss
        return first + (1 if second else 0)
    return first


def _nodes(ctx: ToolContext, text: str) -> tuple[str, ...] | str:
    if text.upper() == "ALL":
        return tuple(ctx.fleet.nodes)
    names = tuple(expand_hostlist(text))
    if not names:
        return "CoreCnt, Nodes, NodeCnt, TRES or Watts must be specified."
    if any(name not in ctx.fleet.nodes for name in names):
        return "Invalid node name specified"
    return names


def _flags(text: str, nodes: str) -> tuple[str, ...] | str:
    wanted = {flag.strip().upper() for flag in text.split(",") if flag.strip()}
    unknown = sorted(wanted - set(FLAG_ORDER))
    if unknown:
        return f"Invalid flag {unknown[0]}."
    wanted.add("SPEC_NODES")
    if nodes.upper() == "ALL":
        wanted.add("ALL_NODES")
    return tuple(flag for flag in FLAG_ORDER if flag in wanted)


def _default_name(slurm: SlurmState, options: dict[str, str]) -> str:
    """Slurm names a reservation after its first user (or account) and a counter: root_3."""
    owner = (options.get("Users") or options.get("Accounts") or "resv").split(",")[0]
    while f"{owner}_{slurm.next_reservation}" in slurm.reservations:
        slurm.next_reservation += 1
    name = f"{owner}_{slurm.next_reservation}"
    slurm.next_reservation += 1
    return name


def _create_refusal(
    ctx: ToolContext,
    name: str,
    nodes: tuple[str, ...],
    flags: tuple[str, ...],
    window: tuple[float, float],
) -> str | None:
    """Slurm's reason to refuse the reservation (its error text), or None."""
    slurm = ctx.fleet.slurm
    if ctx.user != "root":
        return "Access/permission denied"
    if name in slurm.reservations:
        return "Duplicate reservation name"
    running = [n for n in nodes if _runs_a_job(slurm, n)]
    if running and "IGNORE_JOBS" not in flags:
        return "Requested nodes are busy"
    may_overlap = {"MAINT", "OVERLAP"} & set(flags)
    for other in slurm.reservations.values():
        overlaps = other.start < window[1] and window[0] < other.end
        shared = set(other.nodes) & set(nodes)
        if overlaps and shared and not (may_overlap or {"MAINT", "OVERLAP"} & set(other.flags)):
            return "Requested reservation overlaps with another reservation"
    return None


def _runs_a_job(slurm: SlurmState, node: str) -> bool:
    job = slurm.jobs.get(slurm.nodes[node].job_id or -1)
    return job is not None and job.epilog_until is None


def _error(message: str) -> ToolReply:
    """A request scontrol itself rejects (its `error()` line on stderr)."""
    return fail(f"scontrol: error: {message}  {_NOT_CREATED}")


def _refused(message: str) -> ToolReply:
    """A request slurmctld refused (slurm_perror)."""
    return fail(f"Error creating the reservation: {message}")


# --- delete ----------------------------------------------------------------------------------


def _delete(ctx: ToolContext, args: Sequence[str]) -> ToolReply:
    """`delete ReservationName=N` or `delete reservation N`."""
    _, eq, value = args[0].partition("=")
    name = value if eq else (args[1] if len(args) == 2 else "")
    if not name or len(args) > (1 if eq else 2):
        return fail(
            "scontrol: error: Proper format is 'delete <ENTITY>=<ID>' or 'delete <ENTITY> <ID>'"
        )
    slurm = ctx.fleet.slurm
    problem = None
    if ctx.user != "root":
        problem = "Access/permission denied"
    elif name not in slurm.reservations:
        problem = "Requested reservation is invalid"
    elif any(j.reservation == name and j.epilog_until is None for j in slurm.jobs.values()):
        problem = "Requested reservation is in use"
    if problem is not None:
        return fail(f"delete_reservation {args[0]}: {problem}")
    del slurm.reservations[name]
    return ToolReply()


# --- show ------------------------------------------------------------------------------------


def _show(ctx: ToolContext, args: Sequence[str], oneliner: bool) -> ToolReply:
    """`show reservation [NAME]`, `show res`, `show ReservationName=NAME`."""
    _, eq, value = args[0].partition("=")
    name = value if eq else (args[1] if len(args) > 1 else None)
    slurm = ctx.fleet.slurm
    shown = [r for r in slurm.reservations.values() if name is None or r.name == name]
    if not shown:
        if name is not None:
            return ToolReply(stdout=f"Reservation {name} not found\n", rc=1)
        return ToolReply(stdout="No reservations in the system\n")
    return ToolReply(stdout="".join(_record(r, ctx.now, oneliner) for r in shown))


def _record(reservation: Reservation, now: float, oneliner: bool) -> str:
    """One reservation as slurm_sprint_reservation_info (24.05) prints it."""
    count = len(reservation.nodes)
    state = "ACTIVE" if reservation.active(now) else "INACTIVE"
    rows = [
        f"ReservationName={reservation.name} StartTime={stamp(reservation.start)} "
        f"EndTime={stamp(reservation.end)} "
        f"Duration={duration_text(reservation.end - reservation.start)}",
        f"Nodes={compress_hostlist(reservation.nodes)} NodeCnt={count} "
        f"CoreCnt={CORES * count} Features=(null) PartitionName=(null) "
        f"Flags={','.join(reservation.flags)}",
        f"TRES=cpu={CPUS * count}",
        f"Users={','.join(reservation.users) or '(null)'} Groups=(null) Accounts=(null) "
        f"Licenses=(null) State={state} BurstBuffer=(null)",
        "MaxStartDelay=(null)",
    ]
    if oneliner:
        return " ".join(rows) + "\n"
    return lines(rows[0], *(f"   {row}" for row in rows[1:]), "")


def duration_text(seconds: float) -> str:
    """Slurm's secs2time_str: `02:00:00`, `365-00:00:00`."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock
