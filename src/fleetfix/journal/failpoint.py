"""A failpoint for crash tests: stop the controller right after the journal took an event.

`FLEETFIX_STOP_AT='{"type": "TaskStarted", "nth": 2, "contains": "\\"line\\": 165"}'` makes
the run send itself SIGSTOP the moment its journal has taken the `nth` event of that type whose
journaled body contains `contains` (the journal commits a durable event before the next
subscriber hears it: store.DURABLE_EVENTS). The test that set it then delivers SIGKILL, or
SIGINT/SIGTERM and SIGCONT, at exactly that instant. Polling the journal instead loses the race
when the run has nothing left to do after the event: it finishes before the signal lands.

etcd's gofail does the same for its crash tests. Unset (always, outside tests), nothing is
subscribed.
"""

from __future__ import annotations

import json
import os
import signal

from fleetfix.errors import UsageError
from fleetfix.events import Event, EventSink
from fleetfix.journal.codec import encode

STOP_AT_ENV = "FLEETFIX_STOP_AT"


def stop_at_from_env() -> EventSink | None:
    """The failpoint FLEETFIX_STOP_AT asks for; None when it is unset."""
    raw = os.environ.get(STOP_AT_ENV)
    if not raw:
        return None
    try:
        spec = json.loads(raw)
        kind, nth, contains = str(spec["type"]), int(spec.get("nth", 1)), spec.get("contains")
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(
            f'{STOP_AT_ENV}: expected {{"type": ..., "nth": ..., "contains": ...}}, got {raw!r}'
        ) from exc
    seen = 0

    def sink(event: Event) -> None:
        nonlocal seen
        name, body = encode(event)
        if name != kind or (contains is not None and str(contains) not in body):
            return
        seen += 1
        if seen == nth:
            os.kill(os.getpid(), signal.SIGSTOP)

    return sink
