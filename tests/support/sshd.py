"""A real OpenSSH sshd on 127.0.0.1 with its own host key, for interop tests.

    with OpenSSHServer() as server:    # skips (or fails under CI=1) if sshd is missing
        spec = spec_for(server)

The server is started as `/usr/sbin/sshd -D -e -f CONFIG` on a free port and stopped by its PID
(and the per-connection sshd processes it forked) when the block ends, also on failure.

Sessions get HOME set to an empty directory of the server's (`server.home`): bash sources
~/.bashrc for sshd sessions, and the test user's real dotfiles (pyenv, conda, ...) would make
commands slow, noisy and racy. Tests that want start-up files write them into `server.home`.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import pytest

from tests.support import free_port, wait_until
from tests.support.keys import (
    ServerKeys,
    generate_keypair,
    known_hosts_line,
    write_known_hosts,
)

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
REAP_TIMEOUT = 2.0
_PORT_ATTEMPTS = 5


def require_sshd() -> None:
    """Skip the calling test if sshd is missing; fail instead when CI is set (CI installs it)."""
    if SSHD.is_file() and os.access(SSHD, os.X_OK):
        return
    message = "OpenSSH sshd not installed (.ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


class OpenSSHServer(ServerKeys):
    """sshd as a context manager, with the same attributes as AsyncSSHServer."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        host: str = "127.0.0.1",
        max_startups: str | None = None,
        extra_config: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.host = host
        self.user = getpass.getuser()
        self.max_startups = max_startups
        self.extra_config = extra_config
        self._directory = directory
        self._owns_directory = directory is None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def home(self) -> Path:
        """HOME of every session (the login directory stays the user's own)."""
        return self.workdir / "home"

    @property
    def log_path(self) -> Path:
        return self.workdir / "sshd.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> OpenSSHServer:
        require_sshd()
        self.workdir = self._directory or Path(tempfile.mkdtemp(prefix="fleetfix-sshd-"))
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop()

    def _start(self) -> None:
        self.host_key = generate_keypair(self.workdir, "host_key")
        self.client_key = generate_keypair(self.workdir, "client_key")
        self.authorized_keys_path.write_text(self.client_key.public_line + "\n", encoding="ascii")
        self.home.mkdir(exist_ok=True)
        with contextlib.suppress(PermissionError):
            PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        for _attempt in range(_PORT_ATTEMPTS):
            # A free port can be taken between our probe and sshd's bind: retry on a new one.
            if self._launch(free_port(self.host)):
                break
        else:
            raise RuntimeError(f"sshd did not start; log:\n{self._log_text()}")
        self.known_hosts_path = write_known_hosts(
            self.workdir / "known_hosts",
            [known_hosts_line(self.host, self.port, self.host_key.public_line)],
        )

    def _launch(self, port: int) -> bool:
        self.port = port
        config = self.workdir / "sshd_config"
        config.write_text(self._config(), encoding="ascii")
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        if wait_until(self._ready, START_TIMEOUT):
            return True
        self._terminate()
        return False

    def _config(self) -> str:
        lines = [
            f"ListenAddress {self.host}:{self.port}",
            f"HostKey {self.host_key_path}",
            f"PidFile {self.workdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys_path}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "LogLevel VERBOSE",
            "Subsystem sftp internal-sftp",
            f"SetEnv HOME={self.home}",
        ]
        if self.max_startups:
            lines.append(f"MaxStartups {self.max_startups}")
        lines.extend(self.extra_config)
        return "\n".join(lines) + "\n"

    def authorize(self, public_line: str) -> None:
        """Also accept the client key whose OpenSSH public line this is."""
        with self.authorized_keys_path.open("a", encoding="ascii") as keys:
            keys.write(public_line.strip() + "\n")

    def drop_connections(self) -> None:
        """Kill the per-connection sshd processes (and what they run): clients lose the link."""
        if self._process is None:
            return
        below = _descendants(self._process.pid)
        sshd = [pid for pid in below if _command_name(pid) == "sshd"]
        # The connections go first, so clients see a dropped link and not a killed command;
        # then the commands those connections left behind.
        _kill_in_order(sshd)
        _kill_in_order([pid for pid in below if pid not in sshd])

    def freeze_connections(self, frozen: bool = True) -> None:
        """SIGSTOP (or SIGCONT) the per-connection sshd processes: a host that hangs silently."""
        if self._process is None:
            return
        number = signal.SIGSTOP if frozen else signal.SIGCONT
        for pid in _descendants(self._process.pid):
            if _command_name(pid) == "sshd":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, number)

    def _ready(self) -> bool:
        """sshd is up when it is still running and answers with an SSH banner."""
        if self._process is None or self._process.poll() is not None:
            return False
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as sock:
                return sock.recv(64).startswith(b"SSH-2.0-")
        except OSError:
            return False

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        # Children first, while their parents live to reap them (a container's PID 1 may
        # not reap orphans, so anything orphaned could stay a zombie).
        self.freeze_connections(False)
        _kill_tree_below(process.pid)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT)
        self._process = None

    def _stop(self) -> None:
        self._terminate()
        if self._owns_directory and self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)


def _kill_tree_below(root: int) -> None:
    """SIGKILL every descendant of `root`, deepest first, each reaped before its parent dies."""
    _kill_in_order(_descendants(root))


def _kill_in_order(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_until(functools.partial(_reaped, pid), REAP_TIMEOUT)


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _reaped(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def _descendants(root: int) -> list[int]:
    """Descendants of `root` in post-order (children before their parent), from /proc."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    order: list[int] = []

    def visit(pid: int) -> None:
        for child in children.get(pid, []):
            visit(child)
            order.append(child)

    visit(root)
    return order


def _parents() -> dict[int, int]:
    """pid -> parent pid for every process, read from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may contain spaces; fields after its ')' are fixed.
        parents[int(entry.name)] = int(stat[stat.rfind(")") + 2 :].split()[1])
    return parents
