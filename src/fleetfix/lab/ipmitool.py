"""ipmitool for the lab's emulated BMCs, run on the controller as `<state>/bmc/ipmitool`.

fleetfix's power_cycle action runs `IPMI_PASSWORD=... <fleetfix_ipmitool> -I lanplus -H BMC -U
USER -E chassis power cycle` on the controller; a lab inventory points `fleetfix_ipmitool` at
this program (lab/inventory.py). It reads its arguments as ipmitool 1.8.19 does (its getopt
string, GNU argument order; the password from -P, -E (IPMITOOL_PASSWORD, then IPMI_PASSWORD)
or the first line of -f FILE; ipmitool's own checks and words for a long user name or
password), sends the request to the lab server's control port (`op: bmc`), and prints what the
node's BMC answered (lab/bmc.py) with its exit status. Only the lab's BMC addresses answer; it
never sends IPMI anywhere. The wrapper script names the lab by its state dir
(`FLEETFIX_LAB_STATE_DIR`), written by the server when it starts (`write_tool`).
"""

from __future__ import annotations

import getopt
import json
import os
import shlex
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from fleetfix.errors import LabError
from fleetfix.lab.info import read_info

OPTION_STRING = "I:46hVvcgsEKYao:H:d:P:f:U:p:C:L:A:t:T:m:z:S:l:b:B:e:k:y:O:R:N:D:Z"
"""ipmitool's getopt string (lib/ipmi_main.c, with all options enabled)."""
VERSION = "1.8.19"
STATE_ENV = "FLEETFIX_LAB_STATE_DIR"
TOOL = Path("bmc") / "ipmitool"
"""Where in a lab's state dir the wrapper lives."""
INTERFACES = ("open", "lan", "lanplus", "imb", "serial-terminal", "serial-basic", "usb")
REQUEST_TIMEOUT = 30.0
DEVICE_ERROR = (
    "Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0:"
    " No such file or directory"
)
_PASSWORD_LIMITS = MappingProxyType({"lan": 16, "lanplus": 20})
_USER_LIMIT = 16


@dataclass(frozen=True, slots=True)
class Call:
    """One command line, read: where to, as whom, what."""

    interface: str
    host: str | None
    user: str
    password: str
    command: tuple[str, ...]
    warnings: str = ""
    """What ipmitool warns about on stderr before it goes on (no password in the environment)."""


@dataclass(frozen=True, slots=True)
class Said:
    """What ipmitool prints and its exit status."""

    stdout: str = ""
    stderr: str = ""
    rc: int = 0


def tool_path(state_dir: Path) -> Path:
    """The lab's ipmitool: what `fleetfix_ipmitool` names in the lab's inventories."""
    return state_dir / TOOL


