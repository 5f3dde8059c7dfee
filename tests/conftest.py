"""Shared fixtures: the loopback SSH servers and ConnectionSpecs that reach them."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.transport.base import ConnectionSpec
from tests.support import SSHTestServer, spec_for
from tests.support.asyncssh_server import AsyncSSHServer
from tests.support.sshd import OpenSSHServer

SpecFactory = Callable[..., ConnectionSpec]


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


@pytest.fixture(autouse=True)
def _collect_garbage_per_test() -> Iterator[None]:
    """Collect garbage after each test so a leaked transport or socket is reported against the
    test that leaked it (pytest turns the unraisable warning into an error), not a later one."""
    yield
    gc.collect()
