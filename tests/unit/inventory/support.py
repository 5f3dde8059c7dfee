"""Small helpers for the inventory unit tests: write inventories into a temporary directory."""

from __future__ import annotations

from pathlib import Path

from fleetfix.inventory import Inventory, load_inventory


def write(directory: Path, name: str, text: str) -> Path:
    """Write `text` to directory/name (parents created) and return the path."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_text(directory: Path, text: str, name: str = "hosts.ini") -> Inventory:
    """Load an inventory made of one file with `text`."""
    return load_inventory([write(directory, name, text)])
