"""The shell text that runs one command on a remote host, and how to read what comes back.

Shared by the ssh and fabric transports: env exports (which work where sshd's AcceptEnv refuses
env requests), a first stderr line naming the PID that leads the command's process group (so a
client can kill the group over a second channel: OpenSSH refuses channel signals in root
sessions), and coreutils `timeout`, which kills the group on the remote side even when the
client is gone.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping

from fleetfix.errors import TransportError
from fleetfix.transport.base import ConnectionSpec

KILL_AFTER = 5
"""Seconds the remote `timeout` waits after SIGTERM before SIGKILL."""

CLIENT_GRACE = 1.0
"""Seconds past the command timeout before the client gives up on the remote `timeout`."""

PID_MARKER = "fleetfix-pid:"
_TIMEOUT_EXITS = frozenset({124, 137, -9, -15})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def remote_command(command: str, timeout: float | None, env: Mapping[str, str]) -> str:
    """The text sent to the remote shell: env exports, a PID line, `command` under `timeout`.

    The command itself runs with `sh -c`. Hosts without `timeout` still run it, relying on
    the client-side deadline.
    """
    exports = "".join(f"export {name}={shlex.quote(value)}; " for name, value in env.items())
    announce = f"printf '{PID_MARKER}%s\\n' \"$$\" >&2; "
    quoted = shlex.quote(command)
    if timeout is None:
        return f"{exports}{announce}exec sh -c {quoted}"
    seconds = max(1, math.ceil(timeout))
    return (
        f"{exports}{announce}if command -v timeout >/dev/null 2>&1; "
        f"then exec timeout -k {KILL_AFTER} {seconds} sh -c {quoted}; "
        f"else exec sh -c {quoted}; fi"
    )


def kill_command(pid: int) -> str:
    """Kill the process group `pid` leads (or just `pid` where it leads none)."""
    return f"kill -9 -{pid} 2>/dev/null || kill -9 {pid} 2>/dev/null; true"


def split_pid_line(stderr: str) -> tuple[int | None, str]:
    """The PID `remote_command` announced, and stderr without that line."""
    head, marker, tail = stderr.partition(PID_MARKER)
    if not marker or (head and not head.endswith("\n")):
        return None, stderr
    number, _newline, rest = tail.partition("\n")
    return (int(number) if number.isdigit() else None), head + rest


def check_env(host: str, env: Mapping[str, str] | None) -> Mapping[str, str]:
    """`env`, or TransportError naming the first variable name a shell cannot export."""
    for name in env or {}:
        if not _ENV_NAME.match(name):
            raise TransportError(host, f"invalid environment variable name {name!r}")
    return env or {}


def killed_by_timeout(rc: int | None, elapsed: float, timeout: float | None) -> bool:
    """Whether an exit status is the remote `timeout` killing the command at its deadline."""
    return timeout is not None and elapsed >= timeout and rc in _TIMEOUT_EXITS


def proxy_command(template: str, spec: ConnectionSpec, default_user: str | None) -> str:
    """An OpenSSH ProxyCommand with its %h, %p, %r, %n and %% tokens filled in for `spec`."""
    values = {
        "h": spec.address,
        "p": str(spec.port),
        "r": spec.user or default_user or "",
        "n": spec.name,
        "%": "%",
    }
    return re.sub(r"%([hprn%])", lambda match: values[match.group(1)], template)


CHANNEL_RETRY_DELAYS = (0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
"""Waits before retrying a refused session channel: sshd frees a MaxSessions slot a moment after
a channel closes, and servers may allow fewer sessions than we open (about 6 s in all)."""
