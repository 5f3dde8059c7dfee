"""Start, find, query and stop lab servers: the Python API behind `fleetfix lab` and the tests.

    async with LabServer.start("xid79", state_dir) as lab:
        lab.hosts["gpu001"], lab.port, lab.client_key, lab.known_hosts
        lab.truth()["nodes"]["gpu003"]["faults"]

The server is always a separate process (`python -m fleetfix.lab serve`), so a hung tool or a
crash in the lab never blocks the client; `stop()` ends it by PID and waits until it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetfix.errors import LabError
from fleetfix.lab.info import INFO_FILE, LabInfo, read_info
from fleetfix.lab.ipmitool import tool_path
from fleetfix.lab.scenario_file import resolve_scenario

START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
REQUEST_TIMEOUT = 30.0
_POLL = 0.05
ANSWER_LIMIT = 1 << 30
"""Longest control answer read (truth of 10,000 nodes is ~9 MB; asyncio's default is 64 KiB)."""


def default_state_dir(scenario: str) -> Path:
    """$XDG_STATE_HOME/fleetfix/lab/<scenario> (~/.local/state/... by default)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fleetfix" / "lab" / Path(scenario).stem


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


@dataclass(frozen=True, slots=True)
class LabHandle:
    """A running lab: where its nodes are and how to reach and control it."""

    info: LabInfo
    process: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def pids(self) -> list[int]:
        """Every process of the lab: the server, then its SSH fronts (a big lab has some)."""
        return [self.info.pid] + [int(f["pid"]) for f in self.info.shards if f.get("pid")]

    @property
    def shards(self) -> list[list[str]]:
        """The node names each SSH front serves, in node order ([] when the server serves SSH
        itself)."""
        return [list(f["nodes"]) for f in self.info.shards]

    @property
    def scenario(self) -> str:
        return self.info.scenario

    @property
    def state_dir(self) -> Path:
        return Path(self.info.state_dir)

    @property
    def inventory_path(self) -> Path:
        return Path(self.info.inventory)

    @property
    def hosts(self) -> dict[str, str]:
        """Node name -> loopback address."""
        return dict(self.info.hosts)

    @property
    def port(self) -> int:
        return self.info.ssh_port

    @property
    def user(self) -> str:
        return self.info.user

    @property
    def client_key(self) -> Path:
        return Path(self.info.client_key)

    @property
    def known_hosts(self) -> Path:
        return Path(self.info.known_hosts)

    @property
    def sandbox(self) -> str:
        return self.info.sandbox

    @property
    def ipmitool(self) -> Path:
        """The lab's ipmitool, run on the controller to reach its emulated BMCs."""
        return tool_path(self.state_dir)

    def alive(self) -> bool:
        return pid_alive(self.pid)

    def truth(self) -> dict[str, Any]:
        """Per node: faults still present, status, boot id, Slurm state, GPU processes."""
        result: dict[str, Any] = self.request("truth")["truth"]
        return result

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("status")["status"]
        return result

    def audit(self) -> dict[str, list[dict[str, Any]]]:
        """Per node, every disruptive tool call the lab saw: {tool, argv, user, at, boot, rc}."""
        result: dict[str, list[dict[str, Any]]] = self.request("audit")["audit"]
        return result

    def inject(self, node: str, change: Mapping[str, Any]) -> dict[str, Any]:
        """Change a running node now, e.g. `{"drain": {"user": "carol", "reason": "..."}}`.

        Returns `{"applied": bool, "outcome": str}` (a job does not start on a drained node).
        Raises LabError for an unknown node or a malformed change.
        """
        return _injected(self.request("inject", node=node, change=dict(change)))

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """One control request, answered by the server (blocking, loopback only)."""
        try:
            with socket.create_connection(
                ("127.0.0.1", self.info.control_port), REQUEST_TIMEOUT
            ) as sock:
                sock.sendall(self._payload(op, fields))
                data = _read_line(sock)
        except OSError as exc:
            raise LabError(f"lab server (pid {self.pid}) is not answering: {exc}") from exc
        return _decode(data)

    async def arequest(self, op: str, **fields: Any) -> dict[str, Any]:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", self.info.control_port, limit=ANSWER_LIMIT
            )
            try:
                writer.write(self._payload(op, fields))
                await writer.drain()
                data = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        except (TimeoutError, OSError) as exc:
            raise LabError(f"lab server (pid {self.pid}) is not answering: {exc}") from exc
        return _decode(data)

    async def atruth(self) -> dict[str, Any]:
        result: dict[str, Any] = (await self.arequest("truth"))["truth"]
        return result

    async def astatus(self) -> dict[str, Any]:
        result: dict[str, Any] = (await self.arequest("status"))["status"]
        return result

    async def aaudit(self) -> dict[str, list[dict[str, Any]]]:
        result: dict[str, list[dict[str, Any]]] = (await self.arequest("audit"))["audit"]
        return result

    async def ainject(self, node: str, change: Mapping[str, Any]) -> dict[str, Any]:
        return _injected(await self.arequest("inject", node=node, change=dict(change)))

    def _payload(self, op: str, fields: Mapping[str, Any]) -> bytes:
        return json.dumps({**fields, "token": self.info.token, "op": op}).encode() + b"\n"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the server: SIGTERM by PID, SIGKILL if it lingers; returns once it and its SSH
        fronts are gone."""
        _terminate(self.pid)
        deadline = time.monotonic() + timeout
        while self._running() and time.monotonic() < deadline:
            time.sleep(_POLL)
        if self._running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            while self._running():
                time.sleep(_POLL)
        while self._fronts_left() and time.monotonic() < deadline:
            time.sleep(_POLL)
        self._kill_fronts()
        self._reap()

    async def astop(self, timeout: float = STOP_TIMEOUT) -> None:
        _terminate(self.pid)
        deadline = time.monotonic() + timeout
        while self._running() and time.monotonic() < deadline:
            await asyncio.sleep(_POLL)
        if self._running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            while self._running():
                await asyncio.sleep(_POLL)
        while self._fronts_left() and time.monotonic() < deadline:
            await asyncio.sleep(_POLL)
        self._kill_fronts()
        self._reap()

    def _fronts_left(self) -> list[int]:
        """SSH fronts still running (they exit when the server's link closes). A PID counts
        only while its command line names this lab's state dir, so a reused PID is never
        taken for one."""
        marker = str(self.state_dir).encode()
        left = []
        for pid in self.pids[1:]:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and pid_alive(pid):
                left.append(pid)
        return left

    def _kill_fronts(self) -> None:
        for pid in self._fronts_left():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while self._fronts_left():
            time.sleep(_POLL)

    def _running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return pid_alive(self.pid)

    def _reap(self) -> None:
        """Wait for our child, and drop a state file a killed server could not remove."""
        if self.process is not None:
            self.process.wait()
        if _info_pid(self.state_dir) == self.pid:
            (self.state_dir / INFO_FILE).unlink(missing_ok=True)


def _info_pid(state_dir: Path) -> int | None:
    with contextlib.suppress(LabError):
        info = read_info(state_dir)
        return info.pid if info else None
    return None


def _terminate(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def _read_line(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def _injected(response: dict[str, Any]) -> dict[str, Any]:
    return {"applied": response["applied"], "outcome": response["outcome"]}


def _decode(data: bytes) -> dict[str, Any]:
    try:
        response = json.loads(data)
    except ValueError as exc:
        raise LabError(f"lab server sent an unreadable answer: {data[:80]!r}") from exc
    if not isinstance(response, dict) or not response.get("ok"):
        error = response.get("error") if isinstance(response, dict) else response
        raise LabError(f"lab server refused the request: {error}")
    return response


def find_lab(state_dir: Path) -> LabHandle | None:
    """The lab running from `state_dir`, if its state file names a live, answering server."""
    info = read_info(state_dir)
    if info is None or not pid_alive(info.pid):
        return None
    handle = LabHandle(info)
    try:
        handle.request("ping")
    except LabError:
        return None
    return handle


@dataclass(frozen=True, slots=True)
class _Launch:
    argv: list[str]
    state_dir: Path
    launch_id: str
    log_path: Path


@dataclass(frozen=True, slots=True)
class LabOptions:
    """How to start a lab beyond its scenario file (all optional)."""

    port: int | None = None
    nodes: int | None = None
    reboot_time: float | None = None
    detach: bool = False
    nodes_per_process: int | None = None


def _prepare(scenario: str | Path, state_dir: Path | None, options: LabOptions) -> _Launch:
    path = resolve_scenario(scenario)
    directory = (state_dir or default_state_dir(str(scenario))).resolve()
    running = find_lab(directory)
    if running is not None:
        raise LabError(
            f"a lab is already running from {directory} "
            f"(pid {running.pid}, scenario {running.scenario})",
            hint="stop it with `fleetfix lab down`, or use another --state-dir",
        )
    directory.mkdir(parents=True, exist_ok=True)
    launch_id = secrets.token_hex(8)
    argv = [
        sys.executable,
        "-m",
        "fleetfix.lab",
        "serve",
        "--scenario",
        str(path.resolve()),
        "--state-dir",
        str(directory),
        "--launch-id",
        launch_id,
    ]
    argv += ["--port", str(options.port)] if options.port is not None else []
    argv += ["--nodes", str(options.nodes)] if options.nodes is not None else []
    argv += ["--reboot-time", str(options.reboot_time)] if options.reboot_time is not None else []
    argv += ["--detach"] if options.detach else []
    if options.nodes_per_process is not None:
        argv += ["--nodes-per-process", str(options.nodes_per_process)]
    return _Launch(argv, directory, launch_id, directory / "server.log")


_TRANSIENT_SPAWN = frozenset({errno.EAGAIN, errno.ENOMEM, errno.ETXTBSY, errno.EINTR, errno.EFAULT})
"""fork/exec failures that pass once the machine has a moment (process or memory limits
reached for an instant by a busy CI run): the spawn is tried again before giving up. EFAULT
came once in CI from exec of the venv's python while four threads started labs at once; the
cause is not known, and a spawn that failed started nothing, so it is tried again too."""
SPAWN_TRIES = 5


def _spawn(launch: _Launch) -> subprocess.Popen[bytes]:
    """Start the lab server process; a transient fork/exec failure is retried with backoff,
    any other (or a lasting one) is a LabError naming the errno."""
    for attempt in range(SPAWN_TRIES):
        try:
            with open(launch.log_path, "ab") as log:
                return subprocess.Popen(
                    launch.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as exc:
            if exc.errno not in _TRANSIENT_SPAWN or attempt == SPAWN_TRIES - 1:
                raise LabError(f"cannot start the lab server: {exc}") from exc
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


def _ready(launch: _Launch) -> LabInfo | None:
    try:
        info = read_info(launch.state_dir)
    except LabError:
        return None
    if info is None or info.launch_id != launch.launch_id:
        return None
    return info


def _failure(launch: _Launch, process: subprocess.Popen[bytes] | None) -> LabError:
    try:
        tail = (
            launch.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        )
    except OSError:
        tail = []
    detail = "\n    ".join(tail) or "no output"
    code = process.returncode if process is not None else None
    return LabError(f"lab server failed to start (exit {code}); server.log says:\n    {detail}")


def start_lab(
    scenario: str | Path,
    state_dir: Path | None = None,
    *,
    port: int | None = None,
    nodes: int | None = None,
    reboot_time: float | None = None,
    detach: bool = False,
    timeout: float = START_TIMEOUT,
    nodes_per_process: int | None = None,
) -> LabHandle:
    """Start a lab server and return once every node listens.

    `port=0` picks a free port (tests); `reboot_time` overrides the scenario's; `detach=True`
    lets the server outlive this process (`fleetfix lab up`); `nodes_per_process` caps how
    many nodes one process serves SSH for (default: what the open-file limit allows, at most
    2,000; a bigger lab gets SSH front processes). Raises LabError if it cannot start (e.g.
    the port is taken).
    """
    options = LabOptions(port, nodes, reboot_time, detach, nodes_per_process)
    launch = _prepare(scenario, state_dir, options)
    process = _spawn(launch)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _ready(launch)
        if info is not None:
            _finish_detach(process, detach)
            return LabHandle(info, None if detach else process)
        code = process.poll()
        if code is not None and (not detach or code != 0):
            raise _failure(launch, process)
        time.sleep(_POLL)
    _abandon(process)
    raise LabError(f"lab server did not come up within {timeout:g}s (see {launch.log_path})")


async def astart_lab(
    scenario: str | Path,
    state_dir: Path | None = None,
    *,
    port: int | None = None,
    nodes: int | None = None,
    reboot_time: float | None = None,
    detach: bool = False,
    timeout: float = START_TIMEOUT,
    nodes_per_process: int | None = None,
) -> LabHandle:
    """start_lab for async callers: polls with asyncio.sleep instead of blocking the loop."""
    options = LabOptions(port, nodes, reboot_time, detach, nodes_per_process)
    launch = _prepare(scenario, state_dir, options)
    process = _spawn(launch)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _ready(launch)
        if info is not None:
            _finish_detach(process, detach)
            return LabHandle(info, None if detach else process)
        code = process.poll()
        if code is not None and (not detach or code != 0):
            raise _failure(launch, process)
        await asyncio.sleep(_POLL)
    _abandon(process)
    raise LabError(f"lab server did not come up within {timeout:g}s (see {launch.log_path})")


def _finish_detach(process: subprocess.Popen[bytes], detach: bool) -> None:
    if detach:
        process.wait()


def _abandon(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()


class LabServer:
    """`async with LabServer.start(scenario, state_dir) as lab:`; stopped on exit, even on error."""

    @staticmethod
    @asynccontextmanager
    async def start(
        scenario: str | Path,
        state_dir: Path | None = None,
        *,
        port: int | None = None,
        nodes: int | None = None,
        reboot_time: float | None = None,
        timeout: float = START_TIMEOUT,
        nodes_per_process: int | None = None,
    ) -> AsyncIterator[LabHandle]:
        handle = await astart_lab(
            scenario,
            state_dir,
            port=port,
            nodes=nodes,
            reboot_time=reboot_time,
            timeout=timeout,
            nodes_per_process=nodes_per_process,
        )
        try:
            yield handle
        finally:
            await handle.astop()
