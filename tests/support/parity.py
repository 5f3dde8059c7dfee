"""Run one playbook under ansible-playbook and under fleetfix on localhost; compare the two.

Both run `-i localhost, -c local` (fleetfix: `--transport local`); what is compared is what an
operator reads: the TASK banners in order, each host line's verdict word (`ok`, `changed`,
`fatal`, `skipping`, `...ignoring`; a loop's lines one per item, with the item's label), the
values printed whole (each `debug` and `assert` block, `ok: [h] => {` to `}`), the PLAY RECAP
line and the exit code.
Registered values are compared by the playbook itself: its `assert` steps state Ansible's
values, and a failed assertion shows in the recap of whichever tool disagrees.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fleetfix.cli.loading import builtin_catalog
from fleetfix.playbook.loader import validate_playbook

VENV_BIN = Path(sys.executable).parent
_BANNER = re.compile(r"^(TASK|RUNNING HANDLER|PLAY) \[(.*)\] \*+$")
_VERDICT = re.compile(
    r"^(ok|changed|fatal|failed|skipping): \[([^\]]+)\](?: => \(item=(.*?)\)| \(item=(.*?)\))?"
)
_RECAP = re.compile(r"^(\S+)\s+: (ok=.*\S)\s*$")


@dataclass(frozen=True)
class Seen:
    """What one tool showed for one run."""

    banners: tuple[str, ...]
    verdicts: tuple[str, ...]
    recap: str
    exit_code: int
    output: str
    stdout: str = ""
    other_recaps: tuple[str, ...] = ()
    """The recap lines of hosts other than localhost (add_host's), `host: counts`."""
    printed: tuple[str, ...] = ()
    """Each result printed whole (a debug's or assert's `=> {` ... `}`), in order."""


def ansible_playbook(playbook: Path, *extra: str, hosts: tuple[str, ...] = ("localhost",)) -> Seen:
    """Run ansible-playbook on `hosts` (localhost) with the local connection, no config file."""
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
    listed = "".join(f"{host}," for host in hosts)
    command = [str(VENV_BIN / "ansible-playbook"), "-i", listed, "-c", "local"]
    return _run([*command, *extra, str(playbook)], env, playbook.parent)


def fleetfix(playbook: Path, *extra: str, hosts: tuple[str, ...] = ("localhost",)) -> Seen:
    """Run fleetfix on `hosts` (localhost) with the local transport."""
    # Not next to the playbook: its group_vars/ must be read as the playbook's, not the inventory's.
    inventory = playbook.parent / ".fleetfix-inventory" / "hosts.ini"
    inventory.parent.mkdir(exist_ok=True)
    inventory.write_text("".join(f"{host}\n" for host in hosts))
    journal = playbook.parent / "journal.sqlite"
    # Without tests/conftest.py's ANSIBLE_GATHERING=explicit: both tools at Ansible's default.
    inherited = {k: v for k, v in os.environ.items() if k != "ANSIBLE_GATHERING"}
    env = {**inherited, "NO_COLOR": "1", "FLEETFIX_JOURNAL": str(journal)}
    command = [str(VENV_BIN / "fleetfix"), "run", "-i", str(inventory), "--transport", "local"]
    return _run([*command, "--yes", *extra, str(playbook)], env, playbook.parent)


def _run(command: list[str], env: dict[str, str], cwd: Path) -> Seen:
    done = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    output = done.stdout + done.stderr
    banners: list[str] = []
    verdicts: list[str] = []
    recaps: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if match := _BANNER.match(line):
            banners.append(f"{match.group(1)} [{match.group(2)}]")
            verdicts.append("")  # where a step's lines end (for _hosts_sorted)
        elif match := _VERDICT.match(line):
            verdicts.append(_verdict(match))
        elif line == "...ignoring":
            verdicts.append("ignoring")
        elif match := _RECAP.match(line):
            recaps[match.group(1)] = " ".join(match.group(2).split())
    recap = recaps.pop("localhost", "")
    others = tuple(f"{host}: {counts}" for host, counts in sorted(recaps.items()))
    verdicts = _hosts_sorted(verdicts)
    return Seen(
        tuple(banners),
        tuple(verdicts),
        recap,
        done.returncode,
        output,
        done.stdout,
        others,
        tuple(_printed(done.stdout)),
    )


def _printed(stdout: str) -> list[str]:
    """Every result printed whole: from a verdict line ending `=> {` to its closing `}`; by
    host, each host's in the order printed (hosts finish a step in any order, in both tools)."""
    blocks: list[str] = []
    lines = iter(stdout.splitlines())
    for line in lines:
        if _VERDICT.match(line) and line.endswith("=> {"):
            block = [line]
            for inner in lines:
                block.append(inner)
                if inner == "}":
                    break
            blocks.append("\n".join(block))
    return sorted(blocks, key=lambda block: block.split("]", 1)[0])


def _verdict(match: re.Match[str]) -> str:
    """`ok`, `fatal (item=x)`; another host than localhost's prefixed: `[node-a] ok`."""
    word = "fatal" if match.group(1) == "failed" else match.group(1)
    label = match.group(3) if match.group(3) is not None else match.group(4)
    shown = word if label is None else f"{word} (item={label})"
    return shown if match.group(2) == "localhost" else f"[{match.group(2)}] {shown}"


def _hosts_sorted(verdicts: list[str]) -> list[str]:
    """The verdicts under each banner ("" marks one) sorted by host, stably (a host's items
    keep their order): several hosts finish a step in any order, in both tools."""
    out: list[str] = []
    run: list[str] = []
    for verdict in [*verdicts, ""]:
        if verdict:
            run.append(verdict)
            continue
        out.extend(sorted(run, key=_host_of))
        run = []
    return out


def _host_of(verdict: str) -> str:
    return verdict[1:].split("] ", 1)[0] if verdict.startswith("[") else ""


def assert_same(
    theirs_copy: Path, ours_copy: Path, *extra: str, hosts: tuple[str, ...] = ("localhost",)
) -> Seen:
    """Run ansible-playbook on one copy of a playbook and fleetfix on another (each writes
    its own files); assert they agree on banners, verdicts, recap and exit code. `hosts`:
    the inventory (every host reached with the local connection)."""
    theirs = ansible_playbook(theirs_copy, *extra, hosts=hosts)
    ours = fleetfix(ours_copy, *extra, hosts=hosts)
    where = f"\n--- ansible-playbook:\n{theirs.output}\n--- fleetfix:\n{ours.output}"
    assert ours.banners == theirs.banners, where
    assert ours.verdicts == theirs.verdicts, where
    assert ours.printed == theirs.printed, where
    assert ours.recap == theirs.recap, where
    assert ours.other_recaps == theirs.other_recaps, where
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


def copy_fixtures(source: Path, tmp_path: Path, name: str) -> Path:
    """The fixture directory `source` copied to tmp_path/name, so each tool writes its own
    files (counters, markers) in a fresh place."""
    target = tmp_path / name
    shutil.copytree(source, target)
    return target


def load_errors(book: Path) -> list[str]:
    """`line:column message` of each error fleetfix's loader reports for `book`."""
    return [
        f"{e.position.line}:{e.position.column} {e.message}"
        for e in validate_playbook(book, builtin_catalog())
        if e.position is not None
    ]
