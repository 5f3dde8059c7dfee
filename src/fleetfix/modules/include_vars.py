"""`include_vars`: variables from YAML/JSON files on the controller, set on the host as
ansible-core 2.19's action plugin sets them.

Where it looks (ansible's `_find_needle('vars', file)` and `_set_root_dir`): an absolute path
as it is; else, for a step of a role, the role's `vars/` then the role, then the task file's
directory (its `vars/` first), then the playbook's directory (its `vars/` first). A `dir:` is
the role's `vars/<dir>` in a role, else relative to the task file's directory; its files are
read in sorted order, directory by directory (`depth` deep, 0: all), `files_matching` and
`ignore_files` are regular expressions on the file name, `extensions` the accepted ones.

The values sit in their own layer of the host's variables (`HostState.included_vars`):
above play vars, vars_files and a task's `vars`, below set_fact and registered values, as
ansible-playbook 2.19 measures. Nothing runs on the node: the step runs in --check too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fleetfix.engine.hoststep import Outcome
from fleetfix.errors import PlaybookError
from fleetfix.modules.call import ModuleCall, ModuleFailed
from fleetfix.playbook.yamlpos import load_yaml

DIR_ARGS = frozenset(
    {"dir", "depth", "files_matching", "ignore_files", "extensions", "ignore_unknown_extensions"}
)
FILE_ARGS = frozenset({"file"})
DEFAULT_EXTENSIONS = ("yaml", "yml", "json")


async def include_vars(call: ModuleCall) -> Outcome:
    hs, params = call.hs, call.params
    given = {key for key, value in hs.step.args.get("params", {}).items() if value is not None}
    if given & DIR_ARGS and given & FILE_ARGS:
        raise ModuleFailed(
            "You are mixing file only and dir only arguments, these are incompatible"
        )
    included: list[str] = []
    try:
        if params["dir"]:
            results = _from_dir(call, included)
        else:
            source = params["file"]
            source = source.rstrip("\n") if isinstance(source, str) else source
            results = _load(_find_file(call, source), included)
    except ModuleFailed as exc:
        failed = call.outcome(
            message=str(exc), ansible_included_var_files=included, ansible_facts={}
        )
        failed.data["message"] = str(exc)  # Ansible's include_vars says `message`, not `msg`
        failed.failed = True
        return failed
    if params["name"]:
        results = {str(params["name"]): results}
    if params["hash_behaviour"] == "merge":
        results = {
            key: _merged(hs.variables[key], value) if key in hs.variables else value
            for key, value in results.items()
        }
    hs.state.included_vars.update(results)
    return call.outcome(ansible_included_var_files=included, ansible_facts=results)


def _merged(old: Any, new: Any) -> Any:
    """Ansible's combine_vars(merge=True): mappings merged key by key, recursively."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return new
    merged = dict(old)
    for key, value in new.items():
        merged[key] = _merged(merged[key], value) if key in merged else value
    return merged


def _bases(call: ModuleCall) -> tuple[Path | None, Path, Path]:
    """(the role's directory or None, the task file's directory, the playbook's directory)."""
    step = call.hs.step
    role = Path(step.role.path) if step.role is not None else None
    task_dir = Path(step.position.file).parent if step.position.file else Path.cwd()
    playbook_dir = Path(str(call.hs.variables.get("playbook_dir") or task_dir))
    return role, task_dir, playbook_dir


