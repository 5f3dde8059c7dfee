"""Generate SSH key pairs and known_hosts files for the loopback test servers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import asyncssh


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A private key file, its public key file, and the public key as one OpenSSH line."""

    private_path: Path
    public_path: Path
    public_line: str


def generate_keypair(
    directory: Path, name: str, algorithm: str = "ssh-ed25519", comment: str = "fleetfix-test"
) -> KeyPair:
    """Write `name` (mode 0600, OpenSSH format) and `name.pub` into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key(algorithm, comment=comment)
    private_path = directory / name
    public_path = directory / f"{name}.pub"
    private_path.touch(mode=0o600)
    private_path.write_bytes(key.export_private_key("openssh"))
    public_line = key.export_public_key("openssh").decode("ascii").strip()
    public_path.write_text(public_line + "\n", encoding="ascii")
    return KeyPair(private_path, public_path, public_line)


def known_hosts_line(host: str, port: int, public_line: str) -> str:
    """A known_hosts line trusting `public_line` for `host` and `[host]:port`."""
    algorithm, data = public_line.split()[:2]
    patterns = host if port == 22 else f"{host},[{host}]:{port}"
    return f"{patterns} {algorithm} {data}"


def write_known_hosts(path: Path, lines: Iterable[str]) -> Path:
    """Write a known_hosts file from `lines`; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="ascii")
    return path


class ServerKeys:
    """The key material both test SSH servers keep: where a test finds the keys and files."""

    def __init__(self) -> None:
        self.port = 0
        self.workdir = Path()
        self.host_key = KeyPair(Path(), Path(), "")
        self.client_key = KeyPair(Path(), Path(), "")
        self.known_hosts_path = Path()

    @property
    def host_key_path(self) -> Path:
        return self.host_key.private_path

    @property
    def client_key_path(self) -> Path:
        return self.client_key.private_path

    @property
    def authorized_keys_path(self) -> Path:
        return self.workdir / "authorized_keys"
