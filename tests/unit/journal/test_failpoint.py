"""FLEETFIX_STOP_AT: the crash tests' failpoint (the e2e resume property uses it for real)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from fleetfix.errors import SourcePosition, UsageError
from fleetfix.events import TaskStarted
from fleetfix.journal.failpoint import STOP_AT_ENV, stop_at_from_env


def _banner(line: int) -> TaskStarted:
    return TaskStarted(name="reboot", position=SourcePosition("x.yml", line, 7))


def test_unset_subscribes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STOP_AT_ENV, raising=False)
    assert stop_at_from_env() is None


@pytest.mark.parametrize("raw", ["TaskStarted", "{}", '{"type": "TaskStarted", "nth": "two"}'])
def test_a_bad_value_says_what_it_expects(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(STOP_AT_ENV, raw)
    with pytest.raises(UsageError, match=STOP_AT_ENV):
        stop_at_from_env()


def test_stops_at_the_nth_matching_event_only(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"type": "TaskStarted", "nth": 2, "contains": '"line": 9,'}
    monkeypatch.setenv(STOP_AT_ENV, json.dumps(spec))
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    sink = stop_at_from_env()
    assert sink is not None
    for line in (9, 10, 90, 9, 9):
        sink(_banner(line))
    assert sent == [(os.getpid(), signal.SIGSTOP)]
