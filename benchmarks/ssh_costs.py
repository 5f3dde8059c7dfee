"""Controller CPU per host for the negotiated cipher, and keepalive timers, against real sshd.

    .venv/bin/python -m benchmarks.ssh_costs [--hosts 100] [--commands 3]

Each "host" is a connection to one loopback OpenSSH sshd; each runs `commands` commands that
print 138 KB (an nvidia-smi -q -x of an 8-GPU node). The sshd offers either its defaults (the
client then negotiates AES-GCM) or chacha20-poly1305 only (what asyncssh's defaults chose).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import spec_for
from tests.support.sshd import OpenSSHServer

from fleetfix.transport.ssh import SSHTransport

OUTPUT = "head -c 138000 /dev/zero | tr '\\0' x"


async def _fan_out(server: OpenSSHServer, hosts: int, commands: int, keepalive: float) -> float:
    """Controller CPU seconds for `hosts` connections each running `commands` commands."""
    transport = SSHTransport(max_handshakes=16, keepalive_interval=keepalive)

    async def one(index: int) -> None:
        conn = await transport.connect(spec_for(server, f"h{index}"))
        for _ in range(commands):
            result = await conn.run(OUTPUT, timeout=60)
            assert len(result.stdout) == 138000, result

    started = time.process_time()
    try:
        await asyncio.gather(*(one(i) for i in range(hosts)))
    finally:
        await transport.aclose()
    return time.process_time() - started


def _count_timers() -> tuple[Callable[[], int], Callable[[], None]]:
    loop = asyncio.get_running_loop()
    original = loop.call_later
    armed = [0]

    def counting(delay: float, callback: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        armed[0] += getattr(callback, "__name__", "") == "_keepalive_timer_callback"
        return original(delay, callback, *args, **kw)

    loop.call_later = counting  # type: ignore[method-assign,assignment]

    def restore() -> None:
        loop.call_later = original  # type: ignore[method-assign]

    return lambda: armed[0], restore


async def _cipher_costs(workdir: Path, hosts: int, commands: int) -> None:
    for label, config in (
        ("chacha20 only", ("Ciphers chacha20-poly1305@openssh.com",)),
        (
            "defaults (GCM)",
            (),
        ),
    ):
        with OpenSSHServer(workdir / label.split()[0], extra_config=config) as server:
            await _fan_out(server, 4, 1, 0)  # warm: keys loaded, imports done
            cpu = min([await _fan_out(server, hosts, commands, 0) for _ in range(3)])
        print(f"{label:16} {cpu / hosts * 1000:6.2f} ms CPU per host ({commands} x 138 KB)")


async def _keepalive_costs(workdir: Path, hosts: int, commands: int) -> None:
    with OpenSSHServer(workdir / "keepalive") as server:
        for interval in (15.0, 0.0):
            count, restore = _count_timers()
            try:
                cpu = await _fan_out(server, hosts, commands, interval)
            finally:
                restore()
            print(
                f"keepalive_interval={interval:g}: {count()} keepalive timers armed "
                f"({count() / hosts:.1f} per host), {cpu / hosts * 1000:.2f} ms CPU per host"
            )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--commands", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleetfix-ssh-costs-") as raw:
        await _cipher_costs(Path(raw), args.hosts, args.commands)
        await _keepalive_costs(Path(raw), args.hosts, args.commands)


if __name__ == "__main__":
    asyncio.run(main())
