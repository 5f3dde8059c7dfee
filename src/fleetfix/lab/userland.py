"""Each node's PATH: the emulated tools it has, then the machine's own userland.

A node of the default environment gets `<state>/tools` (every shim) and then the machine's
usual directories, as before. A node that lacks some tools (lab/environments.py: a VM with
no kmod or Slurm, a container without systemd, `without: [slurm]`) gets a shim directory
without them and, instead of the machine's directories, `<state>/userland`: a symlink to every
program on the machine's PATH except the commands the lab emulates. So a missing tool is
really missing (bash: `command not found`, exit 127; `command -v` finds nothing) and never
falls through to the machine's own `journalctl`, `systemctl` or `lsmod`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fleetfix.lab.layout import NodeSpec
from fleetfix.lab.sandbox import SYSTEM_PATH
from fleetfix.lab.shims import write_shims

USERLAND_DIR = "userland"


def tools_dir_name(spec: NodeSpec) -> str:
    """The shim directory of a node: `tools`, or one per environment and `without` list."""
    if spec.environment == "bare-metal" and not spec.without:
        return "tools"
    return "-".join(("tools", spec.environment, *sorted(set(spec.without))))


def node_path(state_dir: Path, spec: NodeSpec) -> str:
    name = tools_dir_name(spec)
    if name == "tools":
        return f"{state_dir / name}:{SYSTEM_PATH}"
    return f"{state_dir / name}:{state_dir / USERLAND_DIR}"


def write_tool_dirs(
    state_dir: Path,
    port: int,
    token: str,
    names: Iterable[str],
    nodes: Iterable[tuple[NodeSpec, frozenset[str]]],
) -> None:
    """The shim directory of every (node, absent tools) pair, and the userland if needed."""
    tools = list(names)
    write_shims(state_dir / "tools", port, token, tools)
    write_sudo(state_dir / "tools")
    done = {"tools"}
    for spec, absent in nodes:
        name = tools_dir_name(spec)
        if name not in done:
            done.add(name)
            write_shims(state_dir / name, port, token, [t for t in tools if t not in absent])
            write_sudo(state_dir / name)
    if len(done) > 1:
        write_userland(state_dir / USERLAND_DIR, hidden=set(tools))


SUDO = """#!/bin/sh
# fleetfix lab: sudo on a lab node. The node's user is root, so `sudo -n [-H] [-u USER] --
# CMD` runs CMD as it is (a become_user other than root is not switched to in the lab).
while [ $# -gt 0 ]; do
  case "$1" in
    -u|-g|-p|-C) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
exec "$@"
"""


def write_sudo(directory: Path) -> None:
    """The node's `sudo` (become): a script that runs its command (lab nodes run as root)."""
    path = directory / "sudo"
    path.write_text(SUDO, encoding="utf-8")
    path.chmod(0o755)


def write_userland(directory: Path, hidden: set[str]) -> None:
    """Symlinks to the first program of each name on SYSTEM_PATH, except `hidden` ones."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    seen = set(hidden)
    for folder in SYSTEM_PATH.split(":"):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name in seen or not _executable(entry):
                continue
            seen.add(entry.name)
            (directory / entry.name).symlink_to(entry.path)


def _executable(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file() and os.access(entry.path, os.X_OK)
    except OSError:
        return False
