"""Run each contender (bare asyncssh, fleetfix, ansible-playbook) once on the lab and measure it.

Each contender is a whole process timed by GNU time (measure.run_timed). Ansible gets the
settings a careful operator would give it at scale: forks 50, SSH pipelining, ControlPersist
multiplexing (one SSH connection per host for all five tasks), known_hosts checking against the
lab's file, and a private ANSIBLE_HOME so nothing outside the scratch dir is touched.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from measure import (
    Invocation,
    Measurement,
    process_cpu,
    recap_outcome,
    run_timed,
)
from workload import (
    FORKS,
    MAX_HANDSHAKES,
    ProbeCommand,
    ansible_playbook,
    first_hosts,
    fleetfix_playbook,
    write_limit,
)

from fleetfix.lab.control import LabHandle

MASTER_PID = re.compile(r"pid=(\d+)")


@dataclass(frozen=True, slots=True)
class Setup:
    """Everything the contenders share: the lab, its inventory, the workload, a scratch dir."""

    lab: LabHandle
    work: Path
    inventory: Path
    commands: tuple[ProbeCommand, ...]
    bin_dir: Path

    @property
    def python(self) -> str:
        return str(self.bin_dir / "python")


def _measure(setup: Setup, tool: str, hosts: int, invocation: Invocation) -> Measurement:
    return Measurement(tool, hosts, run_timed(invocation, setup.lab.pid))


def _fanout_spec(setup: Setup, hosts: int, commands: Sequence[str], tag: str) -> Path:
    spec = {
        "addresses": list(first_hosts(setup.lab, hosts).values()),
        "port": setup.lab.port,
        "user": setup.lab.user,
        "client_key": str(setup.lab.client_key),
        "known_hosts": str(setup.lab.known_hosts),
        "commands": list(commands),
        "concurrency": FORKS,
        "handshakes": MAX_HANDSHAKES,
    }
    path = setup.work / f"{tag}-spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def _fanout_argv(setup: Setup, spec: Path) -> list[str]:
    return [setup.python, str(Path(__file__).with_name("bare_fanout.py")), str(spec)]


def warm_up(setup: Setup, hosts: int) -> float:
    """One untimed command per host, so that no contender pays the lab's first touch."""
    spec = _fanout_spec(setup, hosts, ["nvidia-smi -L >/dev/null; dmesg -T >/dev/null"], "warmup")
    invocation = Invocation(_fanout_argv(setup, spec), setup.work / "warmup.out")
    return run_timed(invocation, setup.lab.pid).time.wall_s


def run_bare(setup: Setup, hosts: int) -> Measurement:
    spec = _fanout_spec(setup, hosts, [c.command for c in setup.commands], "bare")
    out = setup.work / "bare.out"
    measured = _measure(setup, "bare asyncssh", hosts, Invocation(_fanout_argv(setup, spec), out))
    text = out.read_text(encoding="utf-8", errors="replace")
    return replace(measured, outcome=_fanout_outcome(text, hosts, len(setup.commands)))


def _fanout_outcome(text: str, hosts: int, commands: int) -> str:
    try:
        summary = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"CHECK: unreadable output {text[-200:]!r}"
    expected = hosts * commands
    verdict = "ok" if summary["hosts_ok"] == hosts else "CHECK"
    errors = f" ({summary['errors'][0]})" if summary["errors"] else ""
    return f"{verdict}: {summary['commands_ok']}/{expected} commands ok{errors}"


def fleetfix_argv(setup: Setup, hosts: int, tag: str) -> list[str]:
    """`fleetfix run` on the first `hosts` lab hosts with forks 50 and a scratch journal."""
    playbook = setup.work / "five-probes.yml"
    playbook.write_text(fleetfix_playbook(), encoding="utf-8")
    limit = write_limit(setup.work / f"{tag}-limit.txt", list(first_hosts(setup.lab, hosts)))
    journal = setup.work / f"{tag}-journal.db"
    return [
        *("run", str(playbook), "-i", str(setup.inventory), "--yes"),
        *("--journal", str(journal), "-f", str(FORKS), "--limit", f"@{limit}"),
    ]


