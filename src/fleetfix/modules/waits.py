"""Waiting modules: `pause` (a fixed time; prompts are refused at load: no one answers them at
3 a.m.), `wait_for_connection` (until the node answers over the transport again) and
`wait_for` (a port, a path or a string in a file, seen from the node: each attempt is one
command on the node, bash's /dev/tcp for ports, /proc/net/tcp for drained; the regex is
matched here, with Python's re as Ansible's module does)."""

from __future__ import annotations

import asyncio
import ipaddress
import math
import re
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleetfix.engine.hoststep import Outcome
from fleetfix.errors import UnreachableError
from fleetfix.modules.call import ModuleCall, ModuleFailed, quoted


async def pause(call: ModuleCall) -> Outcome:
    minutes, seconds = call.params["minutes"], call.params["seconds"]
    wait = float(minutes) * 60 if minutes is not None else float(seconds or 0)
    start = datetime.now()
    await asyncio.sleep(max(0.0, wait))
    stop = datetime.now()
    took = (stop - start).total_seconds()
    delta = int(took)
    # As Ansible says it: the time it took, rounded to 2 decimals, in the unit asked for.
    said = f"{round(took / 60, 2)} minutes" if minutes is not None else f"{round(took, 2)} seconds"
    return call.outcome(
        start=str(start),
        stop=str(stop),
        delta=delta,
        user_input="",
        echo=call.params["echo"],
        rc=0,
        stderr="",
        stdout=f"Paused for {said}",
    )


async def wait_for_connection(call: ModuleCall) -> Outcome:
    """Ansible's loop: after `delay`, try a trivial command every `sleep` seconds until one
    answers within `connect_timeout`, for at most `timeout` seconds."""
    params = call.params
    started = time.monotonic()
    await asyncio.sleep(params["delay"])
    deadline = started + params["timeout"]
    last = "no attempt"
    while True:
        try:
            result = await call.hs.command("true", timeout=params["connect_timeout"])
            if result.ok:
                return call.outcome(elapsed=int(time.monotonic() - started))
            last = result.stderr.strip() or f"exit status {result.rc}"
        except UnreachableError as exc:
            await call.hs.ctx.connections.drop(call.host)
            last = str(exc)
        if time.monotonic() + params["sleep"] >= deadline:
            return call.failure(
                f"timed out waiting for connection port up: {last}",
                elapsed=int(time.monotonic() - started),
            )
        await asyncio.sleep(params["sleep"])


CONNECTED = "fleetfix-wait-for-connected"
"""First line a port read prints once connected (then whatever the server sends)."""
ACTIVE_TCP_STATES = frozenset({"01", "02", "03", "04", "05", "06"})
"""/proc/net/tcp states Ansible's drained counts by default: ESTABLISHED, SYN_SENT, SYN_RECV,
FIN_WAIT1, FIN_WAIT2, TIME_WAIT."""
_MATCH_ALL = ("0.0.0.0", "::")
_NO_SUCH_FILE = "No such file or directory"


@dataclass(frozen=True, slots=True)
class Found:
    """One attempt's verdict: the condition holds (with the regex's match, if any)."""

    holds: bool
    match: re.Match[str] | None = None


Attempt = Callable[[float], Awaitable[Found]]
"""One look at the node; its argument is the deadline (monotonic)."""


async def wait_for(call: ModuleCall) -> Outcome:
    """Ansible's loop: after `delay`, look every `sleep` seconds until the condition holds,
    for at most `timeout` seconds counted from the start (the delay included)."""
    params = call.params
    if call.dry:  # Ansible's wait_for does not support check mode: it is skipped
        return Outcome(
            skipped=True,
            message="remote module (wait_for) does not support check mode",
            registers_command=False,
        )
    pattern = _pattern(params)
    attempt, missed = _attempt(call, pattern)
    started = time.monotonic()
    await asyncio.sleep(params["delay"])
    deadline = started + params["timeout"]
    found = await _until(call, attempt, deadline)
    elapsed = int(time.monotonic() - started)
    if found is None:
        raise ModuleFailed(params["msg"] or missed, elapsed=elapsed)
    match = found.match if params["path"] is not None else None
    values: dict[str, Any] = {
        "state": params["state"],
        "port": params["port"],
        "search_regex": params["search_regex"],
        "match_groups": list(match.groups()) if match is not None else [],
        "match_groupdict": match.groupdict() if match is not None else {},
        "path": params["path"],
        "elapsed": elapsed,
    }
    if params["path"] is not None:  # Ansible adds the path's facts to any result with a path
        values.update(await _path_info(call, params["path"]))
    return call.outcome(**values)