def write_tool(state_dir: Path) -> Path:
    """Write the wrapper that runs this module for the lab in `state_dir` (mode 0700)."""
    path = tool_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    script = (
        "#!/bin/sh\n"
        "# fleetfix lab: ipmitool for this lab's emulated BMCs, run on the controller.\n"
        f"{STATE_ENV}={shlex.quote(str(state_dir))} exec {shlex.quote(sys.executable)}"
        ' -P -m fleetfix.lab.ipmitool "$@"\n'
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(script)
    return path


@dataclass(slots=True)
class _Options:
    """The options read so far."""

    interface: str = ""
    host: str | None = None
    user: str = ""
    password: str | None = None
    warnings: str = ""


def read_call(argv: Sequence[str], env: dict[str, str]) -> Call | Said:
    """The command line as ipmitool reads it, or what ipmitool says instead (usage, errors)."""
    try:
        options, command = getopt.gnu_getopt(list(argv), OPTION_STRING)
    except getopt.GetoptError as exc:
        return Said(stderr=f"ipmitool: {exc.msg}\n{_USAGE}", rc=1)
    read = _Options()
    for option, value in options:
        said = _option(read, option, value, env)
        if said is not None:
            return said
    interface = read.interface or ("lan" if read.host else "open")
    limit = _PASSWORD_LIMITS.get(interface)
    password = read.password
    if password is not None and limit is not None and len(password.encode()) > limit:
        message = f"{read.warnings}{interface}: password is longer than {limit} bytes.\n"
        return Said(stderr=message, rc=1)
    if interface not in ("lan", "lanplus") or read.host is None:
        return Said(stderr=f"{read.warnings}{DEVICE_ERROR}\n", rc=1)
    return Call(interface, read.host, read.user, password or "", tuple(command), read.warnings)


def _option(read: _Options, option: str, value: str, env: dict[str, str]) -> Said | None:
    """Take one option into `read`; what ipmitool says instead when it stops there."""
    if option == "-h":
        return Said(stderr=_USAGE)
    if option == "-V":
        return Said(stdout=f"ipmitool version {VERSION}\n")
    if option == "-I" and value not in INTERFACES:
        return Said(stderr=f"Interface {value} not supported\n", rc=1)
    if option == "-U" and len(value.encode()) > _USER_LIMIT:
        return Said(stderr="Username is too long (> 16 bytes)\n", rc=1)
    warning = ""
    if option == "-I":
        read.interface = value
    elif option == "-H":
        read.host = value
    elif option == "-U":
        read.user = value
    elif option == "-P":
        read.password = value
    elif option == "-E":
        read.password, warning = _from_environment(env, read.password)
    elif option == "-f":
        read.password, warning = _from_file(value, read.password)
    read.warnings += warning
    return None


def _from_environment(env: dict[str, str], current: str | None) -> tuple[str | None, str]:
    for name in ("IPMITOOL_PASSWORD", "IPMI_PASSWORD"):
        if name in env:
            return env[name], ""
    return current, "Unable to read password from environment\n"


def _from_file(path: str, current: str | None) -> tuple[str | None, str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().rstrip("\r\n"), ""
    except OSError:
        return current, f"Unable to read password from file {path}\n"


_USAGE = (
    f"ipmitool version {VERSION}\n\n"
    "usage: ipmitool [options...] <command>\n\n"
    "       -I intf        Interface to use\n"
    "       -H hostname    Remote host name for LAN interface\n"
    "       -U username    Remote session username\n"
    "       -f file        Read remote session password from file\n"
    "       -E             Read password from IPMI_PASSWORD environment variable\n"
    "       -P password    Remote session password\n"
    "(the fleetfix lab's ipmitool: only `chassis power` on the lab's BMCs)\n"
)


def masked(argv: Sequence[str]) -> tuple[str, ...]:
    """The command line with a -P password overwritten by X's, as ipmitool does to its own."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append("X" * len(word))
            hide_next = False
        elif word == "-P":
            out.append(word)
            hide_next = True
        elif word.startswith("-P") and not word.startswith("--"):
            out.append("-P" + "X" * (len(word) - 2))
        else:
            out.append(word)
    return tuple(out)


def ask_lab(state_dir: Path, call: Call, argv: Sequence[str]) -> Said:
    """Send `call` to the lab running from `state_dir`; what its BMC answered."""
    host = call.host or ""
    request = {
        "op": "bmc",
        "address": host,
        "interface": call.interface,
        "user": call.user,
        "password": call.password,
        "command": list(call.command),
        "argv": list(masked(argv)),
    }
    try:
        info = read_info(state_dir)
        if info is None:
            raise LabError(f"no lab is running from {state_dir}")
        request["token"] = info.token
        with socket.create_connection(("127.0.0.1", info.control_port), REQUEST_TIMEOUT) as sock:
            sock.sendall(json.dumps(request).encode() + b"\n")
            reply = json.loads(_read_line(sock))
    except (OSError, ValueError, LabError) as exc:
        unreachable = f"ipmitool: the fleetfix lab is not reachable ({exc})\n"
        return Said(stderr=unreachable + _session_error(call.interface), rc=1)
    if not isinstance(reply, dict) or not reply.get("ok"):
        error = reply.get("error") if isinstance(reply, dict) else reply
        return Said(stderr=f"ipmitool: the fleetfix lab refused the request: {error}\n", rc=1)
    return Said(str(reply["stdout"]), str(reply["stderr"]), int(reply["rc"]))


def _session_error(interface: str) -> str:
    if interface == "lan":
        return "Error: Unable to establish IPMI v1.5 / RMCP session\n"
    return "Error: Unable to establish IPMI v2 / RMCP+ session\n"


def _read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while not chunks or not chunks[-1].endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    state = os.environ.get(STATE_ENV)
    read = read_call(words, dict(os.environ))
    if isinstance(read, Said):
        said = read
    elif not state:
        said = Said(stderr=f"ipmitool: {STATE_ENV} is not set: run the lab's bmc/ipmitool\n", rc=1)
    else:
        said = ask_lab(Path(state), read, words)
        said = Said(said.stdout, read.warnings + said.stderr, said.rc)
    sys.stdout.write(said.stdout)
    sys.stderr.write(said.stderr)
    return said.rc


if __name__ == "__main__":
    sys.exit(main())
