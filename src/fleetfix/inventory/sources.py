"""Load inventory sources (files, directories, `a,b,` host lists) into one Inventory.

Sources are read in order into one builder, as `ansible-inventory -i A -i B` does: a later
source adds to and overrides earlier ones. A file is tried the way Ansible's default plugin
chain tries it: as YAML when it ends in .yml/.yaml/.json or has no extension, then as INI.
A directory is every entry in it, sorted, recursively, minus what Ansible ignores (hidden
names, group_vars/, host_vars/, vars_plugins/, backups and .md/.txt/.cfg/.retry-like files).

Where Ansible only warns and goes on, fleetfix stops: a source that is missing or cannot be
read as an inventory raises InventoryError, so a run never starts on half an inventory. Every
file is read even when an earlier one is in error, and the errors of all of them (and of their
group_vars/host_vars) are raised together.
fleetfix never executes inventory scripts nor runs inventory plugins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fleetfix.errors import InventoryError, SourcePosition
from fleetfix.inventory import datafiles
from fleetfix.inventory.addresses import AddressError, parse_address
from fleetfix.inventory.builder import BuildError, InventoryBuilder
from fleetfix.inventory.ini import parse_ini
from fleetfix.inventory.model import Inventory, VarsDirectory
from fleetfix.inventory.problems import raise_found
from fleetfix.inventory.vars_dirs import load_vars_directory
from fleetfix.inventory.yaml_format import YamlInventoryError, parse_yaml_inventory

YAML_EXTENSIONS = (".yaml", ".yml", ".json")
# ansible.inventory.manager.IGNORED with the default INVENTORY_IGNORE_EXTS.
_IGNORED_NAMES = re.compile(r"^\.|^host_vars$|^group_vars$|^vars_plugins$")
_IGNORED_SUFFIXES = (
    ".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry",
)  # fmt: skip


def load_inventory(sources: Sequence[str | Path] | str | Path) -> Inventory:
    """Read every source in order and return the merged inventory.

    Args:
        sources: inventory files, directories or comma-separated host lists (`a,b,`), as
            given to `-i`; relative paths are taken from the current directory.

    Raises:
        InventoryError: a source is missing or malformed, or a group_vars/host_vars file is;
            the error names the file and line.
    """
    # A lone path is a sequence of characters; take it as the one source it means.
    paths = [str(sources)] if isinstance(sources, (str, Path)) else [str(s) for s in sources]
    if not paths:
        raise InventoryError("no inventory source given")
    builder = InventoryBuilder()
    errors: list[InventoryError] = []
    for source in paths:
        _recorded(errors, _read_source, builder, source)
    if errors:
        # The names read so far find the vars files, whose errors are told too.
        _recorded(errors, _vars_dirs, paths, list(builder.groups), list(builder.hosts))
        raise_found(errors)
    builder.reconcile()
    groups, hosts = builder.freeze()
    vars_dirs = _vars_dirs(paths, list(groups), list(hosts))
    return Inventory(groups, hosts, vars_dirs, sources=paths, warnings=builder.warnings)


def _recorded(errors: list[InventoryError], read: Callable[..., object], *args: Any) -> None:
    try:
        read(*args)
    except InventoryError as exc:
        errors.append(exc)


def is_host_list(source: str) -> bool:
    """True when `source` is a comma-separated host list rather than a path."""
    return "," in source and not os.path.exists(source)


def _read_source(builder: InventoryBuilder, source: str) -> None:
    if is_host_list(source):
        _read_host_list(builder, source)
    elif os.path.isdir(source):
        if not _read_directory(builder, source, set()):
            raise InventoryError(f"inventory directory {source} holds no inventory file")
    elif os.path.exists(source):
        _read_file(builder, os.path.abspath(source))
    else:
        raise InventoryError(f"inventory source {source} does not exist")


def _read_host_list(builder: InventoryBuilder, source: str) -> None:
    builder.origin = None
    for raw_entry in source.split(","):
        entry = raw_entry.strip()
        if not entry:
            continue
        try:
            name, port = parse_address(entry, allow_ranges=False)
        except AddressError:
            name, port = entry, None
        if name not in builder.hosts:
            try:
                builder.add_host(name, "ungrouped", port)
            except BuildError as exc:
                raise InventoryError(f"host list {source[:80]!r}: {exc}") from exc


def _read_directory(builder: InventoryBuilder, directory: str, visited: set[str]) -> bool:
    """Read every inventory file under `directory`; False when there was none."""
    real = os.path.realpath(directory)
    if real in visited:
        # A symlink back up the tree; Ansible would recurse until it crashed.
        raise InventoryError(f"inventory directory {directory} links back to {real}")
    visited.add(real)
    found = False
    errors: list[InventoryError] = []
    for entry in datafiles.list_directory(directory):
        if _IGNORED_NAMES.search(entry) or entry.endswith(_IGNORED_SUFFIXES):
            continue
        path = os.path.join(directory, entry)
        if os.path.isdir(path):
            try:
                found = _read_directory(builder, path, visited) or found
            except InventoryError as exc:
                errors.append(exc)
                found = True
        else:
            _recorded(errors, _read_file, builder, os.path.abspath(path))
            found = True
    raise_found(errors)
    return found


def _read_file(builder: InventoryBuilder, path: str) -> None:
    data = datafiles.read_bytes(path)
    extension = os.path.splitext(path)[1]
    _refuse_unsupported(path, data, extension)
    if extension and extension not in YAML_EXTENSIONS:
        parse_ini(builder, path, data)
        return
    text = datafiles.decode_text(path, data)
    try:
        parse_yaml_inventory(builder, path, text)
    except InventoryError as yaml_error:
        # Ansible's chain goes on to the INI plugin; report the YAML error only when the file
        # is YAML by name or by content, and INI cannot read it either.
        _read_as_ini_after_yaml(builder, path, data, yaml_error, bool(extension))


def _read_as_ini_after_yaml(
    builder: InventoryBuilder,
    path: str,
    data: bytes,
    yaml_error: InventoryError,
    yaml_by_name: bool,
) -> None:
    try:
        parse_ini(builder, path, data)
    except InventoryError as ini_error:
        if yaml_by_name or isinstance(yaml_error, YamlInventoryError):
            raise yaml_error from ini_error
        raise


def _refuse_unsupported(path: str, data: bytes, extension: str) -> None:
    datafiles.refuse_vault(path, data)
    if extension == ".toml":
        raise InventoryError(
            "TOML inventories are not supported by fleetfix; use INI or YAML",
            SourcePosition(path, 1),
        )
    if data.startswith(b"#!") and os.access(path, os.X_OK):
        raise InventoryError(
            "executable inventory scripts are not supported: fleetfix never runs inventory"
            " sources (write their --list output to a .json file and use that)",
            SourcePosition(path, 1),
            source_line=data.split(b"\n", 1)[0].decode("utf-8", "replace"),
        )


def _vars_dirs(sources: list[str], groups: list[str], hosts: list[str]) -> list[VarsDirectory]:
    """One VarsDirectory per source (a path's directory; host lists have none)."""
    loaded: dict[str, VarsDirectory] = {}
    found: list[VarsDirectory] = []
    for source in sources:
        if is_host_list(source):
            continue
        base = source if os.path.isdir(source) else os.path.dirname(source)
        directory = os.path.realpath(base)
        if directory not in loaded:
            loaded[directory] = load_vars_directory(directory, groups, hosts)
        found.append(loaded[directory])
    return found