async def _path_info(call: ModuleCall, path: str) -> dict[str, Any]:
    """What Ansible's module adds for a result's path: its state (file, directory, link,
    hard, absent), owner, group and mode, size (of the link itself for a link)."""
    said = await call.run(f"stat -c '%u %g %U %G %a %s %h %F' -- {quoted(path)}")
    words = said.stdout.split(maxsplit=7)
    if said.rc != 0 or len(words) < 8:
        return {"state": "absent"}
    uid, gid, owner, group, mode, size, links, kind = words
    if kind == "symbolic link":
        state = "link"
    elif kind == "directory":
        state = "directory"
    else:
        state = "hard" if int(links) > 1 else "file"
    return {
        "uid": int(uid),
        "gid": int(gid),
        "owner": owner,
        "group": group,
        "mode": "0" + mode.zfill(3),
        "state": state,
        "size": int(size),
    }


def _pattern(params: dict[str, Any]) -> re.Pattern[str] | None:
    """The compiled search_regex, after Ansible's checks of what goes with what."""
    path, state = params["path"], params["state"]
    if path and state in ("stopped", "drained"):
        raise ModuleFailed(
            f"state={state} should only be used for checking a port in the wait_for module",
            elapsed=0,
        )
    if params["search_regex"] is None:
        return None
    try:
        return re.compile(params["search_regex"], re.MULTILINE)
    except re.error as exc:
        raise ModuleFailed(f"Invalid regular expression: {exc}") from exc


def _attempt(call: ModuleCall, pattern: re.Pattern[str] | None) -> tuple[Attempt | None, str]:
    """What one look does and Ansible's message when it never holds; no attempt: only wait."""
    params = call.params
    host, port, path, state = params["host"], params["port"], params["path"], params["state"]
    regex = params["search_regex"]
    if state == "drained":
        return (
            lambda _: _drained(call, host, port)
        ), f"Timeout when waiting for {host}:{port} to drain"
    if port is not None and state in ("absent", "stopped"):
        return (
            lambda deadline: _port_closed(call, host, port, deadline)
        ), f"Timeout when waiting for {host}:{port} to stop."
    if path is not None and state in ("absent", "stopped"):
        return (lambda _: _path_gone(call, path)), f"Timeout when waiting for {path} to be absent."
    if port is not None:
        where = f"{host}:{port}"
        missed = f"Timeout when waiting for search string {regex} in {where}" if regex else ""
        return (
            lambda deadline: _port_open(call, host, port, pattern, deadline)
        ), missed or f"Timeout when waiting for {where}"
    if path is not None:
        missed = f"Timeout when waiting for search string {regex} in {path}" if regex else ""
        return (
            lambda _: _path_there(call, path, pattern)
        ), missed or f"Timeout when waiting for file {path}"
    return None, ""


async def _until(call: ModuleCall, attempt: Attempt | None, deadline: float) -> Found | None:
    """Look until the condition holds (its verdict) or the deadline passes (None); with no
    attempt, wait out the timeout."""
    if attempt is None:
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        return Found(True)
    while time.monotonic() < deadline:
        found = await attempt(deadline)
        if found.holds:
            return found
        await asyncio.sleep(call.params["sleep"])
    return None


async def _path_there(call: ModuleCall, path: str, pattern: re.Pattern[str] | None) -> Found:
    stat = await call.run(f"stat -L -c %F -- {quoted(path)}")
    if stat.rc != 0:
        said = stat.stderr.strip()
        if _NO_SUCH_FILE in said or not said:
            return Found(False)
        raise ModuleFailed(f"Failed to stat {path}, {said.rsplit(': ', 1)[-1]}")
    if pattern is None:
        return Found(True)
    read = await call.run(f"cat -- {quoted(path)}")
    match = pattern.search(read.stdout) if read.rc == 0 else None
    return Found(match is not None, match)