def _find_file(call: ModuleCall, source: Any) -> Path:
    """ansible's path_dwim_relative_stack(search path, 'vars', source).

    Raises:
        ModuleFailed: no such file (Ansible's words: "Could not find or access ...").
    """
    if not source:
        raise ModuleFailed("Could not find file on the Ansible Controller.")
    name = str(source)
    if name.startswith(("~", os.sep)):
        path = Path(os.path.expanduser(name))
        if path.exists():
            return path
        raise ModuleFailed(f"Could not find or access '{name}' on the Ansible Controller.")
    role, task_dir, playbook_dir = _bases(call)
    stack = [role] if role is not None else []
    if task_dir not in stack:
        stack.append(task_dir)
    in_vars = name.split("/", maxsplit=1)[0] != "vars"
    search: list[Path] = []
    for base in stack:
        if role is not None and base.name == "tasks":
            search += [base.parent / "vars" / name, base / name]
        if in_vars:
            search.append(base / "vars" / name)
        search.append(base / name)
    if in_vars:
        search.append(playbook_dir / "vars" / name)
    search.append(playbook_dir / name)
    for candidate in search:
        if candidate.exists():
            return candidate
    searched = "\n\t".join(str(p) for p in search)
    raise ModuleFailed(
        f"Could not find or access '{name}'\nSearched in:\n\t{searched} on the Ansible Controller."
    )


def _from_dir(call: ModuleCall, included: list[str]) -> dict[str, Any]:
    params = call.params
    root = _dir_root(call, str(params["dir"]))
    matcher = _regex(params["files_matching"]) if params["files_matching"] else None
    ignored = params["ignore_files"] or []
    ignored = ignored.split() if isinstance(ignored, str) else [str(i) for i in ignored]
    extensions = [str(e) for e in params["extensions"]]
    results: dict[str, Any] = {}
    for current, names in _walk(root, int(params["depth"] or 0)):
        for name in names:
            path = current / name
            if matcher is not None and not matcher.search(name):
                continue
            if not path.exists() or _ignored(name, ignored):
                continue
            valid = _valid_extension(name, extensions)
            if params["ignore_unknown_extensions"] and not valid:
                continue
            if not valid:
                raise ModuleFailed(
                    f"{path} does not have a valid extension: {', '.join(extensions)}"
                )
            results.update(_load(path, included))
    return results


def _dir_root(call: ModuleCall, source: str) -> Path:
    """ansible's `_set_root_dir`: in a role, its vars/ (or the role, for `vars/...`); else
    the task file's directory.

    Raises:
        ModuleFailed: not there, or not a directory.
    """
    role, task_dir, _ = _bases(call)
    root = Path(source)
    if role is not None:
        if source.split("/", maxsplit=1)[0] == "vars":
            if (role / source).exists():
                root = role / source
        else:
            root = role / "vars" / source
    else:
        root = task_dir / source
    if not root.exists():
        raise ModuleFailed(f"{root} directory does not exist")
    if not root.is_dir():
        raise ModuleFailed(f"{root} is not a directory")
    return root


def _walk(root: Path, depth: int) -> Iterator[tuple[Path, list[str]]]:
    """Each directory under `root` (links followed) in sorted order, with its sorted files."""
    walked = sorted(os.walk(root, followlinks=True), key=lambda entry: entry[0])
    for current, _dirs, files in walked:
        level = len(Path(current).relative_to(root).parts) + 1
        if depth and level > depth:
            continue
        yield Path(current), sorted(files)


def _regex(pattern: Any) -> re.Pattern[str]:
    try:
        return re.compile(str(pattern))
    except re.error as exc:
        raise ModuleFailed(f"Invalid regular expression: {pattern}") from exc


def _ignored(name: str, patterns: list[str]) -> bool:
    return any(_regex(f"{pattern}$").search(name) for pattern in patterns)


def _valid_extension(name: str, extensions: list[str]) -> bool:
    return os.path.splitext(name)[1][1:] in extensions


def _load(path: Path, included: list[str]) -> dict[str, Any]:
    """One file's variables; an empty file is none.

    Raises:
        ModuleFailed: not YAML/JSON, or not a mapping (Ansible's words), saying where.
    """
    try:
        document = load_yaml(path)
    except PlaybookError as exc:
        raise ModuleFailed(f"{path}: {exc.message}") from exc
    if document.problems:
        problem = document.problems[0]
        raise ModuleFailed(f"{problem.position}: {problem.message}")
    value = document.root.value if document.root is not None else None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ModuleFailed(f"{path} must be stored as a dictionary/hash")
    included.append(str(path))
    return dict(value)
