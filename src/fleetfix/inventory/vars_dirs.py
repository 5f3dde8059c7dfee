"""Load group_vars/ and host_vars/ next to an inventory source, as Ansible's host_group_vars does.

For a group or host called NAME the first of `NAME`, `NAME.yml`, `NAME.yaml`, `NAME.json` that
exists is used; if it is a directory, every file in it (recursively, sorted, skipping hidden
names, `~` backups and files with other extensions) is read in order. Files are JSON or YAML
mappings merged shallowly, later over earlier; an empty file counts for nothing. Names starting
with `/` are not looked up (Ansible's guard against chroot-style host names). Every file in
error is reported at once; vars that feed safety gates are checked (gate_values.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from fleetfix.errors import InventoryError
from fleetfix.inventory import datafiles
from fleetfix.inventory.gate_values import gate_value_problem
from fleetfix.inventory.model import VarsDirectory
from fleetfix.inventory.problems import raise_found

EXTENSIONS = (".yml", ".yaml", ".json")


def load_vars_directory(
    path: str, group_names: Iterable[str], host_names: Iterable[str]
) -> VarsDirectory:
    """The vars files under `path` for the given groups and hosts.

    Raises:
        InventoryError: a vars file is unreadable, not JSON/YAML, or not a mapping, or a var
            that feeds a safety gate is wrong (several: InventoryErrors, each of them).
    """
    problems: list[InventoryError] = []
    directory = VarsDirectory(
        path=path,
        group_vars=_entity_vars(os.path.join(path, "group_vars"), group_names, problems),
        host_vars=_entity_vars(os.path.join(path, "host_vars"), host_names, problems),
    )
    raise_found(problems)
    return directory


def vars_directory_problems(path: str) -> list[InventoryError]:
    """Every vars file under `path`/group_vars and `path`/host_vars that could not be read, for
    any group or host name: a playbook's are checked at load, before its inventory is known."""
    problems: list[InventoryError] = []
    for kind in ("group_vars", "host_vars"):
        directory = os.path.join(path, kind)
        if not os.path.isdir(directory):
            continue
        for entry in datafiles.list_directory(directory):
            full = os.path.join(directory, entry)
            extension = os.path.splitext(entry)[1]
            if entry.startswith(".") or entry.endswith("~"):
                continue
            if os.path.isdir(full):
                files = _files_in(full)
            elif extension in ("", *EXTENSIONS):
                files = [full]
            else:
                continue
            _merge_files(files, problems)
    return problems


def _entity_vars(
    directory: str, names: Iterable[str], problems: list[InventoryError]
) -> dict[str, dict[Any, Any]]:
    if not os.path.isdir(directory):
        return {}
    # One listing instead of four stat calls per host keeps 10,000-host inventories fast.
    listing = frozenset(datafiles.list_directory(directory))
    found: dict[str, dict[Any, Any]] = {}
    for name in names:
        if not name or name.startswith(os.sep):
            continue
        merged = _merge_files(_find_files(directory, name, listing), problems)
        if merged:
            found[name] = merged
    return found


def _find_files(directory: str, name: str, listing: frozenset[str]) -> list[str]:
    simple = os.sep not in name and (os.altsep is None or os.altsep not in name)
    for suffix in ("", *EXTENSIONS):
        if simple and name + suffix not in listing:
            continue
        candidate = os.path.join(directory, name + suffix)
        if os.path.exists(candidate):
            if os.path.isdir(candidate):
                return _files_in(candidate)
            return [candidate]
    return []


def _files_in(directory: str) -> list[str]:
    files: list[str] = []
    for entry in datafiles.list_directory(directory):
        if entry.startswith(".") or entry.endswith("~"):
            continue
        extension = os.path.splitext(entry)[1]
        full = os.path.join(directory, entry)
        if os.path.isdir(full):
            if not extension:
                files.extend(_files_in(full))
        elif os.path.isfile(full) and (not extension or extension in EXTENSIONS):
            files.append(full)
    return files


def _merge_files(paths: list[str], problems: list[InventoryError]) -> dict[Any, Any]:
    """The files' vars merged in order; what is wrong in them goes to `problems`."""
    merged: dict[Any, Any] = {}
    for path in paths:
        try:
            merged.update(_file_vars(path, problems))
        except InventoryError as exc:
            problems.append(exc)
    return merged


def _file_vars(path: str, problems: list[InventoryError]) -> dict[Any, Any]:
    text = datafiles.read_text(path)
    data = datafiles.load_data(path, text)
    if not data:
        return {}
    if not isinstance(data, dict):
        position = datafiles.locate(path, text, ())
        raise InventoryError(
            f"Could not process {path!r}: expected a mapping of variables, got"
            f" {type(data).__name__}",
            position,
            source_line=datafiles.line_text(text, position),
        )
    for key, value in data.items():
        problem = gate_value_problem(key, value)
        if problem is not None:
            position = datafiles.locate(path, text, (key,))
            source = datafiles.line_text(text, position)
            problems.append(InventoryError(problem, position, source_line=source))
    return data
