"""include_tasks and include_role: Ansible's dynamic includes, decided per host at run time.

Unlike import_tasks, the include is a step of its own: its `when` is evaluated once, for the
include (the included steps do not inherit it), its `tags` select the include, and a `loop`
includes the file once per item with the item's variables. A file name that is a literal is
read now, so its problems are reported before anything runs (`Step.args['steps']`); a
templated one (`"xid{{ code }}.yml"`) is read when a host first includes it, and a file that
cannot be read fails that host's include. include_role's role is read now when its name is a
literal; its handlers join the play's; with `public: true` its defaults and vars
(`Step.args['public']`) join the host's play variables once the host runs the include.
`apply:` gives its keywords to the included steps, as Ansible's block around them
(`Step.args['apply']`, for a file read at run time).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetfix.errors import PlaybookError
from fleetfix.playbook.catalog import NOT_ON_BLOCK, STEP_KEYWORDS, shown, suggest
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.imports import KeywordReader, inherit
from fleetfix.playbook.model import Step, StepKind
from fleetfix.playbook.module_args import kv_mapping
from fleetfix.playbook.yamlpos import Entry, Node, NodeKind, load_yaml

if TYPE_CHECKING:
    from fleetfix.playbook.roles import RoleReader
    from fleetfix.playbook.steps import ValueReader

INCLUDE_KINDS = frozenset({StepKind.INCLUDE_TASKS, StepKind.INCLUDE_ROLE})
INCLUDE_KEYWORDS = frozenset(
    {"name", "when", "vars", "tags", "loop", "with_items", "with_list", "loop_control"}
    | {"with_sequence", "with_indexed_items"}
    | {"ignore_errors", "register", "no_log", "run_once", "timeout", "listen"}
)
"""The keywords an include takes (ansible-core's TaskInclude.VALID_INCLUDE_KEYWORDS, with
`listen` for a handler's); the included steps carry the rest themselves. `run_once` and
`timeout` are the include's own: it is included on the first host only; the timeout bounds
the include, never its steps (the loader keeps it off the step)."""
_ROLE_ARGS = frozenset(
    {"name", "tasks_from", "handlers_from", "vars_from", "defaults_from", "allow_duplicates"}
    | {"public", "rolespec_validate", "apply"}
)

ROLE_FILES = ("tasks_from", "vars_from", "defaults_from", "handlers_from")
"""The include_role arguments that choose a role's files."""

StepListReader = Callable[[Node, str], tuple[Step, ...]]
_NOT_IMPORT_ARGS = ("public", "rolespec_validate", "apply")  # allow_duplicates: RoleReader


def with_include_args(entry: Entry, args: Node) -> Entry:
    """The include's entry with `args:` merged into its arguments, as ansible-core reads
    them (`include_tasks: FILE` + `args: {apply: ...}`: the file is `_raw_params`).

    Raises:
        PlaybookError: args: is not a mapping, or repeats an argument.
    """
    what = str(entry.key.value)
    if not args.is_mapping:
        raise args.error(f"args: must be a mapping of {what} arguments, not {shown(args.value)}")
    own = kv_mapping(entry.value, what)
    if own.is_mapping:
        mine = own.entries
    elif own.value is None:
        mine = ()
    else:  # the free form: a file (or role) name
        key = "name" if what.endswith("include_role") else "_raw_params"
        mine = (Entry(Node(NodeKind.SCALAR, key, own.position, own.source_line), own),)
    written = {e.key.value for e in mine}
    for arg in args.entries:
        if arg.key.value in written:
            raise arg.key.error(f"argument {shown(arg.key.value)} given twice (and in args:)")
    entries = (*mine, *args.entries)
    value = {e.key.value: e.value.value for e in entries}
    where = entry.value
    return Entry(
        entry.key, Node(NodeKind.MAPPING, value, where.position, where.source_line, entries)
    )


def candidates(
    name: str, including_file: str, playbook_dir: Path, role_dir: Path | None = None
) -> list[Path]:
    """Where a task file named in an include is looked for: in a role, its tasks/ directory
    and the role's own directory (Ansible's path_dwim_relative, so a role's handlers include
    its tasks/ files); then next to the including file, then next to the playbook."""
    expanded = os.path.expanduser(name)
    if os.path.isabs(expanded):
        return [Path(expanded)]
    here = Path(including_file).parent
    roles = (role_dir / "tasks", role_dir) if role_dir is not None else ()
    bases = dict.fromkeys((*roles, here, playbook_dir))
    return [Path(os.path.normpath(base / expanded)) for base in bases]


class Includes:
    """The include_tasks/include_role steps of one play; problems go to the loader's list."""

    def __init__(
        self,
        values: ValueReader,
        base_dir: Path,
        roles: RoleReader,
        read_steps: StepListReader,
        read_keywords: KeywordReader,
        *,
        read_handlers: StepListReader | None = None,
    ) -> None:
        self._values = values
        self._read_handlers = read_handlers or read_steps
        self._read_keywords = read_keywords
        self._base_dir = base_dir
        self._roles = roles
        self._read_steps = read_steps
        self._reading: list[Path] = []  # files being read: an include of itself is read later

    def tasks_args(
        self, entry: Entry, *, conditional: bool = False, handler: bool = False
    ) -> dict[str, Any]:
        """{'file': name as written, 'steps': the file's steps when the name is a literal}.

        A literal file with problems is refused now, unless the include has a `when`: then,
        as Ansible reads an include only when a host reaches it (a file for another
        platform, under a `when` that never holds on this one), the file is read again when
        a host gets there, and its problems fail that host's include (`deferred` says which).
        A handler's include reads its file as handlers (a block there is refused, as
        ansible-core refuses it)."""
        node = kv_mapping(entry.value, "include_tasks")
        applied: dict[str, Any] = {}
        if node.is_mapping:
            for arg in node.entries:
                if arg.key.value == "apply":
                    applied = self._apply(arg.value)
                elif arg.key.value not in ("file", "_raw_params"):
                    raise arg.key.error(
                        f"unknown include_tasks argument {shown(arg.key.value)}",
                        hint=suggest(str(arg.key.value), ("file",)),
                    )
            named = node.get("file") or node.get("_raw_params")
            if named is None:
                raise node.error("include_tasks needs file: NAME")
            node = named
        name = node.value
        if not isinstance(name, str) or not name.strip():
            raise node.error(f"include_tasks needs a file name, not {shown(name)}")
        if is_template(name):
            self._values.check_templates(node)
            return {"file": name, "apply": applied}
        places = candidates(name, node.position.file, self._base_dir, self._roles.current_dir)
        path = next((p for p in places if p.is_file()), None)
        if path is None and conditional:  # looked for again when a host reaches it
            return {"file": name, "apply": applied}
        if path is None:
            looked = ", ".join(str(p) for p in places)
            raise node.error(f"include_tasks file not found: {name}", hint=f"looked for {looked}")
        if path in self._reading:  # includes itself: read when a host gets there
            return {"file": name, "apply": applied}
        return self._literal(name, path, node, applied, conditional=conditional, handler=handler)

    def _literal(
        self,
        name: str,
        path: Path,
        node: Node,
        applied: dict[str, Any],
        *,
        conditional: bool,
        handler: bool = False,
    ) -> dict[str, Any]:
        """A literal file's steps, read now; a conditional include's problems wait for a host
        that reaches it (`deferred`: the first of them)."""
        mark = self._values.mark()
        steps: tuple[Step, ...] = ()
        try:
            read = self._read(path, node, handler=handler)
            steps = tuple(inherit(step, applied) for step in read)
        except PlaybookError as exc:
            if not conditional:
                raise
            self._values.report(exc)
        if conditional and self._values.mark() > mark:
            problems = self._values.taken_since(mark)
            return {"file": name, "apply": applied, "deferred": str(problems[0])}
        return {"file": name, "steps": steps, "apply": applied}

    def role_args(self, entry: Entry) -> dict[str, Any]:
        """{'role': name, 'steps': the role's steps}; its handlers go to the play's."""
        node = kv_mapping(entry.value, "include_role")
        if not node.is_mapping:
            raise node.error("include_role takes a mapping: {name: ROLE, ...} (or name=ROLE)")
        for arg in node.entries:
            if arg.key.value not in _ROLE_ARGS:
                raise arg.key.error(
                    f"unknown include_role argument {shown(arg.key.value)}",
                    hint=suggest(str(arg.key.value), _ROLE_ARGS),
                )
        named = node.get("name")
        if named is None:
            raise node.error("include_role needs name: ROLE")
        apply_node = node.get("apply")
        applied = self._apply(apply_node) if apply_node is not None else {}
        public = self._roles.public(node.get("public"), static=False)
        if self._run_time(node):
            return {
                "role": str(named.value),
                "run_time": _run_time_args(named, node),
                "apply": applied,
                "public": public,
            }
        if isinstance(named.value, str) and not self._roles.exists(named.value.strip(), named):
            return {"role": str(named.value), "steps": (), "missing": True}
        wrapper = Node(NodeKind.MAPPING, None, entry.key.position, entry.key.source_line)
        kept = tuple(a for a in node.entries if a.key.value not in _NOT_IMPORT_ARGS)
        steps = self._roles.import_role(
            wrapper, Entry(entry.key, replace(node, entries=kept)), included=True
        )
        role = {"role": str(named.value), "steps": tuple(inherit(s, applied) for s in steps)}
        if public:  # its defaults and vars: the play's from when a host runs it
            role["public"] = self._roles.last_read
        return role

    def _run_time(self, node: Node) -> bool:
        """Whether the role is chosen per host: its name or a file is a template (or omit).
        A file argument must be a string (a list is refused here, as Ansible does)."""
        templated = False
        for key in ("name", *ROLE_FILES):
            arg = node.get(key)
            if arg is None:
                continue
            if not isinstance(arg.value, str):
                raise arg.error(f"include_role {key} must be a string, not {shown(arg.value)}")
            if is_template(arg.value):
                self._values.check_templates(arg)
                templated = True
        return templated

    def _apply(self, node: Node) -> dict[str, Any]:
        """`apply:`: keywords the included steps take, as from a block around them."""
        if not node.is_mapping:
            raise node.error(f"apply takes a mapping of step keywords, not {shown(node.value)}")
        for arg in node.entries:
            key = arg.key.value
            if key in NOT_ON_BLOCK or key not in STEP_KEYWORDS:
                raise arg.key.error(
                    f"{shown(key)} is not valid in apply:",
                    hint="apply: takes the keywords a block takes (tags, when, become, ...)",
                )
        return self._read_keywords(node, None)

    def _read(self, path: Path, where: Node, *, handler: bool = False) -> tuple[Step, ...]:
        try:
            document = load_yaml(path)
        except PlaybookError as exc:
            raise exc if exc.position is not None else where.error(str(exc)) from exc
        for problem in document.problems:
            self._values.report(problem)
        if document.root is None:
            return ()
        self._reading.append(path)
        try:
            reader = self._read_handlers if handler else self._read_steps
            return reader(document.root, f"tasks in {path.name}")
        finally:
            self._reading.pop()


def _run_time_args(named: Node, node: Node) -> dict[str, Any]:
    """What a host renders to read the role: its name and file arguments as written."""
    files = {key: arg.value for key in ROLE_FILES if (arg := node.get(key)) is not None}
    return {"name": named.value, "files": files}
