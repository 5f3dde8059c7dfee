"""The device_holders probe: which systemd unit (or Slurm job) each holder of /dev/nvidia* runs in.

`fuser /dev/nvidia*` lists the PIDs holding a GPU device file (the gpu_processes probe reads the
same tool's table for names and users); for each PID this probe reads its user, its command
(`/proc/PID/comm`) and its control group (`/proc/PID/cgroup`). systemd puts every service's
processes in `.../NAME.service` (cgroup v2's `0::` line, v1's `name=systemd` line), and Slurm
puts a job's in `.../job_N/...`, so a GPU reset or driver reload can stop exactly the units
that hold the devices, and refuse what it cannot stop (docs/gpu-procedures.md).

Output, one section per PID between `### fleetfix` markers:

    ### fleetfix fuser rc=0
    ### fleetfix holder pid=2207
    user root
    comm nv-hostengine
    cgroup 0::/system.slice/nvidia-dcgm.service
    ### fleetfix end

A PID whose /proc entry is gone (it exited) or unreadable has no lines: its unit is unknown.
fuser exits 1 when nothing holds the devices; any other status but 0 (not installed, killed
by `timeout`) makes the facts incomplete, and gates then refuse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.errors import ProbeParseError
from fleetfix.probes.base import Probe

NAME = "device_holders"
TIMEOUT = 15
"""Seconds fuser may take (then `timeout` kills it; 2 s more for SIGKILL)."""
_MARKER = re.compile(
    r"^### fleetfix (?P<name>fuser|holder|end)(?: (?P<key>rc|pid)=(?P<value>\d+))?$"
)
_FIELD = re.compile(r"^(?P<key>user|comm|cgroup) (?P<value>.*)$")
_CGROUP = re.compile(r"^(?P<id>\d+):(?P<controllers>[^:]*):(?P<path>/.*)$")
_SERVICE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.service$")
_JOB = re.compile(r"/job_\d+(?:/|$)|/slurmstepd\.scope(?:/|$)|^/slurm(?:_[^/]*)?/")
"""A Slurm job's cgroup: `/slurm/uid_N/job_N/...` (v1), `.../slurmstepd.scope/job_N/...` (v2)."""
_FUSER_OK = (0, 1)
"""fuser's exit status: 0, something holds the files; 1, nothing does."""


@dataclass(frozen=True, slots=True)
class DeviceHolder:
    """One process holding a GPU device file, as /proc describes it (None: not readable)."""

    pid: int
    user: str | None
    command: str | None
    cgroup: str | None
    """Its path in systemd's hierarchy (cgroup v2, or v1's name=systemd)."""
    unit: str | None
    """The system service it runs in (`nvidia-dcgm-exporter`), None outside one (a login
    session, a container scope, a user's own units)."""
    job: bool
    """In a Slurm job's cgroup (any hierarchy)."""


@dataclass(frozen=True, slots=True)
class DeviceHoldersFacts:
    """The holders of /dev/nvidia*; `complete` only when fuser answered (0 or 1)."""

    holders: tuple[DeviceHolder, ...]
    fuser_rc: int
    complete: bool
    errors: tuple[str, ...] = ()


def command(params: Mapping[str, Any]) -> str:
    """fuser's PIDs (its table goes to stderr, discarded), then each PID's /proc facts."""
    return " ".join(
        (
            f"out=$(timeout -k 2 {TIMEOUT} fuser /dev/nvidia* 2>/dev/null); rc=$?;",
            'echo "### fleetfix fuser rc=$rc";',
            "for p in $(printf '%s\\n' $out | grep -E '^[0-9]+$' | sort -un); do",
            'echo "### fleetfix holder pid=$p";',
            "stat -c 'user %U' \"/proc/$p\" 2>/dev/null;",
            'c=$(cat "/proc/$p/comm" 2>/dev/null) && printf \'comm %s\\n\' "$c";',
            "sed 's/^/cgroup /' \"/proc/$p/cgroup\" 2>/dev/null;",
            "done;",
            'echo "### fleetfix end"',
        )
    )


def parse(text: str) -> DeviceHoldersFacts:
    """Facts from the probe's output.

    Raises:
        ProbeParseError: no fuser status, no end marker (output cut off), or a foreign line.
    """
    lines = [line.rstrip("\r") for line in text.splitlines()]
    rc: int | None = None
    holders: list[DeviceHolder] = []
    fields: dict[str, list[str]] | None = None
    pid = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        marker = _MARKER.match(line)
        if marker is None:
            if fields is None:
                raise ProbeParseError(NAME, "a line outside a holder's section", text, line=number)
            fields.setdefault(_field(line, text, number), []).append(line.split(" ", 1)[1])
            continue
        if fields is not None:
            holders.append(_holder(pid, fields))
            fields = None
        if marker["name"] == "fuser":
            rc = int(marker["value"] or -1)
        elif marker["name"] == "holder":
            if rc is None or marker["value"] is None:
                raise ProbeParseError(NAME, "a holder before fuser's status", text, line=number)
            pid, fields = int(marker["value"]), {}
        else:
            return _facts(rc, holders, text)
    raise ProbeParseError(NAME, "output cut off (no end marker)", text)


def _field(line: str, text: str, number: int) -> str:
    match = _FIELD.match(line)
    if match is None:
        raise ProbeParseError(NAME, "not a 'user', 'comm' or 'cgroup' line", text, line=number)
    return match["key"]


def _facts(rc: int | None, holders: list[DeviceHolder], text: str) -> DeviceHoldersFacts:
    if rc is None:
        raise ProbeParseError(NAME, "no fuser status", text)
    complete = rc in _FUSER_OK
    errors = () if complete else (_fuser_error(rc),)
    unique = {holder.pid: holder for holder in holders}
    found = tuple(unique[pid] for pid in sorted(unique))
    return DeviceHoldersFacts(holders=found, fuser_rc=rc, complete=complete, errors=errors)


def _fuser_error(rc: int) -> str:
    if rc in (124, 137):
        return f"fuser did not answer within {TIMEOUT}s (rc={rc})"
    if rc == 127:
        return "fuser (psmisc) is not installed (rc=127)"
    return f"fuser exited {rc}"


def _holder(pid: int, fields: dict[str, list[str]]) -> DeviceHolder:
    cgroups = [match for line in fields.get("cgroup", []) if (match := _CGROUP.match(line))]
    systemd = next(
        (m["path"] for m in cgroups if m["id"] == "0" and not m["controllers"]),
        next((m["path"] for m in cgroups if m["controllers"] == "name=systemd"), None),
    )
    return DeviceHolder(
        pid=pid,
        user=_first(fields, "user"),
        command=_first(fields, "comm"),
        cgroup=systemd,
        unit=system_unit(systemd),
        job=any(_JOB.search(m["path"]) for m in cgroups),
    )


def _first(fields: dict[str, list[str]], key: str) -> str | None:
    values = fields.get(key)
    return values[0] if values and values[0] else None


def system_unit(path: str | None) -> str | None:
    """The system service a cgroup path belongs to (the first `NAME.service` in it, without
    `.service`); None outside one, and for anything under user.slice (a user's own units)."""
    if path is None:
        return None
    parts = [part for part in path.split("/") if part]
    if "user.slice" in parts:
        return None
    service = next((part for part in parts if _SERVICE.match(part)), None)
    return service.removesuffix(".service") if service else None


PROBE: Probe[DeviceHoldersFacts] = Probe(
    name=NAME,
    summary="Holders of /dev/nvidia* (fuser) with the systemd unit or Slurm job each runs in "
    "(/proc/PID/cgroup)",
    command=command,
    parse=parse,
    params={},
)
