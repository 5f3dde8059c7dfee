"""The collector around a command's start-up: paused while it builds, its heap frozen while
it runs, and everything handed back after (a test process runs many commands)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from fleetfix.cli import run_cli
from fleetfix.cli.heap import CollectorPause, collector_paused, frozen_heap

PLAYBOOK = """\
- name: sweep
  hosts: all
  gather_facts: false
  tasks:
    - name: xid
      probe: xid
"""


def test_paused_then_as_it_was() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()

    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()


def test_frozen_while_running_and_handed_back_after() -> None:
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        with frozen_heap():
            pass
        assert gc.get_freeze_count() == 0  # the inner end hands back all
    assert gc.get_freeze_count() == 0


def test_handed_back_when_the_command_fails() -> None:
    try:
        with frozen_heap():
            raise RuntimeError("a command that fails")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0


def test_a_pause_ends_once_by_whichever_end_comes_first() -> None:
    pause = CollectorPause()
    assert not gc.isenabled()
    pause.end()  # the run's first result
    assert gc.isenabled()
    gc.disable()
    try:
        pause.end()  # the time limit, later: nothing more to end
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_run_leaves_the_collector_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its start pauses the collector until the first result; the end of the run at the latest
    turns it back on (here: a run whose only host is unreachable)."""
    monkeypatch.chdir(tmp_path)  # the retry file goes there
    (tmp_path / "pb.yml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "inventory.ini").write_text("gpu1 ansible_host=127.0.0.1 ansible_port=1\n")
    argv = ["run", str(tmp_path / "pb.yml"), "-i", str(tmp_path / "inventory.ini")]

    run_cli([*argv, "--journal", str(tmp_path / "j.db"), "-T", "1"])

    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
