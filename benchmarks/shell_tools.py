"""pdsh and parallel-ssh (pssh) as contenders: the five commands, each once on every host.

Both are run the way an operator would run five commands on a fleet with them: one invocation
per command, in the workload's order (so, like Ansible's linear strategy, each command finishes
everywhere before the next starts), fan-out 50, one OpenSSH client per host and command (no
connection reuse), host keys checked against the lab's known_hosts, batch mode. A generated
`sh` script runs the five invocations and prints `command N exit RC` after each; each command's
output goes to its own file (pdsh: `host: line`; pssh: one file per host with `-o`).

Debian packages: `pdsh` (rcmd module `ssh`) and `pssh` (the `parallel-ssh` command). A missing
tool is skipped with a note (`found_tool`).
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from workload import FORKS

PDSH = "pdsh"
PSSH_NAMES = ("parallel-ssh", "pssh")
CONNECT_TIMEOUT_S = 60
EXIT_LINE = re.compile(r"^command (\d+) exit (\d+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class SshLogin:
    """How OpenSSH reaches the lab: user, port, key, known_hosts."""

    user: str
    port: int
    client_key: Path
    known_hosts: Path

    def options(self) -> list[str]:
        """`-o` options shared by both tools: key only, strict host keys, never prompt."""
        return [
            f"IdentityFile={self.client_key}",
            "IdentitiesOnly=yes",
            f"UserKnownHostsFile={self.known_hosts}",
            "GlobalKnownHostsFile=/dev/null",
            "StrictHostKeyChecking=yes",
            "BatchMode=yes",
            f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        ]


def found_tool(names: Sequence[str]) -> str | None:
    """The first of `names` on PATH, or None (the contender is then skipped)."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def pdsh_env(login: SshLogin) -> dict[str, str]:
    """pdsh's ssh module builds `ssh ARGS` from PDSH_SSH_ARGS (%u user, %h host)."""
    options = " ".join(f"-o {option}" for option in login.options())
    return {
        "PDSH_RCMD_TYPE": "ssh",
        "PDSH_SSH_ARGS": f"-x -p {login.port} {options} -l%u %h",
    }


def pdsh_argv(tool: str, login: SshLogin, hosts_file: Path, command: str) -> list[str]:
    """One command on every host: fan-out 50, largest remote exit status as pdsh's own (-S)."""
    return [
        *(tool, "-S", "-R", "ssh", "-f", str(FORKS), "-t", str(CONNECT_TIMEOUT_S)),
        *("-l", login.user, "-w", f"^{hosts_file}", "--", command),
    ]


def pssh_argv(
    tool: str, login: SshLogin, hosts_file: Path, out_dir: Path, command: str
) -> list[str]:
    """One command on every host (`ADDRESS:PORT` lines): parallelism 50, no timeout."""
    options = [part for option in login.options() for part in ("-O", option)]
    return [
        *(tool, "-h", str(hosts_file), "-l", login.user, "-p", str(FORKS), "-t", "0"),
        *("-o", str(out_dir), *options, command),
    ]


def hosts_file_text(addresses: Sequence[str], port: int | None) -> str:
    """One host a line; pssh takes the port per host (`ADDRESS:PORT`), pdsh from its ssh args."""
    suffix = f":{port}" if port is not None else ""
    return "".join(f"{address}{suffix}\n" for address in addresses)


def script(invocations: Sequence[Sequence[str]], outputs: Sequence[Path]) -> str:
    """An `sh` script running each invocation in order, output to its file, then its exit."""
    lines = ["#!/bin/sh", "# benchmarks/shell_tools.py: one invocation per workload command"]
    for number, (argv, output) in enumerate(zip(invocations, outputs, strict=True), start=1):
        command = shlex.join(argv)
        lines.append(f"{command} >{shlex.quote(str(output))} 2>&1")
        lines.append(f'echo "command {number} exit $?"')
    return "\n".join(lines) + "\n"


def script_outcome(text: str, commands: int, hosts: int) -> str:
    """ok when every invocation exited 0 (pdsh -S / pssh: every host ran it and exited 0)."""
    exits = [int(code) for _, code in EXIT_LINE.findall(text)]
    failed = [number for number, code in enumerate(exits, start=1) if code != 0]
    verdict = "ok" if len(exits) == commands and not failed else "CHECK"
    detail = f", nonzero exit from command {', '.join(map(str, failed))}" if failed else ""
    ok = len(exits) - len(failed)
    return f"{verdict}: {ok}/{commands} commands ok on all {hosts} hosts{detail}"
