"""The collector around a command's start-up: paused while it builds, its heap frozen while
it runs, and everything handed back after (a test process runs many commands)."""

from __future__ import annotations

import gc

from fleetfix.cli.heap import collector_paused, frozen_heap


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
