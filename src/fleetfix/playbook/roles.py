"""Roles: a play's `roles:` and a step's `import_role:`, read at load as Ansible's static ones.

A role is a directory `NAME/` with `tasks/main.yml` (or `tasks_from:`), `handlers/main.yml`,
`defaults/main.yml`, `vars/main.yml`, `meta/main.yml` (dependencies, run first), `files/` and
`templates/`; each part is optional (a role of handlers or defaults alone is valid). It is
found as Ansible's RoleDefinition finds it: a collection's role (`NS.COL.ROLE`) under
`ansible_collections/NS/COL/roles/ROLE` of the playbook's `collections/` directory or of
`collections_path` (ansible.cfg or ANSIBLE_COLLECTIONS_PATH, else Ansible's default); else in
the playbook's `roles/` directory, `roles_path` (ansible.cfg or ANSIBLE_ROLES_PATH), for a
dependency the depending role's parent directory, next to the playbook, then as a path from
the working directory. A collection's role is named by its FQCN in banners, `role_name` is its
short name, and its handlers are notified as `NS.COL.ROLE : X` or `ROLE : X`.

Each of its steps is named `ROLE : STEP` (Ansible's banner), carries the role (`Step.role`, a
RoleRun: its directory, defaults, which sit below every other variable, and vars, below the
blocks' and an include's around it) and has the role's params, `role_name` and `role_path`
as its own vars; the role entry's `when`, `tags` and `vars` apply to each, as for
import_tasks. Its handlers join the play's (notified by their name
or `ROLE : NAME`). A role listed twice in `roles:` with the same parameters runs once.

A public role's defaults and vars (its dependencies' included) are the whole play's, as
ansible-core's VariableManager layers them: a `roles:` entry's and an import_role's from the
play's start (even for the steps before it), unless `public: false` or `private_role_vars`
(ansible.cfg, ANSIBLE_PRIVATE_ROLE_VARS) says otherwise; an include_role's only with
`public: true` (or `private_role_vars` set false), and from when a host runs it
(`exposed_defaults`/`exposed_vars` here, `Step.args['public']` for an include).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetfix.ansible_cfg import read_settings
from fleetfix.booleans import boolean
from fleetfix.errors import FleetfixError, PlaybookError
from fleetfix.playbook import catalog as kw
from fleetfix.playbook.catalog import shown
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.model import RoleInfo, Step, StepKind
from fleetfix.playbook.module_args import kv_mapping
from fleetfix.playbook.yamlpos import Entry, Node, load_yaml

if TYPE_CHECKING:
    from fleetfix.playbook.steps import ValueReader

__all__ = ["ROLE_IMPORTS", "RoleReader", "RoleRun", "in_role", "role_entry"]

ROLE_IMPORTS = ("import_role", "ansible.builtin.import_role", "ansible.legacy.import_role")
_ENTRY_KEYWORDS = frozenset({"role", "name", "vars", "tags", "when"})
"""What a `roles:` entry may say besides the role's own parameters."""
_IMPORT_ARGS = frozenset({"name", "tasks_from", "handlers_from", "vars_from", "defaults_from"})
_ACCEPTED_ARGS = frozenset({"allow_duplicates", "public", "rolespec_validate"})
"""import_role arguments read apart from the files: `public` (RoleReader.public), and two left
as they are: an import_role always runs its role (`allow_duplicates`)."""
_IMPORT_KEYWORDS = frozenset({"name", "when", "tags", "vars"})

StepsReader = Callable[[Node, bool, str], tuple[Step, ...]]

_FQCR = re.compile(r"([A-Za-z_]\w*)\.([A-Za-z_]\w*)\.(\w+)")
"""A collection's role by its full name, NS.COL.ROLE (ansible-core's is_valid_fqcr)."""
_DEFAULT_COLLECTIONS = ("~/.ansible/collections", "/usr/share/ansible/collections")
"""ansible-core's COLLECTIONS_PATHS where neither ansible.cfg nor the environment sets one."""
"""Reads a list of steps: (node, as handlers?, what) -> steps."""


