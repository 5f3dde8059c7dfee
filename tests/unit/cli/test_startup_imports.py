"""`fleetfix run` sends its first command without loading what a run may not need (issue 21).

Each check runs a fresh interpreter and reads its sys.modules: at the moment `fleetfix run`
starts its first command (an audit hook on the local transport's shell), and after
`fleetfix --help`. Nothing here times anything: which modules are loaded is what decides it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from fleetfix.cli import COMMANDS, build_parser

NOT_BEFORE_THE_FIRST_COMMAND = (
    "networkx",  # the topology's graph algorithms: a switch's blast radius
    "rich",  # a terminal's live view, and the end of the run
    "psycopg",  # a team's PostgreSQL journal
    "lxml",  # nvidia-smi XML the scan declines (nvidia_smi_scan); 3-4 MB of RSS
    "fleetfix.report.html",
    "fleetfix.report.json",
    "fleetfix.report.junit",
    "fleetfix.report.terminal",
    "fleetfix.report.progress",
    "fleetfix.report.summary",
    "fleetfix.notify.observer",  # webhooks
    "fleetfix.notify.webhook",
    "fleetfix.notify.evidence",
    "fleetfix.metrics",  # --metrics-file
    "fleetfix.lab.control",  # an inventory that names a lab scenario
    "fleetfix.topology.file",  # --topology-file
    # Probes and actions the playbook does not name (made on first use: plugins.Registry)
    "fleetfix.probes.dcgm_diag",
    "fleetfix.probes.nccl_tests",
    "fleetfix.probes.nvidia_smi",
    "fleetfix.actions.dcgm",
    "fleetfix.actions.gpu",
    "fleetfix.actions.node",
)
SUBCOMMAND_MODULES = tuple(commands.module for commands in COMMANDS)

PLAYBOOK = """\
- name: sweep
  hosts: all
  gather_facts: false
  tasks:
    - name: xid
      probe: xid
"""
INVENTORY = "[gpu]\nnode1 ansible_connection=local rack=r1 leaf=l1 spine=s1 gpus=8\n"

# Run in the child: on the first `sh -c COMMAND` (the local transport's first command), write
# the loaded modules and stop the process right there.
AT_FIRST_COMMAND = """
import json, os, sys

def hook(event, args):
    if event == "subprocess.Popen" and list(args[1])[1:2] == ["-c"]:
        with open(sys.argv[1], "w") as out:
            json.dump(sorted(sys.modules), out)
        os._exit(0)

sys.addaudithook(hook)
from fleetfix.cli import main
main(sys.argv[2:])
"""
AT_EXIT = """
import atexit, json, sys

def dump():
    with open(sys.argv[1], "w") as out:
        json.dump(sorted(sys.modules), out)

atexit.register(dump)
from fleetfix.cli import main
main(sys.argv[2:])
"""


def _modules(tmp_path: Path, code: str, argv: list[str]) -> set[str]:
    found = tmp_path / "modules.json"
    # Piped output, as from cron or `| tee`: no variable may make rich take it for a terminal
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(found), *argv],
        check=False,  # the modules written are the answer; the message says why not
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.exists(), f"exit {done.returncode}: {done.stdout}{done.stderr}"
    return set(json.loads(found.read_text(encoding="utf-8")))


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_run_sends_its_first_command_without_them(tmp_path: Path) -> None:
    (tmp_path / "pb.yml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "inventory.ini").write_text(INVENTORY, encoding="utf-8")
    argv = ["run", "pb.yml", "-i", "inventory.ini", "--journal", str(tmp_path / "j.db")]

    modules = _modules(tmp_path, AT_FIRST_COMMAND, argv)

    assert "fleetfix.engine" in modules  # it did get as far as running the playbook
    assert _loaded(modules, NOT_BEFORE_THE_FIRST_COMMAND) == []
    others = tuple(m for m in SUBCOMMAND_MODULES if m != "fleetfix.cli.run_cmd")
    assert _loaded(modules, others) == []


def test_help_loads_no_subcommand(tmp_path: Path) -> None:
    modules = _modules(tmp_path, AT_EXIT, ["--help"])

    assert _loaded(modules, NOT_BEFORE_THE_FIRST_COMMAND) == []
    assert _loaded(modules, SUBCOMMAND_MODULES) == []
    assert _loaded(modules, ("fleetfix.engine", "fleetfix.journal", "asyncssh")) == []


def test_the_command_table_says_what_each_module_adds() -> None:
    """The top level lists COMMANDS' helps without importing the modules: they must be
    the helps (and the commands) the modules themselves add."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    added = [(action.dest, action.help) for action in sub._choices_actions]

    assert added == [pair for commands in COMMANDS for pair in commands.helps]


def test_only_the_named_command_is_built_in_full() -> None:
    parser = build_parser(["inventory", "--list"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))

    assert sub.choices["inventory"].add_help
    assert not sub.choices["run"].add_help  # listed by name and help only
