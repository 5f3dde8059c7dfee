"""Run each contender (bare asyncssh, fleetfix, ansible-playbook, pdsh, pssh) once and measure it.

Each contender is a whole process timed by GNU time (measure.run_timed), started on the
contender cores when pinning (Setup.cpus) and watched for the lab's first command. Ansible gets
the settings a careful operator would give it at scale: forks 50, SSH pipelining, ControlPersist
multiplexing (one SSH connection per host for all five tasks), known_hosts checking against the
lab's file, and a private ANSIBLE_HOME so nothing outside the scratch dir is touched; its ssh
masters are counted and ended through their control sockets (ssh_masters.py). pdsh and pssh:
shell_tools.py.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from measure import Invocation, Measurement, recap_outcome, run_timed, time_to_first_command
from shell_tools import (
    SshLogin,
    hosts_file_text,
    pdsh_argv,
    pdsh_env,
    pssh_argv,
    script,
    script_outcome,
)
from ssh_masters import end_ssh_masters
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
from fleetfix.lab.server import BASH_ENV_FILE

FIRST_COMMAND_TIMEOUT = 300.0


@dataclass(frozen=True, slots=True)
class Setup:
    """Everything the contenders share: the lab, its inventory, the workload, a scratch dir.

    `cpus`: the cores every contender runs on (None: unpinned); `label` tells the files of a
    pinned round from an unpinned one.
    """

    lab: LabHandle
    work: Path
    inventory: Path
    commands: tuple[ProbeCommand, ...]
    bin_dir: Path
    cpus: frozenset[int] | None = None
    label: str = "run"

    @property
    def python(self) -> str:
        return str(self.bin_dir / "python")

    @property
    def bash_env(self) -> Path:
        """The file the lab's bash opens at the start of every command (watch.FirstOpen)."""
        return self.lab.state_dir / BASH_ENV_FILE

    @property
    def login(self) -> SshLogin:
        lab = self.lab
        return SshLogin(lab.user, lab.port, lab.client_key, lab.known_hosts)

    def path(self, tool: str, hosts: int, suffix: str) -> Path:
        """A scratch file of one run: `bare-1000-pinned.out`."""
        return self.work / f"{tool}-{hosts}-{self.label}{suffix}"

    def invocation(
        self, argv: Sequence[str], out: Path, env: Mapping[str, str] | None = None
    ) -> Invocation:
        """A contender's command line on the contender cores, watched for its first command."""
        return Invocation(argv, out, env, cpus=self.cpus, first_open=self.bash_env)


def _measure(setup: Setup, tool: str, hosts: int, invocation: Invocation) -> Measurement:
    return Measurement(tool, hosts, run_timed(invocation, setup.lab.pid))


def _fanout_spec(setup: Setup, hosts: int, commands: Sequence[str], path: Path) -> Path:
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
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def _fanout_argv(setup: Setup, spec: Path) -> list[str]:
    return [setup.python, str(Path(__file__).with_name("bare_fanout.py")), str(spec)]


def warm_up(setup: Setup, hosts: int) -> float:
    """One untimed command per host, so that no contender pays the lab's first touch."""
    command = "nvidia-smi -L >/dev/null; dmesg -T >/dev/null"
    spec = _fanout_spec(setup, hosts, [command], setup.path("warmup", hosts, ".json"))
    invocation = Invocation(_fanout_argv(setup, spec), spec.with_suffix(".out"), cpus=setup.cpus)
    return run_timed(invocation, setup.lab.pid).time.wall_s


def run_bare(setup: Setup, hosts: int) -> Measurement:
    commands = [c.command for c in setup.commands]
    spec = _fanout_spec(setup, hosts, commands, setup.path("bare", hosts, ".json"))
    out = spec.with_suffix(".out")
    argv = _fanout_argv(setup, spec)
    measured = _measure(setup, "bare asyncssh", hosts, setup.invocation(argv, out))
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


def fleetfix_argv(setup: Setup, hosts: int, journal: Path, shards: int | None = None) -> list[str]:
    """`fleetfix run` on the first `hosts` lab hosts with forks 50 and a scratch journal;
    `shards`: that many shard workers forced (`--shards N`), else fleetfix's default."""
    playbook = setup.work / "five-probes.yml"
    playbook.write_text(fleetfix_playbook(), encoding="utf-8")
    limit = write_limit(journal.with_suffix(".limit"), list(first_hosts(setup.lab, hosts)))
    forced = ("--shards", str(shards)) if shards is not None else ()
    return [
        *(str(setup.bin_dir / "fleetfix"), "run", str(playbook), "-i", str(setup.inventory)),
        *("--yes", "--journal", str(journal), "-f", str(FORKS), "--limit", f"@{limit}"),
        *forced,
    ]


def journal_bytes(journal: Path) -> int:
    """The journal's size on disk after a run: the database plus its write-ahead log."""
    files = (journal, journal.with_name(journal.name + "-wal"))
    return sum(path.stat().st_size for path in files if path.exists())


def run_fleetfix(setup: Setup, hosts: int, shards: int | None = None) -> Measurement:
    """fleetfix as it runs by default, or with `shards` workers forced (its own table row)."""
    tool = "fleetfix" if shards is None else f"fleetfix --shards {shards}"
    journal = setup.path(tool.replace(" --shards ", "-shards-"), hosts, ".db")
    out = journal.with_suffix(".out")
    invocation = setup.invocation(fleetfix_argv(setup, hosts, journal, shards), out)
    measured = _measure(setup, tool, hosts, invocation)
    text = out.read_text(encoding="utf-8", errors="replace")
    outcome = recap_outcome(text, hosts, len(setup.commands))
    return replace(measured, outcome=outcome, journal_bytes=journal_bytes(journal))