@dataclass(frozen=True, slots=True)
class _Use:
    """One use of a role: which, which files, and what the using entry adds."""

    name: str
    where: Node
    site: str
    when: tuple[str, ...] = ()
    tags: frozenset[str] = frozenset()
    variables: tuple[tuple[str, Any], ...] = ()
    tasks_from: str = "main"
    handlers_from: str = "main"
    vars_from: str = "main"
    defaults_from: str = "main"
    role_basedir: str = ""
    """For a dependency: the directory holding the role that depends on it (searched too)."""
    from_include: bool = False
    """import_role or include_role (ansible-core's Role.from_include): never the same role as
    a `roles:` entry's or a dependency's, for deduplication."""
    allow_duplicates: bool | None = None
    """The import's or include's `allow_duplicates` (True unless given); None: the role's
    meta/main.yml decides (a `roles:` entry or a dependency)."""


@dataclass(frozen=True, slots=True)
class RoleRun(RoleInfo):
    """One use of a role as it runs (ansible-core compiles each use's tasks, then its
    role_complete): end_role ends this use for a host; a host that ran a step of an equal use
    skips this one when it is `dedupe`."""

    role_vars: Mapping[str, Any] = field(default_factory=dict)
    """Its vars/main.yml (its dependencies' under it): above play vars, below the vars of
    the blocks and the include around its steps (engine/steps.py `_variables`)."""
    identity: str = ""
    """ansible-core's Role hash: path, parameters and vars, when, tags, files, from_include."""
    dedupe: bool = False
    """The use does not allow duplicates: a host that ran an equal use before skips it."""
    use: object = field(default_factory=object, compare=False)
    """This use, as a token (end_role ends it; two uses of a role are two tokens)."""


def role_entry(node: Node) -> Entry | None:
    """The `import_role:` entry of a step mapping, or None."""
    if not node.is_mapping:
        return None
    return next((e for key in ROLE_IMPORTS if (e := node.entry(key)) is not None), None)


