"""A probe's tool missing from the node: how its command says so and how its parser reads it.

A probe's command looks for its tool first and, when the node does not have it, prints
`### fleetfix not-installed TOOL` and exits 0, so "not installed" does not depend on a shell's
wording. Output of older commands and pasted captures says it in the shell's own words, which
are read too (`missing_tool`):

    bash      bash: line 1: ibstatus: command not found   (or `/path/x.sh: line 1: ...`)
    dash      /bin/sh: 1: scontrol: not found
    busybox   sh: dcgmi: not found
    zsh       zsh: command not found: dcgmi
    timeout   timeout: failed to run command 'dcgmi': No such file or directory  (C locale)

A parser that finds either raises errors.ToolNotInstalled: the node does not have the tool,
which is not a fault of the node, and there are no facts.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Iterable

MARKER = "### fleetfix not-installed "
_SHELL_SAYS = (
    # bash (`bash: line 1: X: command not found`), sudo, any `PREFIX: X: command not found`
    re.compile(r"^(?:.*?: )?(?:line \d+: )?(?P<tool>[^\s:]+): command not found$"),
    # dash (`/bin/sh: 1: X: not found`) and busybox ash (`sh: X: not found`)
    re.compile(r"^\S+: (?:\d+: )?(?P<tool>[^\s:]+): not found$"),
    # bash running a path that does not exist: `bash: line 1: /opt/x/all_reduce_perf: No such...`
    re.compile(r"^(?:.*?: )?(?:line \d+: |\d+: )?(?P<tool>/[^\s:]+): No such file or directory$"),
    re.compile(r"^zsh: command not found: (?P<tool>\S+)$"),
    # timeout, env, nohup: quoted with U+2018 and U+2019 in a UTF-8 locale, with ' in C
    re.compile(
        r"^\S+: failed to run command [\u2018'](?P<tool>[^\u2019']+)[\u2019']:"
        r" No such file or directory$"
    ),
)


def unless_installed(tools: Iterable[str]) -> str:
    """Shell that ends the command, printing the marker for the first of `tools` (names looked
    up in PATH, or paths) that is not there, with exit status 0; to put before the commands
    that run them."""
    words = " ".join(shlex.quote(tool) for tool in tools)
    return (
        f'for t in {words}; do command -v "$t" >/dev/null 2>&1 || '
        f'{{ echo "{MARKER}$t"; exit 0; }}; done; '
    )


def missing_tool(text: str, tools: Collection[str] | re.Pattern[str]) -> str | None:
    """The tool the output says is not on the node: the command's marker, or a shell's "not
    found" line naming one of `tools` (or a name the pattern matches whole; a path counts by
    its last part). None when it says neither."""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(MARKER):
            return line.removeprefix(MARKER).strip()
        for pattern in _SHELL_SAYS:
            match = pattern.match(line)
            if match and _wanted(_base(match["tool"]), tools):
                return match["tool"]
    return None


def _wanted(name: str, tools: Collection[str] | re.Pattern[str]) -> bool:
    if isinstance(tools, re.Pattern):
        return tools.fullmatch(name) is not None
    return any(_base(tool) == name for tool in tools)


def _base(tool: str) -> str:
    return tool.rstrip("/").rsplit("/", 1)[-1]
