"""The lab's SSH keys: one host key for every node, one client key, and known_hosts for both."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from fleetfix.errors import LabError


@dataclass(frozen=True, slots=True)
class LabKeys:
    host_key: asyncssh.SSHKey
    client_public: asyncssh.SSHKey
    client_key_path: Path
    known_hosts_path: Path


def ensure_keys(state_dir: Path) -> LabKeys:
    """Load the keys in `state_dir`, generating ed25519 keys the first time (kept across restarts
    so known_hosts entries and key paths in inventories stay valid)."""
    host_path = state_dir / "host_key"
    client_path = state_dir / "client_key"
    try:
        host = _load_or_create(host_path)
        client = _load_or_create(client_path)
    except (OSError, asyncssh.KeyImportError, asyncssh.KeyExportError) as exc:
        raise LabError(f"cannot prepare the lab's SSH keys in {state_dir}: {exc}") from exc
    public = client.convert_to_public()
    (state_dir / "client_key.pub").write_bytes(public.export_public_key())
    return LabKeys(host, public, client_path, state_dir / "known_hosts")


def _load_or_create(path: Path) -> asyncssh.SSHKey:
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key("ssh-ed25519")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.export_private_key())
    return key


def write_known_hosts(keys: LabKeys, hosts: Mapping[str, str], port: int) -> None:
    """One line per node, naming both its address and its inventory name."""
    public = keys.host_key.export_public_key().decode("ascii").strip()
    rows = []
    for name, address in hosts.items():
        patterns = f"{address},{name}" if port == 22 else f"[{address}]:{port},[{name}]:{port}"
        rows.append(f"{patterns} {public}\n")
    keys.known_hosts_path.write_text("".join(rows), encoding="ascii")
