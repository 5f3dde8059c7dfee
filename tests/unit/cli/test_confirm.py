"""A run that may change more than a few hosts asks first (or wants --yes without a terminal);
one that only reads, read-only Ansible modules included, does not."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fleetfix.cli.loading import load_builtin_playbook
from fleetfix.cli.questions import confirm
from fleetfix.errors import UsageError

HOSTS = {0: [f"gpu{n:02d}" for n in range(1, 9)]}


def _playbook(tmp_path: Path, step: str) -> str:
    path = tmp_path / "p.yml"
    path.write_text(f"- hosts: all\n  tasks:\n    - {step}\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "step",
    [
        "stat: {path: /etc/hosts}",
        "ansible.builtin.slurp: src=/etc/hostname",
        "wait_for: {path: /tmp, timeout: 1}",
        "probe: nvidia_smi",
    ],
)
def test_read_only_steps_need_no_confirmation(tmp_path: Path, step: str) -> None:
    args = argparse.Namespace(check=False, yes=False)
    confirm(args, load_builtin_playbook(_playbook(tmp_path, step)), HOSTS)


@pytest.mark.parametrize(
    "step",
    [
        "copy: {content: x, dest: /etc/motd}",
        "ansible.builtin.reboot: {}",
        "systemd: {name: slurmd, state: restarted}",
        "raw: uptime",
    ],
)
def test_changing_steps_want_yes_without_a_terminal(
    tmp_path: Path, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    args = argparse.Namespace(check=False, yes=False)
    with pytest.raises(UsageError, match="refusing to change 8 hosts without --yes"):
        confirm(args, load_builtin_playbook(_playbook(tmp_path, step)), HOSTS)


def test_ctrl_d_at_the_question_is_a_no(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)

    def end_of_input(_question: str) -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", end_of_input)
    args = argparse.Namespace(check=False, yes=False)
    with pytest.raises(UsageError, match="not confirmed; nothing was run"):
        confirm(args, load_builtin_playbook(_playbook(tmp_path, "raw: uptime")), HOSTS)