class RoleReader:
    """The roles of one play; problems go to the loader's list, handlers to `handlers`."""

    def __init__(self, values: ValueReader, base_dir: Path, read_steps: StepsReader) -> None:
        self._values = values
        self._base_dir = base_dir
        self._read_steps = read_steps
        self._stack: list[str] = []  # roles being read (a dependency cycle is an error)
        self._cycles: set[frozenset[str]] = set()  # each cycle said once, where first met
        self._handler_files: set[str] = set()
        self._roles_path: list[Path] | None = None
        self._collections_path: list[Path] | None = None
        self._exposed: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        """A role's defaults and vars by directory: a role sees its dependencies' too."""
        self._private: bool | str | None = ""  # private_role_vars; "" until read
        self._chained: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        """A role's defaults and vars with those of the roles including it, as its steps see
        them (a role it imports or includes sees them too)."""
        self.last_read: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        """The defaults and vars (its dependencies' under its own) of the last role read."""
        self.exposed_defaults: dict[str, Any] = {}
        """The public roles' defaults: the play's lowest-precedence variables."""
        self.exposed_vars: dict[str, Any] = {}
        """The public roles' vars: above play vars and vars_files, below a step's own role's."""
        self.handlers: list[Step] = []

    def play_roles(self, node: Node) -> tuple[Step, ...]:
        """The steps of a play's `roles:` list, in order, dependencies first."""
        if not node.is_sequence:
            self._values.report(node.error(f"roles must be a list, not {shown(node.value)}"))
            return ()
        steps: list[Step] = []
        for item in node.items:
            use = self._roles_entry(item)
            if use is not None:
                self.last_read = ({}, {})
                steps.extend(self._expand(use))
                if self.public(None, static=True):
                    self._expose(self.last_read)
        return tuple(steps)

    def import_role(self, node: Node, entry: Entry, *, included: bool = False) -> tuple[Step, ...]:
        """The steps of an `import_role:` step (in a task list); a public one's variables join
        the play's. `included`: a literal include_role's role, exposed at run time instead
        (its `public` is the include's: playbook/includes.py)."""
        use = self._import_entry(node, entry)
        if use is None:
            return ()
        self.last_read = ({}, {})
        steps = self._expand(use)
        if not included and self.public(_public_arg(entry.value), static=True):
            self._expose(self.last_read)
        return steps

    def public(self, given: Node | None, *, static: bool) -> bool:
        """Whether a role's defaults and vars are the play's, as ansible-core decides it: the
        `public:` given, else `private_role_vars` where it is set, else imports public and
        includes private."""
        if given is not None:
            try:
                return boolean(given.value)
            except (TypeError, ValueError):
                self._values.report(given.error(f"public must be a boolean, not {shown(given)}"))
                return False
        if self._private == "":  # ansible.cfg read once, at the first role
            self._private = _configured_private()
        return static if self._private is None else not self._private

    def _expose(self, layers: tuple[dict[str, Any], dict[str, Any]]) -> None:
        self.exposed_defaults.update(layers[0])
        self.exposed_vars.update(layers[1])

    def include_role(self, name: str, where: Node, files: dict[str, str]) -> tuple[Step, ...]:
        """The steps of an include_role whose name (or files) a host rendered at run time:
        `files` holds tasks_from/vars_from/defaults_from/handlers_from as rendered."""
        use = _Use(
            name,
            where,
            f"{where.position}>",
            tasks_from=files.get("tasks_from", "main"),
            handlers_from=files.get("handlers_from", "main"),
            vars_from=files.get("vars_from", "main"),
            defaults_from=files.get("defaults_from", "main"),
            from_include=True,
            allow_duplicates=True,
        )
        return self._expand(use)

    # ------------------------------------------------------------------ reading entries

    def _roles_entry(self, item: Node) -> _Use | None:
        if item.is_scalar:
            name = self._role_name(item)
            return _Use(name, item, f"{item.position}>") if name else None
        if not item.is_mapping:
            self._values.report(item.error(f"a role is a name or a mapping, not {shown(item)}"))
            return None
        named = item.get("role") or item.get("name")
        if named is None:
            self._values.report(item.error("a roles: entry needs role: NAME"))
            return None
        name = self._role_name(named)
        when, tags, variables = self._keywords(item, _ENTRY_KEYWORDS - {"role", "name"})
        params = [
            (e.key.value, e.value.value)
            for e in item.entries
            if e.key.value not in _ENTRY_KEYWORDS and kw.is_variable_name(e.key.value)
        ]
        for e in item.entries:
            if e.key.value not in _ENTRY_KEYWORDS and not kw.is_variable_name(e.key.value):
                self._values.report(e.key.error(f"invalid role parameter name {shown(e.key)}"))
        variables = (*variables, *params)
        return _Use(name, named, f"{item.position}>", when, tags, variables) if name else None

    def _import_entry(self, node: Node, entry: Entry) -> _Use | None:
        try:
            args = kv_mapping(entry.value, "import_role")
        except PlaybookError as exc:
            self._values.report(exc)
            return None
        if not args.is_mapping:
            self._values.report(
                args.error("import_role takes a mapping: {name: ROLE, ...} (or name=ROLE)")
            )
            return None
        files: dict[str, str] = {}
        duplicates = True  # an import's or include's default, as ansible-core's IncludeRole
        for arg in args.entries:
            key = arg.key.value
            if key == "allow_duplicates":
                duplicates = self._flag(arg.value, duplicates)
            if key in _ACCEPTED_ARGS:
                continue
            if key not in _IMPORT_ARGS:
                hint = kw.suggest(str(key), _IMPORT_ARGS | _ACCEPTED_ARGS)
                self._values.report(
                    arg.key.error(f"unknown import_role argument {shown(key)}", hint)
                )
            elif not isinstance(arg.value.value, str) or is_template(arg.value.value):
                self._values.report(
                    arg.value.error(
                        f"import_role {key} must be a name (read at load, not a template)"
                    )
                )
            else:
                files[key] = arg.value.value
        named = args.get("name")
        if named is None:
            self._values.report(args.error("import_role needs name: ROLE"))
            return None
        name = self._role_name(named)
        unknown = {e.key.value for e in node.entries if e is not entry} - _IMPORT_KEYWORDS
        for other in node.entries:
            if other.key.value in unknown:
                self._values.report(
                    other.key.error(
                        f"{shown(other.key.value)} is not supported on import_role",
                        hint="import_role takes name, when, tags and vars",
                    )
                )
        when, tags, variables = self._keywords(node, _IMPORT_KEYWORDS - {"name"})
        if not name or unknown:
            return None
        chosen = {k: v for k, v in files.items() if k != "name"}
        site = f"{entry.key.position}>"
        return _Use(
            name,
            named,
            site,
            when,
            tags,
            variables,
            **chosen,
            from_include=True,
            allow_duplicates=duplicates,
        )

    def _flag(self, node: Node, default: bool) -> bool:
        """A boolean argument (allow_duplicates); a bad one is reported where it is."""
        try:
            return boolean(node.value)
        except (TypeError, ValueError):
            self._values.report(node.error(f"expected a boolean, not {shown(node)}"))
            return default

    def _role_name(self, node: Node) -> str:
        name = node.value
        if not isinstance(name, str) or not name.strip():
            self._values.report(node.error(f"a role name must be a string, not {shown(name)}"))
            return ""
        if is_template(name):
            self._values.report(
                node.error(
                    "roles are read when the playbook loads: a role name cannot be templated"
                )
            )
            return ""
        return name.strip()

    def _keywords(
        self, node: Node, allowed: Iterable[str]
    ) -> tuple[tuple[str, ...], frozenset[str], tuple[tuple[str, Any], ...]]:
        when: tuple[str, ...] = ()
        tags: frozenset[str] = frozenset()
        variables: dict[str, Any] = {}
        for key in allowed:
            value = node.get(key)
            if value is None:
                continue
            try:
                if key == "when":
                    when = self._values.conditions(value, "when", allow_empty=True)
                elif key == "tags":
                    tags = frozenset(kw.to_names(value, "tags", split_commas=True))
                elif key == "vars":
                    variables = self._values.vars(value, "vars")
            except PlaybookError as exc:
                self._values.report(exc)
        return when, tags, tuple(variables.items())

    # ------------------------------------------------------------------ reading the role

    def _expand(self, use: _Use) -> tuple[Step, ...]:
        found = self._find(use)
        if found is None:
            return ()
        name, directory = found
        if str(directory) in self._stack:
            members = self._stack[self._stack.index(str(directory)) :]
            if frozenset(members) not in self._cycles:  # a role used twice meets it twice
                self._cycles.add(frozenset(members))
                chain = " -> ".join(Path(d).name for d in (*self._stack, str(directory)))
                self._values.report(use.where.error(f"role dependency cycle: {chain}"))
            return ()
        self._stack.append(str(directory))
        try:
            return self._role_steps(use, name, directory)
        finally:
            self._stack.pop()

    def _run(
        self, use: _Use, name: str, directory: Path, layers: tuple[dict[str, Any], dict[str, Any]]
    ) -> RoleRun:
        """This use of the role, as its steps carry it: deduplicated at run time, per host,
        as ansible-core's play iterator skips a role a host has completed (a use whose steps
        all skipped, or were unreachable, has not run: the next equal use runs)."""
        identity = json.dumps(
            [
                str(directory),
                use.variables,
                use.when,
                sorted(use.tags),
                [use.tasks_from, use.handlers_from, use.vars_from, use.defaults_from],
                use.from_include,
            ],
            default=str,
            sort_keys=True,
        )
        allowed = use.allow_duplicates
        if allowed is None:
            allowed = self._allows_duplicates(directory)
        defaults, role_vars = layers
        return RoleRun(
            name, str(directory), defaults, role_vars, identity=identity, dedupe=not allowed
        )

    def exists(self, name: str, where: Node) -> bool:
        """Whether a role of this name is found (an include_role of a missing one fails the
        host that reaches it, as Ansible's, rather than the load)."""
        return self._find(_Use(name, where, ""), quiet=True) is not None

    @property
    def current_dir(self) -> Path | None:
        """The directory of the role being read now (its include_tasks look in its tasks/)."""
        return Path(self._stack[-1]) if self._stack else None

    def _allows_duplicates(self, directory: Path) -> bool:
        """meta/main.yml's `allow_duplicates: true`: the role runs each time it is listed."""
        meta = self._file(directory / "meta", "main")
        allowed = meta.get("allow_duplicates") if meta is not None and meta.is_mapping else None
        return allowed is not None and allowed.value in (True, "yes", "true", "True")

    def _role_steps(self, use: _Use, name: str, directory: Path) -> tuple[Step, ...]:
        steps: list[Step] = []
        inherited: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        for dependency in self._dependencies(directory, use.site):
            steps.extend(self._expand(dependency))
            found = self._find(dependency, quiet=True)
            below = self._exposed.get(str(found[1]) if found else "", ({}, {}))
            inherited = ({**inherited[0], **below[0]}, {**inherited[1], **below[1]})
        defaults = {
            **inherited[0],
            **self._mapping(directory / "defaults", use.defaults_from, f"{name} defaults"),
        }
        role_vars = {
            **inherited[1],
            **self._mapping(directory / "vars", use.vars_from, f"{name} vars"),
        }
        self._exposed[str(directory)] = (defaults, role_vars)
        self.last_read = (defaults, role_vars)
        parent = self._parent_layers(use)
        layers = ({**parent[0], **defaults}, {**parent[1], **role_vars})
        self._chained[str(directory)] = layers
        info = self._run(use, name, directory, layers)
        short = short_role_name(info)
        own = {**dict(use.variables), "role_name": short, "role_path": str(directory)}
        # A role without tasks/main.yml is valid (handlers, defaults or dependencies only);
        # a tasks_from: file that is missing is not.
        tasks = self._file(directory / "tasks", use.tasks_from)
        if tasks is None and use.tasks_from != "main":
            self._values.report(use.where.error(f"role {name} has no tasks/{use.tasks_from}.yml"))
        if tasks is not None:
            read = self._read_steps(tasks, False, f"tasks of role {name}")
            steps.extend(_in_role(s, info, own, use, top=True) for s in read)
        handlers = self._file(directory / "handlers", use.handlers_from)
        source = f"{directory}/handlers/{use.handlers_from}"
        if handlers is not None and source not in self._handler_files:  # a role's handlers once
            self._handler_files.add(source)
            read = self._read_steps(handlers, True, f"handlers of role {name}")
            self.handlers.extend(_handler(_in_role(s, info, own, use, top=True)) for s in read)
        return tuple(steps)

    def _parent_layers(self, use: _Use) -> tuple[dict[str, Any], dict[str, Any]]:
        """The defaults and vars of the role whose steps import or include this one (with its
        own parents' under them): ansible-core's dep chain gives them to the role, below its
        own."""
        if not use.from_include or len(self._stack) < 2:
            return ({}, {})
        return self._chained.get(self._stack[-2], ({}, {}))

    def _dependencies(self, directory: Path, site: str) -> list[_Use]:
        """The roles meta/main.yml lists, each its own use under the depending one's `site`
        (a role used twice gives its dependencies two sets of journal keys)."""
        meta = self._file(directory / "meta", "main")
        if meta is None or not meta.is_mapping:
            return []
        listed = meta.get("dependencies")
        if listed is None or listed.value is None:
            return []
        if not listed.is_sequence:
            self._values.report(listed.error("dependencies must be a list of roles"))
            return []
        return [
            replace(use, role_basedir=str(directory.parent), site=site + use.site)
            for item in listed.items
            if (use := self._roles_entry(item)) is not None
        ]

    def _find(self, use: _Use, *, quiet: bool = False) -> tuple[str, Path] | None:
        """The role's name and directory, searched as Ansible's RoleDefinition does: the
        playbook's roles/, roles_path, (for a dependency) the depending role's parent
        directory, the playbook's directory, then the name as a path from the working
        directory (the role is then named by its last part)."""
        name = os.path.expanduser(use.name)
        collected = self._in_collection(use.name)
        if collected is not None:
            return use.name, collected
        if self._roles_path is None:  # ansible.cfg read once, at the first role
            self._roles_path = _configured_roles_path()
        bases = [self._base_dir / "roles", *self._roles_path]
        if use.role_basedir:
            bases.append(Path(use.role_basedir))
        bases.append(self._base_dir)
        candidates = [base / name for base in bases]
        for candidate in candidates:
            if candidate.is_dir():
                return use.name, Path(os.path.normpath(candidate))
        as_path = [Path(os.path.abspath(name)), Path(use.where.position.file).parent / name]
        for candidate in as_path:
            if candidate.is_dir():
                return candidate.name, Path(os.path.normpath(candidate))
        if quiet:
            return None
        looked = ", ".join(str(c.parent) for c in candidates)
        if _FQCR.fullmatch(use.name) and self._collections_path is not None:
            bases = [self._base_dir / "collections", *self._collections_path]
            looked = f"{', '.join(str(b / 'ansible_collections') for b in bases)}, {looked}"
        self._values.report(
            use.where.error(f"role not found: {use.name}", hint=f"looked in {looked}")
        )
        return None

    def _in_collection(self, name: str) -> Path | None:
        """The directory of a collection's role NS.COL.ROLE, as ansible-core's collection
        loader finds it: the first of the playbook's collections/ and collections_path that
        holds the collection NS.COL, its roles/ROLE; None when that is not there (the name is
        then looked for as a plain role)."""
        match = _FQCR.fullmatch(name)
        if match is None:
            return None
        if self._collections_path is None:  # ansible.cfg read once, at the first such role
            self._collections_path = _configured_collections_path()
        namespace, collection, role = match.groups()
        for base in (self._base_dir / "collections", *self._collections_path):
            found = base / "ansible_collections" / namespace / collection
            if found.is_dir():
                directory = found / "roles" / role
                return Path(os.path.normpath(directory)) if directory.is_dir() else None
        return None

    def _file(self, directory: Path, stem: str) -> Node | None:
        """The YAML of DIR/STEM(.yml|.yaml|), or None when there is none."""
        for suffix in (".yml", ".yaml", ""):
            path = directory / f"{stem}{suffix}"
            if path.is_file():
                try:
                    document = load_yaml(path)
                except PlaybookError as exc:
                    self._values.report(exc)
                    return None
                for problem in document.problems:
                    self._values.report(problem)
                return document.root
        return None

    def _mapping(self, directory: Path, stem: str, what: str) -> dict[str, Any]:
        """A role's vars or defaults: DIR/STEM(.yml|.yaml|), or, where DIR/STEM is a
        directory, its files merged in name order (Ansible's allow_dir)."""
        if (directory / stem).is_dir() and not (directory / f"{stem}.yml").is_file():
            merged: dict[str, Any] = {}
            for path in _vars_files_under(directory / stem):
                merged.update(self._mapping(path.parent, path.name, what))
            return merged
        root = self._file(directory, stem)
        if root is None or root.value is None:
            return {}
        try:
            return self._values.vars(root, what)
        except PlaybookError as exc:
            self._values.report(exc)
            return {}


