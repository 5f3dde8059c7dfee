"""Helpers for "the tool is not installed": a probe's real command run by a real shell on a PATH
without the tool, and the shells' own words for a missing command, as real runs printed them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.probes.cases import SAMPLES

REAL_NODE = SAMPLES / "real-nodes" / "h200-sxm-vm-580.159.04"
"""Captures from an H200 VM without Slurm, InfiniBand, DCGM, nccl-tests or systemd."""

SHELLS = ("sh", "bash")
"""`fleetfix --transport local` runs /bin/sh (dash here); SSH logins run bash."""

BASE_TOOLS = ("cat", "mktemp", "rm", "hostname", "grep", "date", "id", "df", "find", "awk", "sort")


def shell_says(shell: str, tool: str, script: str = "/tmp/probe.sh") -> str:
    """What `shell` printed on a real node for a command it did not find (probe-json.out of
    the H200 run shows dash's form, probe-*.txt bash's running a script)."""
    if shell == "sh":
        return f"/bin/sh: 1: {tool}: not found\n"
    return f"{script}: line 1: {tool}: command not found\n"


def bare_path(tmp_path: Path, tools: tuple[str, ...] = BASE_TOOLS) -> str:
    """A PATH of one directory holding links to `tools` only (none of the probes' tools)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in tools:
        found = shutil.which(name)
        if found is not None and not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(found)
    return str(bin_dir)


def run(command: str, shell: str, path: str) -> subprocess.CompletedProcess[str]:
    """`shell -c command` with PATH=`path` and nothing else in the environment."""
    executable = shutil.which(shell)
    assert executable is not None, f"{shell} is needed for this test"
    return subprocess.run(
        [executable, "-c", command],
        env={"PATH": path},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
