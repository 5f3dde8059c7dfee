"""import_tasks: the steps of an imported file, read at load as Ansible's static import.

The imported steps keep their own file:line:col (errors point into the imported file); the
import's `when`, `tags` and `vars` apply to every one of them, and each remembers the import
site (`Step.via`), so a file imported twice gives two sets of journal keys. The file is found
next to the importing file, else next to the playbook; its name cannot be a template (it is
read before any host exists).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetfix.errors import PlaybookError
from fleetfix.playbook import catalog as kw
from fleetfix.playbook.catalog import shown
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.model import Step
from fleetfix.playbook.yamlpos import Entry, Node, load_yaml

if TYPE_CHECKING:
    from fleetfix.playbook.steps import ValueReader

__all__ = ["TaskImports", "import_entry"]

_IMPORT_TASKS = ("import_tasks", "ansible.builtin.import_tasks", "ansible.legacy.import_tasks")

StepListReader = Callable[[Node, str], tuple[Step, ...]]
"""Reads a list of steps (the importing StepReader's own step_list, for one role)."""

Inherited = tuple[tuple[str, ...], frozenset[str], dict[str, Any], tuple[str, ...]]
"""What the imported steps take from the import: when, tags, vars and notify."""
"""The import's when, tags and vars."""


def import_entry(node: Node) -> Entry | None:
    """The `import_tasks:` entry of a step mapping, or None."""
    if not node.is_mapping:
        return None
    for key in _IMPORT_TASKS:
        entry = node.entry(key)
        if entry is not None:
            return entry
    return None


class TaskImports:
    """The import_tasks of one play's step lists; problems go to the loader's list."""

    def __init__(self, values: ValueReader, base_dir: Path) -> None:
        self._values = values
        self._base_dir = base_dir
        self._importing: list[Path] = []  # files being read (a cycle is an error)

    def read(self, node: Node, entry: Entry, read_steps: StepListReader) -> tuple[Step, ...]:
        """The imported steps, with the import's keywords applied; () when reported."""
        inherited = self._keywords(node, entry)
        path = self._path(entry.value)
        if path is None or inherited is None:
            return ()
        if path in self._importing:
            self._values.report(
                entry.value.error(
                    f"import_tasks cycle: {path.name} imports itself (directly or through another)"
                )
            )
            return ()
        root = self._root(path, entry)
        if root is None:
            return ()
        self._importing.append(path)
        try:
            steps = read_steps(root, f"tasks in {path.name}")
        finally:
            self._importing.pop()
        return tuple(_inherit(step, inherited, f"{entry.key.position}>") for step in steps)

    def _root(self, path: Path, entry: Entry) -> Node | None:
        try:
            document = load_yaml(path)
        except PlaybookError as exc:
            self._values.report(exc if exc.position is not None else entry.value.error(str(exc)))
            return None
        for problem in document.problems:
            self._values.report(problem)
        return document.root

    def _keywords(self, node: Node, entry: Entry) -> Inherited | None:
        when: tuple[str, ...] = ()
        tags: frozenset[str] = frozenset()
        variables: dict[str, Any] = {}
        notify: tuple[str, ...] = ()
        ok = True
        for other in node.entries:
            key = other.key.value
            try:
                if other is entry or key == "name":
                    continue
                if key == "when":
                    when = self._values.conditions(other.value, "when", allow_empty=True)
                elif key == "tags":
                    tags = frozenset(kw.to_names(other.value, "tags", split_commas=True))
                elif key == "vars":
                    variables = self._values.vars(other.value, "vars")
                elif key == "notify":
                    notify = tuple(kw.to_names(other.value, "notify"))
                else:
                    ok = False
                    self._values.report(
                        other.key.error(
                            f"{shown(key)} is not supported on import_tasks",
                            hint="import_tasks takes name, when, tags, vars and notify; "
                            "put other keywords on the imported steps",
                        )
                    )
            except PlaybookError as exc:
                ok = False
                self._values.report(exc)
        return (when, tags, variables, notify) if ok else None

    def _path(self, node: Node) -> Path | None:
        """The imported file: next to the importing file, else next to the playbook."""
        name = node.value
        if not isinstance(name, str) or not name.strip():
            self._values.report(node.error(f"import_tasks needs a file name, not {shown(name)}"))
            return None
        if is_template(name):
            self._values.report(
                node.error(
                    "import_tasks reads its file when the playbook loads: the name cannot be "
                    "templated",
                    hint="write the file name, or use include_tasks for a file chosen per host",
                )
            )
            return None
        here = Path(node.position.file).parent
        for base in (here, self._base_dir):
            candidate = Path(os.path.normpath(base / os.path.expanduser(name)))
            if candidate.is_file():
                return candidate
        self._values.report(
            node.error(
                f"import_tasks file not found: {name}",
                hint=f"looked in {here} and {self._base_dir}",
            )
        )
        return None


def _inherit(step: Step, inherited: Inherited, site: str) -> Step:
    when, tags, variables, notify = inherited
    return replace(
        step,
        when=when + step.when,
        tags=step.tags | tags,
        vars={**variables, **step.vars},
        via=site + step.via,
        notify=tuple(dict.fromkeys((*step.notify, *notify))),
    )