def _vars_files_under(directory: Path) -> list[Path]:
    """The vars files of a role's vars/NAME/ or defaults/NAME/ directory, at any depth, in
    name order, as ansible-core's find_vars_files (extensions .yml, .yaml, .json or none)."""
    return sorted(
        path
        for path in directory.rglob("*")
        if path.is_file() and path.suffix in (".yml", ".yaml", ".json", "")
    )


def _configured_private() -> bool | None:
    """private_role_vars from ANSIBLE_PRIVATE_ROLE_VARS or ansible.cfg; None where neither sets
    it (ansible-core's default then: imports public, includes private)."""
    with contextlib.suppress(FleetfixError):
        setting = read_settings(os.environ, Path.cwd()).get("private_role_vars")
        if setting is not None:
            return bool(setting.value)
    return None


def _public_arg(args: Node) -> Node | None:
    """The `public:` of an import_role's arguments (a mapping, or name=ROLE public=no)."""
    with contextlib.suppress(PlaybookError):
        mapping = kv_mapping(args, "import_role")
        return mapping.get("public") if mapping.is_mapping else None
    return None


def _configured_roles_path() -> list[Path]:
    """roles_path from ANSIBLE_ROLES_PATH or ansible.cfg (a bad config is reported by the CLI
    before the playbook loads)."""
    with contextlib.suppress(FleetfixError):
        setting = read_settings(os.environ, Path.cwd()).get("roles_path")
        if setting is not None:
            return [Path(p) for p in setting.value]
    return []


