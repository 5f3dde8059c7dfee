"""A webhook slower than the request timeout (issue 19: it got the `rma` twice, never
`run_finished`, and the warning said neither was delivered). Against a real HTTP server on
127.0.0.1 that answers only after the timeout: every request carries its notification's
idempotency key (header and body), a retry repeats the key, `run_finished` still goes out at
the run's end, and the warnings say "not confirmed ... may have been received", never "not
delivered"."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fleetfix.events import RunStarted, SafetyStop
from fleetfix.notify import ALL_KINDS, DeliveryPolicy, Notifier, Webhook
from fleetfix.notify.webhook import KEY_HEADER
from tests.support import eventually, free_port
from tests.unit.notify.test_observer import Warnings, finished

TIMEOUT = 0.3
POLICY = DeliveryPolicy(timeout=TIMEOUT, retries=2, backoff=0.01)
FINISH_WITHIN = 1.2
"""Less than the hold's three tries take: it is cut short to leave run_finished its time."""


class SlowServer:
    """Records each POST (its key header and JSON body), then answers 200 after `delay`."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer._lock:
                    outer.received.append((self.headers.get(KEY_HEADER, ""), json.loads(body)))
                outer.stopping.wait(outer.delay)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def kinds(self) -> list[str]:
        with self._lock:
            return [body["kind"] for _, body in self.received]


@pytest.fixture
def slow() -> Iterator[SlowServer]:
    server = SlowServer(delay=TIMEOUT * 3)
    server.thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(10)


def notifier(url: str) -> tuple[Notifier, Warnings]:
    warnings = Warnings()
    built = Notifier(
        [Webhook(url)],
        ALL_KINDS,
        controller="ctl01",
        warn=warnings,
        policy=POLICY,
        finish_within=FINISH_WITHIN,
    )
    return built, warnings


STARTED = RunStarted(at=1000.0, run_id="r-7", playbook="p.yml", hosts=("gpu001",), check=False)


async def test_a_slow_receiver_gets_each_key_and_run_finished(slow: SlowServer) -> None:
    observer, warnings = notifier(slow.url)
    observer(STARTED)
    observer(SafetyStop(at=1001.0, reason="max_fail_percentage 10% exceeded"))
    # The hold is on its way, during the run, before the run ends
    assert await eventually(lambda: len(slow.received) >= 1, 10.0)
    observer(finished())
    started = time.monotonic()
    await observer.finish()
    assert time.monotonic() - started < FINISH_WITHIN + 1.0  # bounded

    kinds = slow.kinds()
    assert kinds[-1] == "run_finished" and "hold" in kinds
    assert kinds.index("run_finished") > max(i for i, k in enumerate(kinds) if k == "hold")
    keys: dict[str, set[str]] = {}
    for header, body in slow.received:
        assert header == body["idempotency_key"] != ""
        keys.setdefault(body["kind"], set()).add(header)
    # A retry is the same key; two notifications never share one
    assert all(len(found) == 1 for found in keys.values()), keys
    assert keys["hold"] != keys["run_finished"]
    assert kinds.count("hold") >= 2  # it was retried (and so received twice, same key)

    where = f"webhook http://127.0.0.1:{slow.server.server_address[1]}"
    assert warnings == [
        f"{where}: {kind} notification not confirmed (timed out{attempts(kinds.count(kind))};"
        " may have been received)"
        for kind in ("hold", "run_finished")
    ]


def attempts(count: int) -> str:
    return f", {count} attempts" if count > 1 else ""


async def test_nothing_listening_is_not_delivered_and_run_finished_is_still_tried() -> None:
    observer, warnings = notifier(f"http://127.0.0.1:{free_port()}/hook")
    observer(STARTED)
    observer(SafetyStop(at=1001.0, reason="x"))
    observer(finished())
    await observer.finish()
    assert [w.split(": ", 1)[1].split(" (")[0] for w in warnings] == [
        "hold notification not delivered",
        "run_finished notification not delivered",
    ]
    assert all("attempts" in w and "may have been" not in w for w in warnings)


async def test_keys_are_per_event_and_a_resumed_run_has_its_own(slow: SlowServer) -> None:
    slow.delay = 0.0
    for started_at in (1000.0, 2000.0):  # the run, then its --resume (same run id)
        observer, warnings = notifier(slow.url)
        observer(RunStarted(at=started_at, run_id="r-7", playbook="p.yml", hosts=(), check=False))
        observer(SafetyStop(at=started_at + 1, reason="x"))
        observer(finished())
        await observer.finish()
        assert warnings == []
    keys = [header for header, _ in slow.received]
    assert len(keys) == 4 and len(set(keys)) == 4
    assert all(key.startswith("r-7:") for key in keys)
