"""Shared fixtures: the loopback SSH servers and ConnectionSpecs that reach them."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.transport.base import ConnectionSpec
from tests.lab.support import dev_shm_listing
from tests.support import SSHTestServer, spec_for
from tests.support.asyncssh_server import AsyncSSHServer
from tests.support.sshd import OpenSSHServer

SpecFactory = Callable[..., ConnectionSpec]
pytest_plugins = ["tests.support.postgres"]


def pytest_configure(config: pytest.Config) -> None:
    """A Ctrl-C reaches the processes the tests start, as it does from a terminal.

    A shell starts a background job (`.ci/run &`, nohup) with SIGINT ignored, and an ignored
    signal stays ignored across fork and exec: every fleetfix CLI, sshd session and /bin/sh the
    tests start would inherit it. Tests that send SIGINT then saw a process that never stopped
    (a sleep under the loopback asyncssh server) or a CLI that ran to exit 0 when the signal
    landed before it installed its own handler. Python's own handler is reset to the default
    at exec, so the children start as they would from a terminal."""
    del config
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
async def asyncssh_server(tmp_path: Path) -> AsyncIterator[AsyncSSHServer]:
    """An asyncssh server on 127.0.0.1 running commands in real /bin/sh subprocesses."""
    async with AsyncSSHServer(tmp_path / "asyncssh-server") as server:
        yield server


@pytest.fixture
def openssh_server(tmp_path: Path) -> Iterator[OpenSSHServer]:
    """A real OpenSSH sshd on 127.0.0.1 (skips, or fails under CI=1, if sshd is missing)."""
    with OpenSSHServer(tmp_path / "openssh-server") as server:
        yield server


@pytest.fixture(params=["asyncssh", pytest.param("openssh", marks=pytest.mark.sshd)])
async def ssh_server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Each test using this runs once against each server."""
    directory = tmp_path / f"{request.param}-server"
    if request.param == "openssh":
        with OpenSSHServer(directory) as sshd:
            yield sshd
    else:
        async with AsyncSSHServer(directory) as server:
            yield server


@pytest.fixture
def make_spec() -> SpecFactory:
    """`make_spec(server, name="target", **changes)`: a ConnectionSpec reaching `server`."""

    def make(server: SSHTestServer, name: str = "target", **changes: Any) -> ConnectionSpec:
        return spec_for(server, name, **changes)

    return make


@pytest.fixture(scope="session", autouse=True)
def _explicit_gathering() -> Iterator[None]:
    """ANSIBLE_GATHERING=explicit for the session: a play gathers facts only when it says
    `gather_facts: true`, so tests not about facts keep their step counts. The parity runs
    (tests/support/parity.py, scripts/ansible_targets.py) drop it: both tools at the default."""
    before = os.environ.get("ANSIBLE_GATHERING")
    os.environ["ANSIBLE_GATHERING"] = "explicit"
    yield
    if before is None:
        os.environ.pop("ANSIBLE_GATHERING", None)
    else:
        os.environ["ANSIBLE_GATHERING"] = before


LEAKY = ("tests/e2e/", "tests/lab/", "tests/unit/transport/", "tests/unit/engine/")
"""Where tests open sockets, subprocesses and event loops: a leak there would surface later."""


@pytest.fixture(autouse=True)
def _collect_garbage_per_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that opens sockets or subprocesses, collect garbage so a leaked transport is
    reported against the test that leaked it (pytest turns the warning into an error), not a
    later one. Elsewhere it would only cost time."""
    yield
    if request.node.nodeid.startswith(LEAKY):
        gc.collect()


def _kernel_modules() -> set[str]:
    """Loaded modules: /proc/modules, or /sys/module where a container hides /proc/modules."""
    proc = Path("/proc/modules")
    if proc.is_file():
        return {line.split()[0] for line in proc.read_text().splitlines() if line.strip()}
    sysfs = Path("/sys/module")
    return {entry.name for entry in sysfs.iterdir()} if sysfs.is_dir() else set()


@pytest.fixture(scope="session", autouse=True)
def real_machine_untouched() -> Iterator[None]:
    """The whole suite may not change this machine's /dev/shm or kernel modules: the lab and
    every remediation run against sandboxes, never against the machine itself."""
    shm_before = dev_shm_listing()
    modules_before = _kernel_modules()
    yield
    shm_after = dev_shm_listing()
    changed = {name for name, meta in shm_before.items() if shm_after.get(name) != meta}
    assert not changed, f"real /dev/shm entries deleted or modified: {sorted(changed)}"
    leaked = {n for n in shm_after if n.startswith(("nccl-", "fleetfix"))} - set(shm_before)
    assert not leaked, f"files leaked into the real /dev/shm: {sorted(leaked)}"
    assert _kernel_modules() == modules_before, "kernel modules changed during the tests"
