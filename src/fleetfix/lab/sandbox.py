"""How a node's command runs: a real bash in a per-node mount + UTS namespace, or a fallback.

Namespace mode (needs CAP_SYS_ADMIN, e.g. root): `unshare --mount --uts --propagation private`
bind-mounts the node's own directory over /dev/shm, its boot-id file over
/proc/sys/kernel/random/boot_id and its /proc/driver, sets the hostname, then runs `bash -c`.
The mounts are made before the command runs and a failed mount aborts it, so a command can
never see the machine's real /dev/shm.

Fallback mode (no namespaces): the command runs in plain bash with those three paths rewritten
to the node's files in the command text, FLEETFIX_SHM_DIR exported, and any command that still
mentions `shm` some other way refused -- so it cannot touch the real /dev/shm either.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from fleetfix.lab.state import NodePaths

SANDBOX_ENV = "FLEETFIX_LAB_SANDBOX"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
DEV_SHM = "/dev/shm"
PROC_DRIVER = "/proc/driver"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_SETUP = (
    'mount --bind "$1" /dev/shm && mount --bind "$2" /proc/sys/kernel/random/boot_id '
    '&& mount --bind "$3" /proc/driver && hostname "$4" '
    '|| { echo "fleetfix lab: cannot set up the node sandbox" >&2; exit 125; }; '
    'exec /bin/bash -c "$5" bash'
)
_MENTIONS_SHM = re.compile(r"\bshm\b")
_REFUSAL = (
    "fleetfix lab: this lab runs without mount namespaces (fallback mode), so commands may only "
    "reach /dev/shm by that exact path; refusing a command that names shm another way\n"
)


class SandboxMode(StrEnum):
    NAMESPACE = "namespace"
    FALLBACK = "fallback"


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one command: argv and extra env, or a refusal message."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    refusal: str | None = None


def detect_sandbox() -> SandboxMode:
    """Namespace mode if unshare + bind mounts work here (FLEETFIX_LAB_SANDBOX overrides)."""
    forced = os.environ.get(SANDBOX_ENV, "")
    if forced in (SandboxMode.NAMESPACE, SandboxMode.FALLBACK):
        return SandboxMode(forced)
    with tempfile.TemporaryDirectory(prefix="fleetfix-lab-probe-") as scratch:
        base = Path(scratch)
        paths = NodePaths(base)
        for directory in (paths.shm, paths.proc_driver):
            directory.mkdir()
        paths.boot_id.write_text("probe\n", encoding="ascii")
        argv = namespace_argv(paths, "fleetfix-lab-probe", "test -f /dev/shm/.probe")
        (paths.shm / ".probe").write_text("", encoding="ascii")
        try:
            done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return SandboxMode.FALLBACK
    return SandboxMode.NAMESPACE if done.returncode == 0 else SandboxMode.FALLBACK


def namespace_argv(paths: NodePaths, hostname: str, command: str) -> tuple[str, ...]:
    unshare = shutil.which("unshare", path=SYSTEM_PATH) or "unshare"
    return (
        unshare,
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "--",
        "/bin/bash",
        "-c",
        _SETUP,
        "fleetfix-lab",
        str(paths.shm),
        str(paths.boot_id),
        str(paths.proc_driver),
        hostname,
        command,
    )


def launch(mode: SandboxMode, paths: NodePaths, hostname: str, command: str) -> Launch:
    if mode is SandboxMode.NAMESPACE:
        return Launch(namespace_argv(paths, hostname, command), {})
    env = {"FLEETFIX_SHM_DIR": str(paths.shm), "HOSTNAME": hostname, SANDBOX_ENV: mode.value}
    known = re.sub(
        rf"{re.escape(DEV_SHM)}|{re.escape(BOOT_ID)}|{re.escape(PROC_DRIVER)}", "", command
    )
    if _MENTIONS_SHM.search(known):
        return Launch((), env, refusal=_REFUSAL)
    rewritten = (
        command.replace(BOOT_ID, str(paths.boot_id))
        .replace(PROC_DRIVER, str(paths.proc_driver))
        .replace(DEV_SHM, str(paths.shm))
    )
    return Launch(("/bin/bash", "-c", rewritten), env)
