"""The lab's state file (`lab.json` in the state dir): how clients find a running lab server."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fleetfix.errors import LabError

INFO_FILE = "lab.json"


@dataclass(frozen=True, slots=True)
class LabInfo:
    """Everything a client needs to reach a running lab; written once all listeners are up."""

    pid: int
    scenario: str
    scenario_path: str
    state_dir: str
    ssh_port: int
    control_port: int
    token: str
    client_key: str
    known_hosts: str
    inventory: str
    sandbox: str
    user: str
    started: float
    hosts: dict[str, str] = field(default_factory=dict)
    nodes: int | None = None
    launch_id: str = ""
    shards: list[dict[str, Any]] = field(default_factory=list)
    """SSH front processes of a big lab: `{"pid": int, "nodes": [name, ...]}` each; empty when
    the server serves SSH itself."""


def write_info(state_dir: Path, info: LabInfo) -> None:
    """Atomically (rename) and privately (0600: it holds the control token)."""
    target = state_dir / INFO_FILE
    temporary = state_dir / (INFO_FILE + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(asdict(info), handle, indent=2, sort_keys=True)
    os.replace(temporary, target)


def read_info(state_dir: Path) -> LabInfo | None:
    """The state file of the lab in `state_dir`, or None if there is none."""
    path = state_dir / INFO_FILE
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LabError(f"cannot read lab state file {path}: {exc}") from exc
    try:
        return LabInfo(**data)
    except TypeError as exc:
        raise LabError(f"lab state file {path} is from another version: {exc}") from exc


def remove_info(state_dir: Path, pid: int) -> None:
    """Remove the state file if it still belongs to server `pid`."""
    try:
        info = read_info(state_dir)
    except LabError:
        return
    if info is not None and info.pid == pid:
        (state_dir / INFO_FILE).unlink(missing_ok=True)