def fleetfix_first_command(setup: Setup, hosts: int) -> float | None:
    """Seconds from starting `fleetfix run` on `hosts` hosts to the lab's first command.

    fleetfix is ended (its process group, by id) as soon as that command arrives.
    """
    journal = setup.path("first-command", hosts, ".db")
    argv = fleetfix_argv(setup, hosts, journal)
    invocation = replace(
        setup.invocation(argv, journal.with_suffix(".out")), timeout=FIRST_COMMAND_TIMEOUT
    )
    return time_to_first_command(invocation)


def profile_fleetfix(setup: Setup, hosts: int, profile: Path) -> float:
    """One more, untimed-for-the-table fleetfix run under cProfile; returns its wall seconds."""
    argv = fleetfix_argv(setup, hosts, setup.path("profile", hosts, ".db"))
    argv = [setup.python, "-m", "cProfile", "-o", str(profile), "-m", "fleetfix", *argv[1:]]
    invocation = setup.invocation(argv, setup.path("profile", hosts, ".out"))
    return run_timed(invocation, setup.lab.pid).time.wall_s


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
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir(setup)),
        "ANSIBLE_SSH_ARGS": ssh_args,
        "ANSIBLE_SSH_PIPELINING": "True",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORKS": str(FORKS),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CONFIG": str(home / "ansible.cfg"),  # absent on purpose: no stray config
    }


def control_dir(setup: Setup) -> Path:
    """Where Ansible's ssh masters put their sockets (ssh_masters.py finds them there)."""
    # Unix socket paths are limited to 108 bytes; the scratch dir is short, keep it that way.
    return setup.work / "cp"


def run_ansible(setup: Setup, hosts: int) -> Measurement:
    playbook = setup.work / "five-raw.yml"
    playbook.write_text(ansible_playbook(setup.commands), encoding="utf-8")
    out = setup.path("ansible", hosts, ".out")
    limit = write_limit(out.with_suffix(".limit"), list(first_hosts(setup.lab, hosts)))
    argv = [str(setup.bin_dir / "ansible-playbook"), "-i", str(setup.inventory)]
    argv += [str(playbook), "-f", str(FORKS), "--limit", f"@{limit}"]
    invocation = setup.invocation(argv, out, ansible_env(setup))
    try:
        measured = _measure(setup, "ansible-playbook", hosts, invocation)
    finally:
        masters = end_ssh_masters(control_dir(setup))
    text = out.read_text(encoding="utf-8", errors="replace")
    outcome = recap_outcome(text, hosts, len(setup.commands))
    note = (
        f"; {masters.count} ssh masters (found by control socket): {masters.cpu_s:.1f} CPU s, "
        f"{masters.rss_kb / 1024:.0f} MB peak RSS, both counted"
    )
    return replace(
        measured,
        extra_cpu_s=masters.cpu_s,
        extra_rss_kb=masters.rss_kb,
        outcome=outcome + note,
    )


def _shell_tool_run(
    setup: Setup, tool: str, hosts: int, invocations: list[list[str]], env: Mapping[str, str]
) -> Measurement:
    """Time the generated script; `tool` names the row, its first word the scratch files."""
    tag = tool.split(maxsplit=1)[0]
    outputs = [setup.path(tag, hosts, f".{n}.out") for n in range(1, len(invocations) + 1)]
    script_path = setup.path(tag, hosts, ".sh")
    script_path.write_text(script(invocations, outputs), encoding="utf-8")
    out = script_path.with_suffix(".out")
    invocation = setup.invocation(["/bin/sh", str(script_path)], out, os.environ | dict(env))
    measured = _measure(setup, tool, hosts, invocation)
    text = out.read_text(encoding="utf-8", errors="replace")
    return replace(measured, outcome=script_outcome(text, len(invocations), hosts))


def run_pdsh(setup: Setup, hosts: int, tool: str) -> Measurement:
    """`pdsh -R ssh -f 50` once per command (tool: the pdsh binary)."""
    addresses = list(first_hosts(setup.lab, hosts).values())
    hosts_file = setup.path("pdsh", hosts, ".hosts")
    hosts_file.write_text(hosts_file_text(addresses, None), encoding="utf-8")
    invocations = [pdsh_argv(tool, setup.login, hosts_file, c.command) for c in setup.commands]
    return _shell_tool_run(setup, "pdsh", hosts, invocations, pdsh_env(setup.login))


def run_pssh(setup: Setup, hosts: int, tool: str) -> Measurement:
    """`parallel-ssh -p 50` once per command, each host's output to a file (tool: its binary)."""
    addresses = list(first_hosts(setup.lab, hosts).values())
    hosts_file = setup.path("pssh", hosts, ".hosts")
    hosts_file.write_text(hosts_file_text(addresses, setup.lab.port), encoding="utf-8")
    invocations = [
        pssh_argv(tool, setup.login, hosts_file, setup.path("pssh", hosts, f".{n}.d"), c.command)
        for n, c in enumerate(setup.commands, start=1)
    ]
    return _shell_tool_run(setup, "pssh (parallel-ssh)", hosts, invocations, {})


def venv_bin() -> Path:
    """The directory of the interpreter running the benchmark (the project's .venv/bin)."""
    return Path(sys.executable).parent