def _configured_collections_path() -> list[Path]:
    """collections_path from ANSIBLE_COLLECTIONS_PATH or ansible.cfg, else ansible-core's
    default paths."""
    with contextlib.suppress(FleetfixError):
        setting = read_settings(os.environ, Path.cwd()).get("collections_path")
        if setting is not None:
            return [Path(p) for p in setting.value]
    return [Path(os.path.expanduser(p)) for p in _DEFAULT_COLLECTIONS]


def short_role_name(role: RoleInfo) -> str:
    """A role's name without its collection (ansible-core's get_name(include_role_fqcn=False)):
    ROLE for a collection's NS.COL.ROLE found under ansible_collections/NS/COL/roles/ROLE."""
    match = _FQCR.fullmatch(role.name)
    if match is None:
        return role.name
    namespace, collection, short = match.groups()
    parts = Path(role.path).parts
    inside = ("ansible_collections", namespace, collection, "roles", short)
    return short if parts[-5:] == inside else role.name


def _in_role(step: Step, info: RoleInfo, own: dict[str, Any], use: _Use, *, top: bool) -> Step:
    """A role's step as it runs: named `ROLE : NAME`, knowing its role; the top-level ones take
    the role's vars and the using entry's when/tags (children of a block inherit them)."""

    def inside(children: tuple[Step, ...]) -> tuple[Step, ...]:
        return tuple(_in_role(child, info, own, use, top=False) for child in children)

    args = step.args
    if step.role is not None:  # a role this one imports or includes: its steps stay its own
        changed = replace(step, via=use.site + step.via)
    else:
        if isinstance(args.get("steps"), tuple):  # an include's file read at load: the role's
            args = {**args, "steps": inside(args["steps"])}
        own_name = step.kind is StepKind.INCLUDE_ROLE  # its banner names no role (Ansible's)
        changed = replace(
            step,
            name=step.name if own_name else f"{info.name} : {step.name}",
            role=info,
            via=use.site + step.via,
            args=args,
            block=inside(step.block),
            rescue=inside(step.rescue),
            always=inside(step.always),
        )
    if not top:
        return changed
    return replace(
        changed,
        when=use.when + step.when,
        tags=step.tags | use.tags,
        vars={**own, **step.vars},
    )


