"""The floor: a bare asyncssh fan-out running the workload's commands on every host.

    .venv/bin/python benchmarks/bare_fanout.py SPEC.json

SPEC.json: {"addresses": [...], "port": P, "user": U, "client_key": PATH, "known_hosts": PATH,
"commands": [...], "concurrency": 50, "handshakes": 16}. One connection per host, at most
`handshakes` SSH handshakes at once (fleetfix's default) and `concurrency` hosts in flight; each
host runs the commands in order. Nothing is parsed or recorded: this is the least work any
orchestrator can do. It offers the ciphers and MACs fleetfix's transport prefers (AES-GCM, UMAC)
before asyncssh's defaults (chacha20 first), so both negotiate the same cipher and the lab does
the same work for each. Prints one JSON line: hosts, hosts_ok, commands_ok, output_bytes, errors.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import asyncssh
from asyncssh.encryption import get_default_encryption_algs, get_encryption_algs
from asyncssh.mac import get_default_mac_algs, get_mac_algs

from fleetfix.transport.ssh import PREFERRED_CIPHERS, PREFERRED_MACS

COMMAND_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class FanOutSpec:
    """Where the hosts are, how to log in, and what to run on each."""

    addresses: tuple[str, ...]
    port: int
    user: str
    client_key: str
    known_hosts: str
    commands: tuple[str, ...]
    concurrency: int = 50
    handshakes: int = 16

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FanOutSpec:
        return cls(
            addresses=tuple(data["addresses"]),
            port=int(data["port"]),
            user=str(data["user"]),
            client_key=str(data["client_key"]),
            known_hosts=str(data["known_hosts"]),
            commands=tuple(data["commands"]),
            concurrency=int(data.get("concurrency", 50)),
            handshakes=int(data.get("handshakes", 16)),
        )


@dataclass(frozen=True, slots=True)
class HostOutcome:
    """What one host did: commands that exited 0, bytes of stdout, the error if any."""

    commands_ok: int
    output_bytes: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class FanOutSummary:
    """The whole fan-out: hosts that ran every command, commands ok, bytes, first errors."""

    hosts: int
    hosts_ok: int
    commands_ok: int
    output_bytes: int
    errors: tuple[str, ...] = ()


def preferred(wanted: tuple[str, ...], available: list[bytes], defaults: list[bytes]) -> list[str]:
    """`wanted` (those this asyncssh supports) first, then asyncssh's defaults."""
    first = [name.encode("ascii") for name in wanted if name.encode("ascii") in available]
    return [name.decode("ascii") for name in dict.fromkeys([*first, *defaults])]


CIPHERS = preferred(PREFERRED_CIPHERS, get_encryption_algs(), get_default_encryption_algs())
MACS = preferred(PREFERRED_MACS, get_mac_algs(), get_default_mac_algs())


class FanOut:
    """Runs a spec; holds the shared limits and credentials (loaded once, not per host)."""

    def __init__(self, spec: FanOutSpec) -> None:
        self.spec = spec
        self._hosts = asyncio.Semaphore(spec.concurrency)
        self._handshakes = asyncio.Semaphore(spec.handshakes)
        self._keys = asyncssh.load_keypairs([spec.client_key])
        self._known = asyncssh.read_known_hosts(spec.known_hosts)

    async def run(self) -> FanOutSummary:
        outcomes = await asyncio.gather(*(self._host(a) for a in self.spec.addresses))
        expected = len(self.spec.commands)
        return FanOutSummary(
            hosts=len(outcomes),
            hosts_ok=sum(o.commands_ok == expected for o in outcomes),
            commands_ok=sum(o.commands_ok for o in outcomes),
            output_bytes=sum(o.output_bytes for o in outcomes),
            errors=tuple(o.error for o in outcomes if o.error)[:5],
        )

    async def _host(self, address: str) -> HostOutcome:
        async with self._hosts:
            try:
                return await self._commands(address)
            except (OSError, asyncssh.Error) as exc:
                return HostOutcome(0, 0, f"{address}: {exc}")

    async def _commands(self, address: str) -> HostOutcome:
        async with self._handshakes:
            conn = await asyncssh.connect(
                address,
                self.spec.port,
                username=self.spec.user,
                client_keys=self._keys,
                known_hosts=self._known,
                encryption_algs=CIPHERS,
                mac_algs=MACS,
            )
        ok = size = 0
        async with conn:
            for command in self.spec.commands:
                done = await conn.run(command, timeout=COMMAND_TIMEOUT)
                ok += done.exit_status == 0
                size += len(str(done.stdout or ""))
        return HostOutcome(ok, size)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 5
    spec = FanOutSpec.from_json(json.loads(Path(argv[0]).read_text(encoding="utf-8")))

    async def go() -> FanOutSummary:
        return await FanOut(spec).run()

    summary = asyncio.run(go())
    print(json.dumps(asdict(summary)))
    return 0 if summary.hosts_ok == summary.hosts else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