async def _path_gone(call: ModuleCall, path: str) -> Found:
    return Found((await call.run(f"test -e {quoted(path)}")).rc != 0)


def _connect_script(host: str, port: int, then: str) -> str:
    """A bash script (bash's /dev/tcp) that connects, prints CONNECTED, then runs `then`."""
    target = shlex.quote(f"/dev/tcp/{host}/{port}")
    return f"exec 3<>{target} || exit 1; echo {CONNECTED}; {then}"


async def _connects(call: ModuleCall, host: str, port: int, seconds: int, then: str) -> str | None:
    """What the server sent (after connecting within `seconds`), or None: no connection."""
    script = _connect_script(host, port, then)
    command = f"timeout {seconds} bash -c {shlex.quote(script)}"
    result = await call.run(command, timeout=seconds + 10)
    if result.rc == 127 or "bash: command not found" in result.stderr:
        raise ModuleFailed("wait_for: a port is checked with bash and timeout on the node")
    head, _, rest = result.stdout.partition("\n")
    return rest if head == CONNECTED else None


def _connect_seconds(call: ModuleCall, deadline: float) -> int:
    left = math.ceil(max(0.0, deadline - time.monotonic()))
    return max(1, min(int(call.params["connect_timeout"]), left))


async def _port_open(
    call: ModuleCall, host: str, port: int, pattern: re.Pattern[str] | None, deadline: float
) -> Found:
    if pattern is None:
        sent = await _connects(call, host, port, _connect_seconds(call, deadline), "exit 0")
        return Found(sent is not None)
    # Read what the server sends until it pauses for a second or closes, within the timeout.
    reader = (
        'while IFS= read -r -t 1 line <&3 || [ -n "$line" ]; do printf "%s\\n" "$line"; line=; done'
    )
    left = math.ceil(max(1.0, deadline - time.monotonic()))
    sent = await _connects(call, host, port, left, reader)
    match = pattern.search(sent) if sent is not None else None
    return Found(match is not None, match)


async def _port_closed(call: ModuleCall, host: str, port: int, deadline: float) -> Found:
    sent = await _connects(call, host, port, _connect_seconds(call, deadline), "exit 0")
    return Found(sent is None)


async def _drained(call: ModuleCall, host: str, port: int | None) -> Found:
    if port is None:
        raise ModuleFailed("wait_for: state=drained needs a port")
    read = await call.run("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
    return Found(active_connections(read.stdout, port, host) == 0)


def active_connections(proc_net_tcp: str, port: int, host: str) -> int:
    """Connections in an active state on local `port` and address `host` (0.0.0.0 or ::
    for any), from /proc/net/tcp and tcp6 text, as Ansible's Linux drained check counts them.

    Raises:
        ModuleFailed: host is not an IP address (fleetfix does not resolve names for this).
    """
    addresses = _hex_addresses(host)
    wanted_port = f"{port:04X}"
    count = 0
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[1] == "local_address" or ":" not in fields[1]:
            continue
        local_ip, _, local_port = fields[1].partition(":")
        if local_port != wanted_port or fields[3] not in ACTIVE_TCP_STATES:
            continue
        if addresses is None or local_ip.upper() in addresses:
            count += 1
    return count


def _hex_addresses(host: str) -> frozenset[str] | None:
    """How /proc/net/tcp{,6} write this address (IPv4 also as mapped in tcp6); None: any."""
    if host in _MATCH_ALL:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise ModuleFailed(
            f"wait_for: state=drained needs host as an IP address, not {host!r}"
        ) from exc
    if isinstance(address, ipaddress.IPv4Address):
        word = address.packed[::-1].hex().upper()
        return frozenset({word, "0000000000000000FFFF0000" + word})
    packed = address.packed
    words = (packed[i : i + 4][::-1].hex().upper() for i in range(0, 16, 4))
    return frozenset({"".join(words)})
