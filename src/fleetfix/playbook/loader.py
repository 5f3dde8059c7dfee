"""Playbook files to validated model values: plays, play keywords, and every problem found.

`validate_playbook` returns every problem it finds (for `fleetfix validate` and the CLI's
pre-run check); `load_playbook` raises the first one. Every error has file:line:col, a caret and
a hint. Everything that can be checked without a host is checked at load: keywords, value types,
probe/action names and params, handler names, variable names, and the syntax of every Jinja2
expression and template (compiled with the same sandboxed environment the run uses, so a
misspelt filter is caught too). Templated values stay strings in the model; the engine renders
them per host. This module reads the file and its plays; `steps` reads the steps inside them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fleetfix.errors import PlaybookError, SourcePosition
from fleetfix.inventory.vars_dirs import vars_directory_problems
from fleetfix.playbook import catalog as kw
from fleetfix.playbook.catalog import StepCatalog, shown, suggest
from fleetfix.playbook.conditions import Templar, is_template
from fleetfix.playbook.extravars import vars_problems
from fleetfix.playbook.imports import inherit
from fleetfix.playbook.model import Play, Playbook, Step, StepKind, handler_search_order
from fleetfix.playbook.module_defaults import read_module_defaults
from fleetfix.playbook.playkeywords import is_templated
from fleetfix.playbook.steps import Role, StepReader, ValueReader
from fleetfix.playbook.vars_files import VarsFileEntry
from fleetfix.playbook.yamlpos import Entry, Node, load_yaml

__all__ = ["StepCatalog", "load_playbook", "validate_playbook"]

_STEP_LISTS = ("handlers", "pre_tasks", "tasks", "post_tasks")  # handlers first: notify checks
_TO_STEPS = frozenset({"ignore_errors", "ignore_unreachable", "run_once", "module_defaults"})
"""Play keywords that are their steps' (as Ansible's steps inherit them from the play)."""
_NOT_FIELDS = frozenset({*_STEP_LISTS, "roles", *_TO_STEPS})  # read into steps, not Play fields


def load_playbook(
    path: str | Path,
    catalog: StepCatalog,
    *,
    templar: Templar | None = None,
    missing_handler_errors: bool = True,
) -> Playbook:
    """Load and validate a playbook.

    Args:
        path: the playbook file; positions in errors use it as given.
        catalog: the probes and actions that exist, with their accepted params.
        templar: the run's Templar, so expressions compiled here are not compiled again.
        missing_handler_errors: ansible's error_on_missing_handler: a literal notify naming
            no handler is refused (false: left to the run, which warns).

    Raises:
        PlaybookError: the first problem in file order (`validate_playbook` lists them all).
    """
    loader = _PlaybookLoader(path, catalog, templar or Templar())
    loader.missing_handler_errors = missing_handler_errors
    playbook, errors = loader.load()
    if errors:
        raise errors[0]
    return playbook


def validate_playbook(
    path: str | Path,
    catalog: StepCatalog,
    *,
    templar: Templar | None = None,
    missing_handler_errors: bool = True,
) -> list[PlaybookError]:
    """Every problem in the playbook, in file order; empty when it loads."""
    loader = _PlaybookLoader(path, catalog, templar or Templar())
    loader.missing_handler_errors = missing_handler_errors
    return loader.load()[1]


def load_task_file(
    path: str | Path, catalog: StepCatalog, *, templar: Templar | None = None
) -> tuple[Step, ...]:
    """The steps of a task file an include_tasks names at run time (a templated name).

    Raises:
        PlaybookError: the first problem in the file, with its place.
    """
    errors: list[PlaybookError] = []
    values = ValueReader(templar or Templar(), errors)
    try:
        document = load_yaml(path)
    except PlaybookError as exc:
        if exc.position is not None:
            raise
        raise PlaybookError(str(exc), SourcePosition(str(path), 1)) from exc
    errors.extend(document.problems)
    steps: tuple[Step, ...] = ()
    if document.root is not None:
        reader = StepReader(catalog, values, Path(path).parent)
        steps = reader.step_list(document.root, Role.TASK, f"tasks in {Path(path).name}")
    if errors:
        raise min(
            errors, key=lambda e: (e.position.line, e.position.column) if e.position else (0, 0)
        )
    return steps


_IMPORT_PLAYBOOK = (
    "import_playbook",
    "ansible.builtin.import_playbook",
    "ansible.legacy.import_playbook",
)


def _playbook_import(node: Node) -> Entry | None:
    for key in _IMPORT_PLAYBOOK:
        entry = node.entry(key)
        if entry is not None:
            return entry
    return None


class _PlaybookLoader:
    """One load of one playbook: walks the YAML, collects problems, builds the model."""

    def __init__(
        self,
        path: str | Path,
        catalog: StepCatalog,
        templar: Templar,
        importing: tuple[Path, ...] = (),
    ) -> None:
        self._path = path
        self._importing = (*importing, Path(os.path.realpath(path)))
        self._templar = templar
        self._file = str(path)
        self._base_dir = Path(path).parent
        self._catalog = catalog
        self._errors: list[PlaybookError] = []
        self._values = ValueReader(templar, self._errors)
        self._play_converters = self._play_table()
        self.missing_handler_errors = True
        """ansible's error_on_missing_handler: a literal notify naming no handler is refused."""

    # ------------------------------------------------------------------ playbook and plays

    def load(self, *, top: bool = True) -> tuple[Playbook, list[PlaybookError]]:
        plays: list[Play] = []
        try:
            document = load_yaml(self._path)
        except PlaybookError as exc:
            return Playbook(self._file, ()), [exc]
        self._errors.extend(document.problems)
        root = document.root
        if root is None:
            self._errors.append(
                PlaybookError("the playbook is empty", SourcePosition(self._file, 1, 1))
            )
        elif not root.is_sequence:
            hint = "start each play with '- ', e.g. '- hosts: gpu'" if root.is_mapping else None
            self._errors.append(root.error("a playbook must be a list of plays", hint=hint))
        else:
            for item in root.items:
                if item.is_mapping and _playbook_import(item) is not None:
                    plays.extend(self._import_playbook(item))
                elif (play := self._play(item)) is not None:
                    plays.append(play)
        if top:
            self._check_adjacent_vars()
        return Playbook(self._file, tuple(plays)), self._sorted_errors()

    def _import_playbook(self, node: Node) -> list[Play]:
        """The plays of an imported playbook, read now in place (Ansible's static import)."""
        entry = _playbook_import(node)
        assert entry is not None
        keywords = self._import_keywords(node, entry)
        if keywords is None:
            return []
        name = entry.value.value
        if not isinstance(name, str) or not name.strip() or is_template(name):
            self._report(
                entry.value.error(
                    f"import_playbook needs a file name (not a template), not {shown(name)}"
                )
            )
            return []
        path = Path(os.path.normpath(self._base_dir / os.path.expanduser(name)))
        if not path.is_file():
            self._report(
                entry.value.error(
                    f"import_playbook file not found: {name}", hint=f"looked for {path}"
                )
            )
            return []
        if Path(os.path.realpath(path)) in self._importing:
            self._report(entry.value.error(f"import_playbook cycle: {path.name} imports itself"))
            return []
        nested = _PlaybookLoader(path, self._catalog, self._templar, self._importing)
        nested.missing_handler_errors = self.missing_handler_errors
        playbook, errors = nested.load(top=False)
        self._errors.extend(errors)
        self._refuse_nested_vars_dirs(entry.value, path.parent)
        return [_imported_play(play, *keywords) for play in playbook.plays]

    def _import_keywords(
        self, node: Node, entry: Entry
    ) -> tuple[tuple[str, ...], frozenset[str], dict[str, Any]] | None:
        """An import_playbook's when, tags and vars (what Ansible's PlaybookInclude takes)."""
        when: tuple[str, ...] = ()
        tags: frozenset[str] = frozenset()
        variables: dict[str, Any] = {}
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
                else:
                    self._report(
                        other.key.error(
                            f"{shown(key)} is not supported on import_playbook",
                            hint="import_playbook takes when, tags and vars; put other keywords"
                            " on the imported playbook's plays",
                        )
                    )
                    return None
            except PlaybookError as exc:
                self._report(exc)
                return None
        return when, tags, variables

    def _refuse_nested_vars_dirs(self, node: Node, directory: Path) -> None:
        """Only the top playbook's group_vars/ and host_vars/ are read: refuse others rather
        than run without them (Ansible would read them for the imported plays)."""
        if os.path.realpath(directory) == os.path.realpath(self._base_dir):
            return
        for kind in ("group_vars", "host_vars"):
            if (directory / kind).is_dir():
                self._report(
                    node.error(
                        f"{kind}/ next to an imported playbook in another directory is not read "
                        f"by fleetfix: {directory / kind}",
                        hint="move the files next to the playbook you run",
                    )
                )

    def _check_adjacent_vars(self) -> None:
        """group_vars/ and host_vars/ next to the playbook are read at run time for the hosts
        the inventory has; every file in them must read now, before anything runs."""
        for problem in vars_directory_problems(str(self._base_dir)):
            self._report(
                PlaybookError(
                    problem.message,
                    problem.position,
                    source_line=problem.source_line,
                    hint=problem.hint,
                )
            )

    def _sorted_errors(self) -> list[PlaybookError]:
        def where(error: PlaybookError) -> tuple[int, str, int, int]:
            pos = error.position
            if pos is None:
                return (0, "", 0, 0)
            return (0 if pos.file == self._file else 1, pos.file, pos.line, pos.column)

        return sorted(self._errors, key=where)

    def _report(self, error: PlaybookError) -> None:
        self._errors.append(error)

    def _play(self, node: Node) -> Play | None:
        if not node.is_mapping:
            self._report(
                node.error(
                    f"a play must be a mapping with hosts: and tasks:, not {shown(node.value)}"
                )
            )
            return None
        unknown = self._check_play_keys(node)
        if node.get("hosts") is None and not unknown:  # with unknown keys, 'host:' says it
            self._report(
                node.error("play has no hosts:", hint="add hosts: <pattern>, e.g. hosts: gpu")
            )
        # this play's steps and notify: topics
        steps = StepReader(self._catalog, self._values, self._base_dir)
        defaults_node = node.get("module_defaults")
        if defaults_node is not None:
            steps.module_defaults = read_module_defaults(defaults_node, self._report)
        fields = self._play_fields(node)
        roles_node = node.get("roles")  # before the step lists: import_role's come after
        role_steps = steps.roles.play_roles(roles_node) if roles_node is not None else ()
        from_roles = len(steps.roles.handlers)  # roles:' handlers; import_role's come later
        for name in _STEP_LISTS:
            steps_node = node.get(name)
            if steps_node is not None:
                role = Role.HANDLER if name == "handlers" else Role.TASK
                fields[name] = steps.step_list(steps_node, role, name)
        if role_steps:  # roles run after pre_tasks, before tasks (Ansible's order)
            fields["tasks"] = (*role_steps, *fields.get("tasks", ()))
        if steps.roles.exposed_defaults or steps.roles.exposed_vars:  # public roles: play-wide
            fields["role_defaults"] = steps.roles.exposed_defaults
            fields["role_vars"] = steps.roles.exposed_vars
        # roles:' handlers, the play's, then import_role's and include_role's (ansible-core's
        # order: a play's handlers are prepended to those its task list's roles brought in)
        role_handlers = steps.roles.handlers
        handlers = _reachable(
            (*role_handlers[:from_roles], *fields.get("handlers", ()), *role_handlers[from_roles:])
        )
        if handlers:
            fields["handlers"] = handlers
        given = self._step_keywords(node)
        for name in _STEP_LISTS if given else ():
            if name in fields:
                fields[name] = tuple(given_to(step, given) for step in fields[name])
        self._check_notified(steps.notified, handlers, steps.brought_names)
        if "hosts" not in fields:  # reported above; the rest of the play was still checked
            return None
        fields.setdefault("name", fields["hosts"])
        return Play(position=node.position, **fields)

    def _play_fields(self, node: Node) -> dict[str, Any]:
        """The play's keywords as Play fields; a templated one (hosts: "{{ target }}") kept as
        its node in `templated`, rendered before the play runs."""
        fields: dict[str, Any] = {}
        templated: dict[str, Node] = {}
        for entry in node.entries:
            key = entry.key.value
            if key not in kw.PLAY_KEYWORDS or key in _NOT_FIELDS:
                continue
            if key != "hosts" and is_templated(key, entry.value):  # hosts: kept as written
                self._values.check_templates(entry.value)
                templated[key] = entry.value
            else:
                self._values.convert_into(fields, entry, self._play_value)
        if templated:
            fields["templated"] = templated
        return fields

    def _step_keywords(self, node: Node) -> dict[str, Any]:
        """The play's ignore_errors, ignore_unreachable and run_once, for its steps."""
        given: dict[str, Any] = {}
        for key in ("ignore_errors", "ignore_unreachable", "run_once"):
            value = node.get(key)
            if value is None:
                continue
            if key == "run_once" and isinstance(value.value, str) and is_template(value.value):
                self._values.check_templates(value)
                given[key] = value.value
                continue
            try:
                given[key] = kw.to_bool(value, key)
            except PlaybookError as exc:
                self._report(exc)
        return {key: value for key, value in given.items() if value is not False}

    def _check_play_keys(self, node: Node) -> int:
        unknown = 0
        for entry in node.entries:
            key = entry.key.value
            if isinstance(key, str) and key in kw.PLAY_KEYWORDS:
                continue
            unknown += 1
            self._report(self._unknown_play_key(entry.key))
        return unknown

    def _unknown_play_key(self, key_node: Node) -> PlaybookError:
        key = key_node.value
        if not isinstance(key, str):
            return key_node.error(f"play keywords are words, not {shown(key)}")
        if key in kw.UNSUPPORTED_PLAY_KEYWORDS:
            return key_node.error(
                f"unsupported play keyword {key!r}", hint=kw.UNSUPPORTED_PLAY_KEYWORDS[key]
            )
        if key in kw.STEP_KINDS or key in kw.STEP_KEYWORDS:
            return key_node.error(
                f"{key!r} is a step keyword, not a play keyword",
                hint="steps go in a list under tasks:",
            )
        return key_node.error(f"unknown play keyword {key!r}", hint=suggest(key, kw.PLAY_KEYWORDS))

    def _play_table(self) -> Mapping[str, Callable[[Node], Any]]:
        """How each play keyword's value is read (booleans are the rest)."""
        values = self._values
        return {
            "name": lambda n: values.template_string(n, "name"),
            "hosts": self._hosts,
            "vars": lambda n: values.vars(n, "vars"),
            "vars_files": self._vars_files,
            "serial": kw.to_serial,
            "max_fail_percentage": lambda n: kw.to_percent(n, "max_fail_percentage"),
            "order": lambda n: kw.to_choice(n, "order", kw.PLAY_ORDERS),
            "strategy": lambda n: kw.to_choice(n, "strategy", kw.STRATEGIES),
            "become_user": lambda n: values.template_string(n, "become_user"),
            "tags": lambda n: frozenset(kw.to_names(n, "tags", split_commas=True)),
            "max_unavailable_per": kw.to_unavailable_caps,
            "environment": values.environment,
            "timeout": lambda n: kw.to_seconds(n, "timeout"),
            "gather_subset": lambda n: kw.to_names(n, "gather_subset", split_commas=True),
            "gather_timeout": lambda n: kw.to_seconds(n, "gather_timeout"),
        }

    def _play_value(self, key: str, node: Node) -> Any:
        convert = self._play_converters.get(key)
        return convert(node) if convert is not None else kw.to_bool(node, key)

    def _hosts(self, node: Node) -> str:
        patterns = kw.to_names(node, "hosts")
        if not patterns:
            raise node.error("hosts must name at least one host or group")
        self._values.check_templates(node)
        return ",".join(patterns)

    def _vars_files(self, node: Node) -> tuple[VarsFileEntry, ...]:
        """File names; alternatives with a template stay a tuple, picked per host at run
        time (playbook/vars_files.py), the others are picked here."""
        per_host: dict[int, tuple[str, ...]] = {}
        if node.is_sequence and any(item.is_sequence for item in node.items):
            chosen = []
            for index, item in enumerate(node.items):
                if item.is_sequence and any(is_template(a.value) for a in item.items):
                    per_host[index] = self._templated_alternatives(item)
                    chosen.append(item.items[0])
                else:
                    chosen.append(self._first_vars_file(item) if item.is_sequence else item)
            node = replace(node, items=tuple(chosen), value=[i.value for i in chosen])
        files = kw.to_names(node, "vars_files")
        for index, item in enumerate(node.items if node.is_sequence else (node,)):
            if is_template(item.value):
                self._values.check_templates(item)  # the file is known only per host, at run time
            elif index not in per_host:
                self._check_vars_file(item)
        return tuple(per_host.get(index, name) for index, name in enumerate(files))

    def _templated_alternatives(self, alternatives: Node) -> tuple[str, ...]:
        names = []
        for item in alternatives.items:
            if not isinstance(item.value, str | int) or isinstance(item.value, bool):
                raise item.error(
                    f"a vars_files alternative must be a file name, not {shown(item.value)}"
                )
            self._values.check_templates(item)
            names.append(str(item.value))
        return tuple(names)

    def _first_vars_file(self, alternatives: Node) -> Node:
        """`vars_files: [[a.yml, b.yml]]`: the first of the files that exists, as Ansible.

        Raises:
            PlaybookError: none exists (templated alternatives are picked per host instead).
        """
        for item in alternatives.items:
            if not isinstance(item.value, str | int) or isinstance(item.value, bool):
                raise item.error(
                    f"a vars_files alternative must be a file name, not {shown(item.value)}"
                )
            path = Path(os.path.normpath(self._base_dir / os.path.expanduser(str(item.value))))
            if path.is_file():
                return item
        names = ", ".join(str(item.value) for item in alternatives.items)
        raise alternatives.error(
            f"vars file [{names}] was not found", hint=f"looked in {self._base_dir}"
        )

    def _check_vars_file(self, item: Node) -> None:
        # A number is a file name too (to_names reads `vars_files: [0]` as "0"); an unknown
        # `~user` stays as written, as os.path.expanduser (and Ansible) leave it.
        name = os.path.expanduser(str(item.value))
        path = Path(os.path.normpath(self._base_dir / name))
        try:
            document = load_yaml(path)
        except PlaybookError as exc:
            if exc.position is None:
                self._report(
                    item.error(
                        f"vars file not found or unreadable: {item.value}",
                        hint=f"looked for {path}",
                    )
                )
            else:
                self._report(exc)
            return
        self._errors.extend(document.problems)
        if document.root is not None:
            self._errors.extend(vars_problems(document.root, "a vars file"))
            self._values.check_templates(document.root)

    # ------------------------------------------------------------------ handlers and notify

    def _check_notified(
        self, notified: list[tuple[str, Node]], handlers: tuple[Step, ...], brought: set[str]
    ) -> None:
        """Each literal notify: topic must name a handler (or a listen: topic) of the play. A
        templated topic, or any topic when a handler's name is templated, is left to run time
        (Ansible renders both per host), as is one naming a step a handler import or include
        brings in, or the import itself (`brought`): ansible-core fails those when the step
        notifies, after the steps before it ran, and so does fleetfix (engine/play.py). With
        error_on_missing_handler false nothing is refused: the run warns instead."""
        handler_topics = {t for h in handlers for t in _topics(h)}
        if not self.missing_handler_errors or any(is_template(t) for t in handler_topics):
            return
        for written, node in notified:
            # `notify: 2024` names the topic "2024", as to_names reads it (not the number).
            topic = written if isinstance(written, str) else str(written)
            if topic in handler_topics or topic in brought or is_template(topic):
                continue
            hint = suggest(topic, handler_topics) or (
                "add a handler with this name (or listen:) under handlers:"
            )
            self._report(node.error(f"notify names no handler of this play: {topic!r}", hint=hint))


