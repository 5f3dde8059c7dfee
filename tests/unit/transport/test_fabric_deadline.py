"""How the fabric transport reads a run that Invoke's client-side deadline cut off."""

from __future__ import annotations

import pytest

from fleetfix.transport.fabric import cut_off_by_client


@pytest.mark.parametrize(
    ("rc", "elapsed", "timeout", "cut_off"),
    [
        # The race seen in CI: timeout 1 s, Invoke's deadline ceil(1 + 1) = 2 s, the channel
        # closed by the timer, no exit status, and no CommandTimedOut raised.
        (-1, 2.05, 1.0, True),
        (-1, 3.0, 1.5, True),
        # Closed before the client deadline: the connection went, not the timer.
        (-1, 1.2, 1.0, False),
        # An exit status came back: the command ended on its own or by the remote `timeout`.
        (0, 2.05, 1.0, False),
        (124, 2.05, 1.0, False),
        # No deadline, nothing to cut off.
        (-1, 900.0, None, False),
    ],
)
def test_cut_off_by_client(rc: int, elapsed: float, timeout: float | None, cut_off: bool) -> None:
    assert cut_off_by_client(rc, elapsed, timeout) is cut_off
