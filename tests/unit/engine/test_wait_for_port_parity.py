"""wait_for on a real port, under ansible-playbook and fleetfix: a server on 127.0.0.1 that
sends a banner and keeps each connection, and one connection the test holds open (never
drained). The playbook's asserts state Ansible's return values and messages."""

from __future__ import annotations

import shutil
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.parity import assert_same

FIXTURE = Path(__file__).parents[2] / "fixtures" / "playbooks" / "wait_for_port"
BANNER = b"SSH-2.0-fleetfix-wait-for-test\r\n"


class _Banner(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(BANNER)
        self.request.settimeout(15)
        try:
            while self.request.recv(1024):
                pass
        except OSError:
            pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextmanager
def _listening() -> Iterator[int]:
    """A banner server on 127.0.0.1 (its port), with one client connection held open."""
    with _Server(("127.0.0.1", 0), _Banner) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = int(server.server_address[1])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                yield port
        finally:
            server.shutdown()
            thread.join(10)


def test_wait_for_a_port_agrees_with_ansible(tmp_path: Path) -> None:
    theirs, ours = tmp_path / "ansible", tmp_path / "fleetfix"
    shutil.copytree(FIXTURE, theirs)
    shutil.copytree(FIXTURE, ours)
    with _listening() as port:
        seen = assert_same(
            theirs / "wait_for_port.yml", ours / "wait_for_port.yml", "-e", f"port={port}"
        )
    assert seen.exit_code == 0, seen.output
    assert "failed=0" in seen.recap and "ignored=3" in seen.recap, seen.output