def given_to(step: Step, given: Mapping[str, Any]) -> Step:
    """A step with its play's ignore_errors, ignore_unreachable and run_once, where it does
    not set its own: ignore_* on every step at any depth (as imports.inherit gives them);
    run_once on the steps that run, not on a block or an include (their steps get it)."""
    ignoring = {k: v for k, v in given.items() if k != "run_once"}
    step = inherit(step, ignoring) if ignoring else step
    return _run_once_within(step, given["run_once"]) if "run_once" in given else step


def _run_once_within(step: Step, run_once: bool | str) -> Step:
    if step.kind is StepKind.BLOCK:
        return replace(
            step,
            block=tuple(_run_once_within(child, run_once) for child in step.block),
            rescue=tuple(_run_once_within(child, run_once) for child in step.rescue),
            always=tuple(_run_once_within(child, run_once) for child in step.always),
        )
    included = step.args.get("steps")
    if isinstance(included, tuple):  # an include read at load
        steps = tuple(_run_once_within(child, run_once) for child in included)
        return replace(step, args={**step.args, "steps": steps})
    return step if step.run_once is not False else replace(step, run_once=run_once)


def _imported_play(
    play: Play, when: tuple[str, ...], tags: frozenset[str], variables: dict[str, Any]
) -> Play:
    """An imported play with its import_playbook's keywords, as Ansible's PlaybookInclude:
    its vars over the play's, its tags added, its `when` before every step's (not the
    handlers'; fleetfix does not condition fact gathering on it)."""

    def conditioned(steps: tuple[Step, ...]) -> tuple[Step, ...]:
        return tuple(replace(step, when=when + step.when) for step in steps) if when else steps

    return replace(
        play,
        vars={**play.vars, **variables},
        tags=play.tags | tags,
        pre_tasks=conditioned(play.pre_tasks),
        tasks=conditioned(play.tasks),
        post_tasks=conditioned(play.post_tasks),
    )


def _reachable(handlers: tuple[Step, ...]) -> tuple[Step, ...]:
    """The play's handlers less those nothing can notify: one without listen: topics that
    another handler of the same name and source hides (the one ansible-core 2.19 finds first:
    handler_search_order; engine/handlers.py resolves notify topics at run time). One that a
    later source's hides stays: that source may be an include_role's, notifiable only once
    the include has run."""
    found: dict[tuple[str, str | None], int] = {}
    for index in handler_search_order(handlers):
        found.setdefault(_name_in_source(handlers[index]), index)
    return tuple(
        handler
        for index, handler in enumerate(handlers)
        if handler.listen or found[_name_in_source(handler)] == index
    )


def _name_in_source(handler: Step) -> tuple[str, str | None]:
    return handler.name, None if handler.role is None else handler.role.path


def _topics(handler: Step) -> tuple[str, ...]:
    """What notifies a handler: its name and listen: topics, a role's also `ROLE : TOPIC`."""
    if handler.role is None:
        return (handler.name, *handler.listen)
    role = handler.role.name
    return (handler.name, *handler.listen, *(f"{role} : {t}" for t in handler.listen))
