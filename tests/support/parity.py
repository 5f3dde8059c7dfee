"""Run one playbook under ansible-playbook and under fleetfix on localhost; compare the two.

Both run `-i localhost, -c local` (fleetfix: `--transport local`); what is compared is what an
operator reads: the TASK banners in order, each host line's verdict word (`ok`, `changed`,
`fatal`, `skipping`, `...ignoring`; a loop's lines one per item, with the item's label), the
PLAY RECAP line and the exit code.
Registered values are compared by the playbook itself: its `assert` steps state Ansible's
values, and a failed assertion shows in the recap of whichever tool disagrees.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
_BANNER = re.compile(r"^(TASK|RUNNING HANDLER|PLAY) \[(.*)\] \*+$")
_VERDICT = re.compile(
    r"^(ok|changed|fatal|failed|skipping): \[localhost\](?: => \(item=(.*?)\)| \(item=(.*?)\))?"
)
_RECAP = re.compile(r"^localhost\s+: (.*\S)\s*$")


@dataclass(frozen=True)
class Seen:
    """What one tool showed for one run."""

    banners: tuple[str, ...]
    verdicts: tuple[str, ...]
    recap: str
    exit_code: int
    output: str
    stdout: str = ""


def ansible_playbook(playbook: Path, *extra: str) -> Seen:
    """Run ansible-playbook on localhost with the local connection, no config file."""
    home = playbook.parent / ".ansible-home"
    # Run where no ansible.cfg is (ANSIBLE_CONFIG cannot name "none"): cwd is the playbook's.
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(home / "remote"),
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
    }
    command = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local"]
    return _run([*command, *extra, str(playbook)], env, playbook.parent)


def fleetfix(playbook: Path, *extra: str) -> Seen:
    """Run fleetfix on localhost with the local transport."""
    # Not next to the playbook: its group_vars/ must be read as the playbook's, not the inventory's.
    inventory = playbook.parent / ".fleetfix-inventory" / "hosts.ini"
    inventory.parent.mkdir(exist_ok=True)
    inventory.write_text("localhost\n")
    journal = playbook.parent / "journal.sqlite"
    env = {**os.environ, "NO_COLOR": "1", "FLEETFIX_JOURNAL": str(journal)}
    command = [str(VENV_BIN / "fleetfix"), "run", "-i", str(inventory), "--transport", "local"]
    return _run([*command, "--yes", *extra, str(playbook)], env, playbook.parent)


def _run(command: list[str], env: dict[str, str], cwd: Path) -> Seen:
    done = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    output = done.stdout + done.stderr
    banners: list[str] = []
    verdicts: list[str] = []
    recap = ""
    for line in done.stdout.splitlines():
        if match := _BANNER.match(line):
            banners.append(f"{match.group(1)} [{match.group(2)}]")
        elif match := _VERDICT.match(line):
            word = "fatal" if match.group(1) == "failed" else match.group(1)
            label = match.group(2) if match.group(2) is not None else match.group(3)
            verdicts.append(word if label is None else f"{word} (item={label})")
        elif line == "...ignoring":
            verdicts.append("ignoring")
        elif match := _RECAP.match(line):
            recap = " ".join(match.group(1).split())
    return Seen(tuple(banners), tuple(verdicts), recap, done.returncode, output, done.stdout)


def assert_same(theirs_copy: Path, ours_copy: Path, *extra: str) -> Seen:
    """Run ansible-playbook on one copy of a playbook and fleetfix on another (each writes
    its own files); assert they agree on banners, verdicts, recap and exit code."""
    theirs = ansible_playbook(theirs_copy, *extra)
    ours = fleetfix(ours_copy, *extra)
    where = f"\n--- ansible-playbook:\n{theirs.output}\n--- fleetfix:\n{ours.output}"
    assert ours.banners == theirs.banners, where
    assert ours.verdicts == theirs.verdicts, where
    assert ours.recap == theirs.recap, where
    assert ours.exit_code == theirs.exit_code, where
    return ours


_PLAY_LINE = re.compile(r"^(  play #\d+ \(.*\): .*\tTAGS: \[)(.*)\]$")


def listed(seen: Seen, copy: Path) -> list[str]:
    """A --list-tasks (or --list-hosts) run's standard output, line by line, with the copy's
    directory left out of the playbook's path and each play line's tags sorted:
    ansible-playbook prints a play's own tags in its set's order, which changes from run to
    run. Every other line is compared as printed."""
    return [_sorted_play_tags(line) for line in seen.stdout.replace(f"{copy}/", "").splitlines()]


def _sorted_play_tags(line: str) -> str:
    match = _PLAY_LINE.match(line)
    if match is None:
        return line
    return f"{match.group(1)}{','.join(sorted(match.group(2).split(',')))}]"


def assert_same_listing(theirs_copy: Path, ours_copy: Path, *extra: str) -> list[str]:
    """Both tools' `--list-tasks` output for the playbook, which must be the same."""
    theirs = ansible_playbook(theirs_copy, "--list-tasks", *extra)
    ours = fleetfix(ours_copy, "--list-tasks", *extra)
    where = f"\n--- ansible-playbook:\n{theirs.output}\n--- fleetfix:\n{ours.output}"
    assert theirs.exit_code == 0, where
    assert listed(ours, ours_copy.parent) == listed(theirs, theirs_copy.parent), where
    assert ours.exit_code == 0, where
    return listed(ours, ours_copy.parent)