def run_fleetfix(setup: Setup, hosts: int) -> Measurement:
    argv = [str(setup.bin_dir / "fleetfix"), *fleetfix_argv(setup, hosts, "fleetfix")]
    out = setup.work / "fleetfix.out"
    measured = _measure(setup, "fleetfix", hosts, Invocation(argv, out))
    text = out.read_text(encoding="utf-8", errors="replace")
    return replace(measured, outcome=recap_outcome(text, hosts, len(setup.commands)))


def profile_fleetfix(setup: Setup, hosts: int, profile: Path) -> float:
    """One more, untimed-for-the-table fleetfix run under cProfile; returns its wall seconds."""
    argv = [setup.python, "-m", "cProfile", "-o", str(profile), "-m", "fleetfix"]
    argv += fleetfix_argv(setup, hosts, "profile")
    return run_timed(Invocation(argv, setup.work / "profile.out"), setup.lab.pid).time.wall_s


def ansible_env(setup: Setup) -> dict[str, str]:
    """ansible-playbook settings for the lab; everything Ansible writes stays in `work`."""
    home = setup.work / "ansible"
    ssh_args = (
        "-C -o ControlMaster=auto -o ControlPersist=1800s "
        f"-o UserKnownHostsFile={setup.lab.known_hosts} -o StrictHostKeyChecking=yes"
    )
    return os.environ | {
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(_control_dir(setup)),
        "ANSIBLE_SSH_ARGS": ssh_args,
        "ANSIBLE_SSH_PIPELINING": "True",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORKS": str(FORKS),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CONFIG": str(home / "ansible.cfg"),  # absent on purpose: no stray config
    }


def _control_dir(setup: Setup) -> Path:
    # Unix socket paths are limited to 108 bytes; the scratch dir is short, keep it that way.
    return setup.work / "cp"


def run_ansible(setup: Setup, hosts: int) -> Measurement:
    playbook = setup.work / "five-raw.yml"
    playbook.write_text(ansible_playbook(setup.commands), encoding="utf-8")
    limit = write_limit(setup.work / "ansible-limit.txt", list(first_hosts(setup.lab, hosts)))
    argv = [str(setup.bin_dir / "ansible-playbook"), "-i", str(setup.inventory)]
    argv += [str(playbook), "-f", str(FORKS), "--limit", f"@{limit}"]
    out = setup.work / "ansible.out"
    try:
        measured = _measure(
            setup, "ansible-playbook", hosts, Invocation(argv, out, ansible_env(setup))
        )
    finally:
        masters = end_ssh_masters(_control_dir(setup))
    text = out.read_text(encoding="utf-8", errors="replace")
    outcome = recap_outcome(text, hosts, len(setup.commands))
    note = f"; {masters.count} ssh masters: {masters.cpu_s:.1f} CPU s, {masters.rss_mb:.0f} MB RSS"
    return replace(measured, extra_cpu_s=masters.cpu_s, outcome=outcome + note)


@dataclass(frozen=True, slots=True)
class MasterCost:
    """What Ansible's backgrounded ssh ControlPersist masters used (GNU time cannot see them)."""

    count: int
    cpu_s: float
    rss_mb: float


def end_ssh_masters(control_dir: Path) -> MasterCost:
    """Read each master's CPU and RSS through its socket, then ask it to exit (`ssh -O exit`)."""
    count, cpu, rss_kb = 0, 0.0, 0
    sockets = sorted(control_dir.iterdir()) if control_dir.is_dir() else []
    for socket_path in sockets:
        pid = _master_pid(socket_path)
        if pid is not None:
            count += 1
            cpu += _safe_cpu(pid)
            rss_kb += _rss_kb(pid)
        _ssh_control(socket_path, "exit")
    return MasterCost(count, cpu, rss_kb / 1024)


def _ssh_control(socket_path: Path, command: str) -> str:
    done = subprocess.run(
        ["ssh", "-o", f"ControlPath={socket_path}", "-O", command, "lab-node"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.stderr + done.stdout


def _master_pid(socket_path: Path) -> int | None:
    match = MASTER_PID.search(_ssh_control(socket_path, "check"))
    return int(match[1]) if match else None


def _safe_cpu(pid: int) -> float:
    try:
        return process_cpu(pid).total
    except OSError:
        return 0.0


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def venv_bin() -> Path:
    """The directory of the interpreter running the benchmark (the project's .venv/bin)."""
    return Path(sys.executable).parent
