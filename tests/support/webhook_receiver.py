"""A webhook receiver for tests: a real HTTP server on 127.0.0.1 in a thread, recording every
POST and answering as a test scripts it (a status, a hang, a dropped connection)."""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tests.support import wait_until

HANG = "hang"
"""Answer nothing until the receiver stops (a server that never responds)."""
DROP = "drop"
"""Close the connection without an answer."""
Answer = int | str


@dataclass(frozen=True, slots=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """`with Receiver() as receiver:` serves until the block ends, also when it fails."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self._answers: deque[Answer] = deque()
        self._by_path: dict[str, Answer] = {}
        self._lock = threading.Lock()
        self.released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.receiver = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self._server.serve_forever(poll_interval=0.02)  # a quick shutdown()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, *answers: Answer) -> None:
        """Answer the next requests so, in order; 200 after them."""
        with self._lock:
            self._answers.extend(answers)

    def answer_path(self, prefix: str, answer: Answer) -> None:
        """Always answer requests whose path starts with `prefix` so."""
        self._by_path[prefix] = answer

    def bodies(self, path_prefix: str = "/") -> list[Any]:
        return [r.json() for r in list(self.requests) if r.path.startswith(path_prefix)]

    def wait_for(self, count: int, timeout: float = 10.0) -> bool:
        return wait_until(lambda: len(self.requests) >= count, timeout)

    def next_answer(self, path: str) -> Answer:
        for prefix, answer in self._by_path.items():
            if path.startswith(prefix):
                return answer
        with self._lock:
            return self._answers.popleft() if self._answers else 200

    def record(self, received: Received) -> None:
        with self._lock:
            self.requests.append(received)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
        assert not self._thread.is_alive(), "webhook receiver thread survived shutdown"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        receiver: Receiver = self.server.receiver  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        receiver.record(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        answer = receiver.next_answer(self.path)
        if answer == HANG:
            receiver.released.wait(60)
        if isinstance(answer, str):  # HANG or DROP: no answer at all
            self.close_connection = True
            return
        text = b"ok" if answer < 300 else b"no_service"
        self.send_response(answer)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(text)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(text)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows the test's own output."""
