"""import_tasks: the steps of an imported file, read at load as Ansible's static import.

The imported steps keep their own file:line:col (errors point into the imported file); the
import's `when`, `tags` and `vars` apply to every one of them, and each remembers the import
site (`Step.via`), so a file imported twice gives two sets of journal keys. The file is found
next to the importing file, else next to the playbook; its name cannot be a template (it is
read before any host exists).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import MISSING, fields, replace
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

__all__ = ["TaskImports", "import_entry", "inherit"]

_IMPORT_TASKS = ("import_tasks", "ansible.builtin.import_tasks", "ansible.legacy.import_tasks")

StepListReader = Callable[[Node, str], tuple[Step, ...]]
"""Reads a list of steps (the importing StepReader's own step_list, for one role)."""

Inherited = dict[str, Any]
"""What the imported steps take from the import: its keywords, as Step fields."""

KeywordReader = Callable[[Node, Entry | None], Inherited]
"""Reads the step keywords of a mapping (leaving out one entry) as Step fields."""


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

    def __init__(
        self, values: ValueReader, base_dir: Path, read_keywords: KeywordReader | None = None
    ) -> None:
        self._values = values
        self._base_dir = base_dir
        self._read_keywords = read_keywords
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
        site = f"{entry.key.position}>"
        return tuple(replace(inherit(step, inherited), via=site + step.via) for step in steps)

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
        """The keywords written next to import_tasks: those a block takes (Ansible lets an
        import carry every inheritable keyword); loops and per-result ones are refused."""
        ok = True
        for other in node.entries:
            key = other.key.value
            if other is entry or key == "name":
                continue
            if key in kw.NOT_ON_BLOCK or key not in kw.STEP_KEYWORDS:
                ok = False
                self._values.report(
                    other.key.error(
                        f"{shown(key)} is not supported on import_tasks",
                        hint="import_tasks takes the keywords a block takes (when, tags, vars,"
                        " notify, become, check_mode, ...); put other keywords on the imported"
                        " steps",
                    )
                )
        if not ok:
            return None
        return self._read_keywords(node, entry) if self._read_keywords is not None else {}

    def _path(self, node: Node) -> Path | None:
        """The imported file: next to the importing file (then, from a role's handlers/, in
        the role's directory), else next to the playbook."""
        if node.is_mapping:  # `import_tasks: {file: NAME}`, as ansible-core reads it
            named = self._file_argument(node)
            if named is None:
                return None
            node = named
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
        # a role's handlers/ file: the role's own directory next (ansible's path_dwim_relative)
        role_dir = (here.parent,) if here.name == "handlers" else ()
        for base in (here, *role_dir, self._base_dir):
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

    def _file_argument(self, node: Node) -> Node | None:
        """The file of the mapping form; any other argument is refused as ansible-core's
        'Invalid options for import_tasks' (apply: is include_tasks' only)."""
        for arg in node.entries:
            if arg.key.value not in ("file", "_raw_params"):
                hint = "apply: is for include_tasks; put the keywords on the import itself"
                self._values.report(
                    arg.key.error(
                        f"invalid option for import_tasks: {shown(arg.key.value)}",
                        hint=hint if arg.key.value == "apply" else "import_tasks takes file:",
                    )
                )
                return None
        named = node.get("file") or node.get("_raw_params")
        if named is None:
            self._values.report(node.error("import_tasks needs file: NAME"))
        return named


_UNSET = {f.name: f.default for f in fields(Step) if f.default is not MISSING}
"""Each Step field's value when the step does not set it."""
_MERGED = frozenset({"when", "tags", "vars", "notify", "environment", "ignore_errors", "name"})


def set_keywords(parent: Step, names: Iterable[str]) -> dict[str, Any]:
    """The keywords among `names` that `parent` sets (not left at the Step default), for
    `inherit`: what a parent gives the steps under it."""
    return {n: v for n in names if (v := getattr(parent, n)) != _UNSET.get(n)}


def inherit(step: Step, keywords: Inherited) -> Step:
    """The step with the keywords of the import (or of an include's `apply:`) that brings it
    in, as Ansible's parent block gives them: `when` first, tags, vars, notify and environment
    joined, and each other keyword (become, check_mode, no_log, ...) where the step, or a
    step inside it at any depth, does not set its own."""
    if not keywords:
        return step
    notify = tuple(keywords.get("notify", ()))
    changed = replace(
        step,
        when=tuple(keywords.get("when", ())) + step.when,
        tags=step.tags | frozenset(keywords.get("tags", ())),
        vars={**keywords.get("vars", {}), **step.vars},
        notify=tuple(dict.fromkeys((*step.notify, *notify))),
        environment={**keywords.get("environment", {}), **step.environment},
        ignore_errors=step.ignore_errors or bool(keywords.get("ignore_errors")),
    )
    return _defaults(changed, {k: v for k, v in keywords.items() if k not in _MERGED})


def _defaults(step: Step, keywords: dict[str, Any]) -> Step:
    """Each keyword set where the step (and its children, at any depth) left it unset."""
    if not keywords:
        return step
    unset = {k: v for k, v in keywords.items() if getattr(step, k) == _UNSET.get(k)}
    args = step.args
    if isinstance(args.get("steps"), tuple):  # an include read at load: its steps inherit too
        args = {**args, "steps": tuple(_defaults(child, keywords) for child in args["steps"])}
    return replace(
        step,
        **unset,
        args=args,
        block=tuple(_defaults(child, keywords) for child in step.block),
        rescue=tuple(_defaults(child, keywords) for child in step.rescue),
        always=tuple(_defaults(child, keywords) for child in step.always),
    )