def in_role(step: Step, info: RoleInfo) -> Step:
    """A step of a file a role's include read at run time: named `ROLE : NAME`, knowing its
    role (its defaults, files/ and templates/), as are the role's own steps."""
    if step.role is not None:  # a role the file imports: its steps stay its own
        return step
    own_name = step.kind is StepKind.INCLUDE_ROLE
    return replace(
        step,
        name=step.name if own_name else f"{info.name} : {step.name}",
        role=info,
        block=tuple(in_role(child, info) for child in step.block),
        rescue=tuple(in_role(child, info) for child in step.rescue),
        always=tuple(in_role(child, info) for child in step.always),
    )


def _handler(step: Step) -> Step:
    """A role's handler is notified by its own name or by `ROLE : NAME`; a collection's role's
    also by its short name, `SHORT : NAME` and `SHORT : TOPIC` (ansible-core's Handler adds
    both forms of its listen topics): listened for here, as engine/handlers.py looks for
    `ROLE : ` with the full name only."""
    role = step.role.name if step.role is not None else ""
    plain = step.name.removeprefix(f"{role} : ")
    listen = (*step.listen, plain) if plain not in step.listen else step.listen
    short = short_role_name(step.role) if step.role is not None else role
    if short != role:
        listen = (*listen, *(f"{short} : {t}" for t in (*step.listen, plain)))
    return replace(step, listen=listen)
