"""Playbook steps from YAML: step kinds and their args, step keywords, verify/escalate ladders.

`StepReader` reads one play's step lists into `Step` values (blocks, handlers, and the verify:
and escalate: steps of a remediation, with their cooldowns and durations); a problem is reported
and the step or keyword left out, so one load lists every problem. `ValueReader` holds what steps
share with plays: the keyword values that may hold Jinja2, compiled now with the run's Templar.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import jinja2

from fleetfix.errors import ConditionError, PlaybookError
from fleetfix.modules.specs import module_named
from fleetfix.playbook import catalog as kw
from fleetfix.playbook import loops
from fleetfix.playbook.args_keyword import with_args
from fleetfix.playbook.catalog import StepCatalog, shown, suggest
from fleetfix.playbook.conditions import Templar, is_omit, is_template
from fleetfix.playbook.extravars import parse_kv, vars_problems
from fleetfix.playbook.imports import TaskImports, import_entry, inherit
from fleetfix.playbook.includes import (
    INCLUDE_KEYWORDS,
    INCLUDE_KINDS,
    Includes,
    with_include_args,
)
from fleetfix.playbook.inventory_steps import add_host_args, group_by_args
from fleetfix.playbook.model import Step, StepKind
from fleetfix.playbook.module_args import module_args
from fleetfix.playbook.module_defaults import (
    DEFAULTS_KEY,
    Defaults,
    defaults_for,
    read_module_defaults,
)
from fleetfix.playbook.roles import ROLE_IMPORTS, RoleReader, role_entry
from fleetfix.playbook.yamlpos import Entry, Node, NodeKind

__all__ = ["Role", "StepReader", "ValueReader"]

MAX_RETRIES = 1000
"""The most `retries` a step may ask for. A step still failing after a thousand tries is not
going to pass on the next (a reboot is awaited with `expect_unreachable` or `wait_for`'s
timeout, not a retry count), and with `delay: 0` a bigger count is a busy loop against the
node that only Ctrl-C ends; the value is refused when the playbook loads."""


def _retries(node: Node) -> int:
    count = kw.to_int(node, "retries", minimum=0)
    if count > MAX_RETRIES:
        raise node.error(
            f"retries must be at most {MAX_RETRIES}, not {count}: for a longer wait use a"
            " larger delay (or wait_for with a timeout)"
        )
    return count


_UNKNOWN_JINJA_NAME = re.compile(r"unknown Jinja2 (filter|test) '([^']+)'")


class Role(enum.Enum):
    """Where a step list sits; some keywords and kinds are only valid in some places."""

    TASK = "task"
    HANDLER = "handler"
    VERIFY = "verify"
    ESCALATE = "escalate"


class ValueReader:
    """Keyword values that may hold Jinja2 (conditions, templates, vars, environment), shared by
    plays and steps; each problem is appended to the loader's `errors` list."""

    def __init__(self, templar: Templar, errors: list[PlaybookError]) -> None:
        self._templar = templar
        self._errors = errors

    def report(self, error: PlaybookError) -> None:
        self._errors.append(error)

    def mark(self) -> int:
        """Where the problem list stands now (for `taken_since`)."""
        return len(self._errors)

    def taken_since(self, mark: int) -> list[PlaybookError]:
        """The problems reported since `mark`, taken out of the list."""
        taken = self._errors[mark:]
        del self._errors[mark:]
        return taken

    def convert_into(
        self, fields: dict[str, Any], entry: Entry, convert: Callable[[str, Node], Any]
    ) -> None:
        """fields[key] = convert(key, value); a problem is reported and the field left out."""
        key = entry.key.value
        try:
            fields[key] = convert(key, entry.value)
        except PlaybookError as exc:
            self.report(exc)

    def conditions(self, node: Node, what: str, *, allow_empty: bool) -> tuple[str, ...]:
        """A condition, or a list of them (all must hold), as expression strings."""
        items = node.items if node.is_sequence else (node,)
        if not items and not allow_empty:
            raise node.error(f"{what} must not be an empty list")
        expressions: list[str] = []
        for item in items:
            try:
                expressions.append(self.expression(item, what))
            except PlaybookError as exc:
                self.report(exc)
        return tuple(expressions)

    def expression(self, node: Node, what: str) -> str:
        value = node.value
        if isinstance(value, bool):
            return "True" if value else "False"
        if not isinstance(value, str) or not value.strip():
            raise node.error(
                f"{what} must be a condition (a string or true/false), not {shown(value)}"
            )
        expression = self._templar.bare_expression(value.strip()) or value.strip()
        try:
            self._templar.check_expression(expression)
        except ConditionError as exc:
            if _delimiters_inside(expression, exc):
                # `a == {{ b }}`: Ansible loads it and fails the step that evaluates it (which
                # ignore_errors can ignore); so does fleetfix, with the same syntax message.
                return expression
            raise self._jinja_error(node, exc) from exc
        return expression

    def template_string(self, node: Node, what: str) -> str:
        text = kw.to_string(node, what)
        self.check_templates(node)
        return text

    def check_templates(self, node: Node) -> None:
        """Compile every template string in a value (recursively); report each failure."""
        if node.kind is NodeKind.SCALAR:
            if is_template(node.value):
                try:
                    self._templar.check_template(node.value)
                except ConditionError as exc:
                    self.report(self._jinja_error(node, exc))
            return
        for child in node.items:
            self.check_templates(child)
        for entry in node.entries:
            self.check_templates(entry.value)

    def _jinja_error(self, node: Node, exc: ConditionError) -> PlaybookError:
        message = str(exc).removesuffix(f" (in: {exc.expression})")
        hint = None
        if match := _UNKNOWN_JINJA_NAME.search(message):
            names = (
                self._templar.filter_names
                if match.group(1) == "filter"
                else self._templar.test_names
            )
            hint = suggest(match.group(2), names)
        return node.error(message, hint=hint)

    def vars(self, node: Node, what: str) -> dict[str, Any]:
        if node.is_scalar and node.value is None:
            return {}  # `vars:` left empty, which Ansible accepts
        problems = vars_problems(node, what)
        if problems and not node.is_mapping:
            raise problems[0]
        self._errors.extend(problems)
        self.check_templates(node)
        return {
            e.key.value: e.value.value for e in node.entries if kw.is_variable_name(e.key.value)
        }

    def environment(self, node: Node) -> dict[str, str]:
        environment = kw.to_environment(node, "environment")
        self.check_templates(node)
        return environment


class StepReader:
    """Reads the step lists of one play; `notified` collects its notify: topics for the play
    to check against its handlers."""

    def __init__(
        self, catalog: StepCatalog, values: ValueReader, base_dir: Path | None = None
    ) -> None:
        self._catalog = catalog
        self._values = values
        self._base_dir = base_dir or Path.cwd()
        self._imports = TaskImports(values, base_dir or Path.cwd(), self.import_keywords)
        self.roles = RoleReader(values, base_dir or Path.cwd(), self._role_list)
        self._includes = Includes(
            values,
            base_dir or Path.cwd(),
            self.roles,
            self._imported_list,
            self.import_keywords,
            read_handlers=self._handler_list,
        )
        self._brought_handlers = 0  # depth of handler files an import or include reads
        self._handler_blocks = 0  # depth of blocks in such a file
        self.notified: list[tuple[str, Node]] = []  # (topic, where it was written)
        self.brought_names: set[str] = set()
        """Names a notify may take for a handler's that are not: those of the steps a handler
        import or include brings in, and of the import or include itself (loader.py leaves a
        notify of one to run time, where ansible-core fails it)."""
        self.module_defaults: list[Defaults] = []
        """The module_defaults of the play and the blocks around the step being read."""
        self._step_converters = self._step_table()
        self._kind_parsers = self._kind_table()

    def _report(self, error: PlaybookError) -> None:
        self._values.report(error)

    def step_list(self, node: Node, role: Role, what: str) -> tuple[Step, ...]:
        """The steps of one list (`what` names it in errors); a bad step is reported, left out."""
        if node.value is None:
            return ()
        if not node.is_sequence:
            self._report(node.error(f"{what} must be a list of steps, not {shown(node.value)}"))
            return ()
        steps: list[Step] = []
        for item in node.items:
            entry = import_entry(item) or role_entry(item)
            if role is Role.HANDLER and entry is not None and entry is import_entry(item):
                self._bring(item.get("name"))
                steps.extend(self._imports.read(item, entry, self._handler_list))
            elif role is Role.HANDLER and self._top_of_handlers() and _is_block(item):
                steps.extend(self._handler_block(item))
            elif entry is not None and role is not Role.TASK:
                self._report(
                    entry.key.error(f"{entry.key.value}: is not valid in {role.value} steps")
                )
            elif entry is not None and entry.key.value in ROLE_IMPORTS:
                steps.extend(self.roles.import_role(item, entry))
            elif entry is not None:
                steps.extend(self._imports.read(item, entry, self._imported_list))
            elif (step := self._step(item, role)) is not None:
                steps.append(step)
                if role is Role.HANDLER and self._brought_handlers:
                    self.brought_names.add(step.name)
        return tuple(steps)

    def _bring(self, named: Node | None) -> None:
        """A handler import's or include's own name, kept in `brought_names`."""
        if named is not None and isinstance(named.value, str):
            self.brought_names.add(named.value)

    def import_keywords(self, node: Node, skip: Entry | None) -> dict[str, Any]:
        """The step keywords of an import_tasks (leaving out its own entry) or of an include's
        `apply:`, as Step fields; read as a block's, so loops and per-result ones are refused."""
        rest = replace(node, entries=tuple(e for e in node.entries if e is not skip))
        fields = self._step_keywords(rest, StepKind.BLOCK, Role.TASK)
        fields.pop("name", None)
        return fields

    def _imported_list(self, node: Node, what: str) -> tuple[Step, ...]:
        return self.step_list(node, Role.TASK, what)

    def _handler_list(self, node: Node, what: str) -> tuple[Step, ...]:
        """An import_tasks in handlers: its steps are handlers (ansible-core's Role.HANDLER
        reading; the import's own name notifies nothing)."""
        self._brought_handlers += 1
        try:
            return self.step_list(
                node, Role.HANDLER, f"handlers in {what.removeprefix('tasks in ')}"
            )
        finally:
            self._brought_handlers -= 1

    def _top_of_handlers(self) -> bool:
        """Reading the play's (or a role's) handlers list itself, not a file or block in it."""
        return not self._brought_handlers and not self._handler_blocks

    def _handler_block(self, node: Node) -> tuple[Step, ...]:
        """A block written directly under handlers: (or in a role's handlers file): ansible-core's
        implicit block of handlers. Its steps are the handlers, each with the block's keywords
        (its name notifies nothing); a block inside it is refused at its place. A flush runs
        only a handler block's block: (ansible-core's _do_handler_run), so rescue: and always:
        are refused rather than silently never run."""
        self._check_step_keys(node)
        for part in sorted(kw.BLOCK_PARTS):
            entry = node.entry(part)
            if entry is not None:
                self._report(entry.key.error(f"{part}: never runs in a block of handlers"))
        block = node.get("block")
        assert block is not None  # _is_block
        self._handler_blocks += 1
        try:
            children = self.step_list(block, Role.HANDLER, "handlers in a block")
        finally:
            self._handler_blocks -= 1
        keywords = self.import_keywords(node, node.entry("block"))
        return tuple(inherit(child, keywords) for child in children)

    def _role_list(self, node: Node, handlers: bool, what: str) -> tuple[Step, ...]:
        return self.step_list(node, Role.HANDLER if handlers else Role.TASK, what)

    def _step(self, node: Node, role: Role) -> Step | None:
        own = node.get("module_defaults") if node.is_mapping else None
        if own is None:
            return self._read_step(node, role)
        depth = len(self.module_defaults)
        self.module_defaults.extend(read_module_defaults(own, self._report))
        try:  # the step's own and, for a block, its children's
            return self._read_step(node, role)
        finally:
            del self.module_defaults[depth:]

    def _read_step(self, node: Node, role: Role) -> Step | None:
        if not node.is_mapping:
            self._report(
                node.error(f"a step must be a mapping like '- name: ...', not {shown(node.value)}")
            )
            return None
        try:
            node = _module_action(_include_action(local_action(node)))
        except PlaybookError as exc:
            self._report(exc)
            return None
        unknown = self._check_step_keys(node)
        kind_entry = self._kind_entry(node, unknown)
        if kind_entry is None:
            return None
        kind = kw.STEP_KINDS[kind_entry.key.value]
        args_node = node.get("args")
        if args_node is not None:
            try:
                if kind in INCLUDE_KINDS:
                    kind_entry = with_include_args(kind_entry, args_node)
                else:
                    kind_entry = with_args(kind, kind_entry, args_node)
            except PlaybookError as exc:
                self._report(exc)
                return None
        allowed = self._kind_allowed(kind, kind_entry, role)
        if kind is StepKind.MODULE:
            args = self._module(kind_entry)
        elif kind in INCLUDE_KINDS:
            args = self._include(kind, kind_entry, node.get("when") is not None, role)
        else:
            args = self._kind_args(kind, kind_entry.value)
        fields = self._step_keywords(node, kind, role)  # checked even when args are bad
        if kind is StepKind.BLOCK:
            fields.update(self._block_parts(node, role))
        else:
            self._check_no_block_parts(node)
        if args is None or not allowed or not self._handler_allowed(kind, args, node, role):
            return None
        # a handler an import or include brings in runs with it: it needs no name of its own
        unnamed = "name" not in fields and "listen" not in fields
        if role is Role.HANDLER and unnamed and not self._brought_handlers:
            self._report(node.error("a handler needs a name: (or listen:) to be notified by"))
        fields.setdefault("name", kw.default_step_name(kind, args))
        return Step(kind=kind, args=args, position=node.position, **fields)

    def _check_step_keys(self, node: Node) -> int:
        unknown = 0
        for entry in node.entries:
            key = entry.key.value
            known = isinstance(key, str) and (
                key in kw.STEP_KINDS or key in kw.STEP_KEYWORDS or key in kw.OTHER_STEP_KEYS
            )
            if not known and key == "debugger" and entry.value.value in (None, "never"):
                continue  # never starts Ansible's debugger: nothing to refuse
            if not known:
                unknown += 1
                plugin = self._custom_plugin(key, node) if isinstance(key, str) else None
                if plugin is not None:
                    self._report(
                        entry.key.error(
                            f"{key!r} is a custom Python plugin ({plugin}): fleetfix does not"
                            " run custom modules or action plugins",
                            hint="do the same with shell:/command: or a fleetfix action",
                        )
                    )
                else:
                    self._report(kw.unknown_step_key(entry.key, self._catalog))
        return unknown

    def _custom_plugin(self, key: str, node: Node) -> Path | None:
        """A library/ module or action_plugins/ plugin of that name beside the playbook, the
        step's file or its role (where ansible-core would find it), or None."""
        places = [self._base_dir, self.roles.current_dir]
        if node.position.file:
            tasks_dir = Path(node.position.file).parent
            places += [tasks_dir, tasks_dir.parent]
        for place in places:
            for kind in ("library", "action_plugins"):
                if place is not None and (found := place / kind / f"{key}.py").is_file():
                    return found
        return None

    def _kind_entry(self, node: Node, unknown: int) -> Entry | None:
        kinds = [
            e for e in node.entries if isinstance(e.key.value, str) and e.key.value in kw.STEP_KINDS
        ]
        if len(kinds) > 1:
            first, second = kinds[0].key.value, kinds[1].key.value
            self._report(
                kinds[1].key.error(
                    f"conflicting step kinds: {first!r} and {second!r}",
                    hint="a step does one thing: split it into two steps",
                )
            )
            return None
        if not kinds:
            if not unknown:
                self._report(node.error("step has no kind", hint=f"give it one of: {kw.KIND_LIST}"))
            return None
        return kinds[0]

    def _kind_allowed(self, kind: StepKind, entry: Entry, role: Role) -> bool:
        problem = None
        if role is Role.VERIFY and kind not in kw.VERIFY_KINDS:
            problem = "verify: steps must be probe or assert steps"
        elif role is Role.ESCALATE and kind is not StepKind.ACTION:
            problem = "escalate: steps must be action steps"
        if problem is not None:
            self._report(entry.key.error(problem))
        return problem is None

    def _handler_allowed(self, kind: StepKind, args: Any, node: Node, role: Role) -> bool:
        """What ansible-core refuses as a handler: a block, include_role or import_role,
        meta: flush_handlers or end_role (refused here, before anything runs); and end_role
        outside of a role."""
        meta = args.get("name") if kind is StepKind.META and isinstance(args, dict) else None
        if role is not Role.HANDLER:
            if meta == "end_role" and self.roles.current_dir is None:  # as ansible-core's
                self._report(node.error("Cannot execute 'end_role' from outside of a role"))
                return False
            return True
        problem = None
        top_of_file = self._brought_handlers and not self._handler_blocks
        if kind is StepKind.BLOCK and not top_of_file:
            problem = "using a block as a handler is not supported"
        elif kind is StepKind.INCLUDE_ROLE:
            problem = "using 'include_role' as a handler is not supported"
        elif meta == "end_role":
            problem = "Cannot execute 'end_role' from a handler"
        elif meta == "flush_handlers":
            problem = f"meta: {meta} cannot be used as a handler"
        if problem is not None:
            self._report(node.error(problem))
        return problem is None

    def _check_no_block_parts(self, node: Node) -> None:
        for part in sorted(kw.BLOCK_PARTS):
            entry = node.entry(part)
            if entry is not None:
                self._report(entry.key.error(f"{part}: is only valid next to block:"))

    def _block_parts(self, node: Node, role: Role = Role.TASK) -> dict[str, tuple[Step, ...]]:
        """A block's parts; in a handler file an import or include brings in, a top-level
        block is ansible-core's implicit one, and its steps are handlers (a block there is
        refused)."""
        inner = Role.HANDLER if role is Role.HANDLER and self._brought_handlers else Role.TASK
        parts: dict[str, tuple[Step, ...]] = {}
        self._handler_blocks += inner is Role.HANDLER
        try:
            for part in ("block", *sorted(kw.BLOCK_PARTS)):
                child = node.get(part)
                if child is not None:
                    parts[part] = self.step_list(child, inner, part)
        finally:
            self._handler_blocks -= inner is Role.HANDLER
        return parts

    # ------------------------------------------------------------------ step keywords

    def _step_keywords(self, node: Node, kind: StepKind, role: Role) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for entry in node.entries:
            key = entry.key.value
            if not isinstance(key, str) or key not in kw.STEP_KEYWORDS:
                continue
            problem = _misplaced(key, kind, role)
            if problem is not None:
                self._report(entry.key.error(problem))
                continue
            if is_omit(entry.value.value):
                continue  # `check_mode: "{{ omit }}"`: not set, as in Ansible
            if key == "timeout" and kind in INCLUDE_KINDS:
                # checked, and kept off the step: it bounds the include, never its steps
                self._values.convert_into({}, entry, self._step_value)
                continue
            self._values.convert_into(fields, entry, self._step_value)
        loops.one_loop(self._values, node, fields)
        escalate = node.entry("escalate")
        if escalate is not None and "escalate" in fields and node.get("verify") is None:
            self._report(
                escalate.key.error(
                    "escalate: needs verify: on the same step",
                    hint="verify decides when the ladder stops; without it every rung would run",
                )
            )
        return fields

    def _step_table(self) -> Mapping[str, Callable[[Node], Any]]:
        """How each step keyword's value is read (booleans are the rest)."""
        return {
            "name": lambda n: self._values.template_string(n, "name"),
            "when": lambda n: self._values.conditions(n, "when", allow_empty=True),
            "until": lambda n: self._values.conditions(n, "until", allow_empty=True),
            "changed_when": lambda n: self._values.conditions(n, "changed_when", allow_empty=False),
            "failed_when": lambda n: self._values.conditions(n, "failed_when", allow_empty=False),
            "register": kw.to_register,
            "retries": _retries,
            "delay": lambda n: kw.to_seconds(n, "delay", allow_zero=True),
            "timeout": lambda n: kw.to_seconds(n, "timeout"),
            "tags": lambda n: frozenset(kw.to_names(n, "tags", split_commas=True)),
            "notify": self._notify,
            "delegate_to": lambda n: self._values.template_string(n, "delegate_to"),
            "become_user": lambda n: self._values.template_string(n, "become_user"),
            "environment": self._values.environment,
            "vars": lambda n: self._values.vars(n, "vars"),
            "listen": lambda n: kw.to_names(n, "listen"),
            "verify": lambda n: self.step_list(n, Role.VERIFY, "verify"),
            "escalate": lambda n: self.step_list(n, Role.ESCALATE, "escalate"),
            "expect_unreachable": lambda n: kw.to_duration(n, "expect_unreachable"),
            "cooldown": lambda n: kw.to_duration(n, "cooldown"),
            "max_attempts": lambda n: kw.to_int(n, "max_attempts", minimum=1),
            "loop": lambda n: loops.loop_value(self._values, n, "loop"),
            "with_items": lambda n: loops.loop_value(self._values, n, "with_items"),
            "with_list": lambda n: loops.loop_value(self._values, n, "with_list"),
            "with_sequence": lambda n: loops.sequence_value(self._values, n),
            "with_indexed_items": lambda n: loops.indexed_items_value(self._values, n),
            **{
                f"with_{name}": functools.partial(loops.lookup_loop_value, self._values, name=name)
                for name in loops.LOOKUP_LOOPS
            },
            "loop_control": lambda n: loops.loop_control(self._values, n),
            "run_once": self._run_once,
        }

    def _run_once(self, node: Node) -> bool | str:
        """run_once: a boolean, or a template rendered when the step runs (Ansible's)."""
        if isinstance(node.value, str) and is_template(node.value):
            self._values.check_templates(node)
            return node.value
        return kw.to_bool(node, "run_once")

    def _step_value(self, key: str, node: Node) -> Any:
        convert = self._step_converters.get(key)
        return convert(node) if convert is not None else kw.to_bool(node, key)

    def _notify(self, node: Node) -> tuple[str, ...]:
        topics = kw.to_names(node, "notify")
        for item in node.items if node.is_sequence else (node,):
            self.notified.append((item.value, item))
        return topics

    # ------------------------------------------------------------------ step kinds

    def _kind_table(self) -> Mapping[StepKind, Callable[[Node], dict[str, Any]]]:
        """How each step kind's arguments are read into `Step.args`."""
        return {
            StepKind.PROBE: lambda n: self._named(StepKind.PROBE, n),
            StepKind.ACTION: lambda n: self._named(StepKind.ACTION, n),
            StepKind.SHELL: lambda n: self._command(n, kw.SHELL_ARGS, "shell"),
            StepKind.COMMAND: lambda n: self._command(n, kw.COMMAND_ARGS, "command"),
            StepKind.BLOCK: _block_args,
            StepKind.DEBUG: self._debug,
            StepKind.SET_FACT: self._set_fact,
            StepKind.ASSERT: self._assert,
            StepKind.FAIL: self._fail,
            StepKind.META: kw.to_meta,
            StepKind.ADD_HOST: lambda n: add_host_args(n, self._values.check_templates),
            StepKind.GROUP_BY: lambda n: group_by_args(n, self._values.check_templates),
        }

    def _kind_args(self, kind: StepKind, node: Node) -> dict[str, Any] | None:
        """The kind's `args`, or None (reported) when they are wrong."""
        try:
            return self._kind_parsers[kind](node)
        except PlaybookError as exc:
            self._report(exc)
            return None

    def _include(
        self, kind: StepKind, entry: Entry, conditional: bool, role: Role
    ) -> dict[str, Any] | None:
        try:
            if kind is StepKind.INCLUDE_ROLE:
                return self._includes.role_args(entry)
            handler = role is Role.HANDLER
            return self._includes.tasks_args(entry, conditional=conditional, handler=handler)
        except PlaybookError as exc:
            self._report(exc)
            return None

    def _module(self, entry: Entry) -> dict[str, Any] | None:
        spec = module_named(str(entry.key.value))
        defaults = defaults_for(spec.name, self.module_defaults) if spec is not None else None
        try:
            args = module_args(str(entry.key.value), entry.value, self._report, defaults)
            return args if defaults is None else {**args, DEFAULTS_KEY: defaults}
        except PlaybookError as exc:
            self._report(exc)
            return None

    def _named(self, kind: StepKind, node: Node) -> dict[str, Any]:
        """probe: NAME / {name: NAME, PARAM: ...} (params inline or under params:)."""
        table = self._catalog.probes if kind is StepKind.PROBE else self._catalog.actions
        name_node, param_entries = _name_and_params(kind, node)
        name = name_node.value
        if not isinstance(name, str) or not name:
            raise name_node.error(f"{kind.value} name must be a string, not {shown(name)}")
        if name not in table:
            raise name_node.error(
                f"unknown {kind.value} {name!r}", hint=self._name_hint(kind, name)
            )
        params = self._params(kind, name, table[name], param_entries)
        return {"name": name, "params": params}

    def _name_hint(self, kind: StepKind, name: str) -> str | None:
        table, other = (
            (self._catalog.probes, self._catalog.actions)
            if kind is StepKind.PROBE
            else (self._catalog.actions, self._catalog.probes)
        )
        close = suggest(name, table)
        if close is not None:
            return close
        if name in other:
            other_kind = "an action" if kind is StepKind.PROBE else "a probe"
            return f"{name!r} is {other_kind}: write '{other_kind.split()[1]}: {name}'"
        first_word = name.split(maxsplit=1)[0] if name.strip() else ""
        if first_word in kw.STEP_KINDS:
            return f"for a command write '{first_word}: ...'; '{kind.value}:' names a {kind.value}"
        return None

    def _params(
        self, kind: StepKind, name: str, accepted: frozenset[str], entries: Iterable[Entry]
    ) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for entry in _expand_params(entries, accepted):
            key = entry.key.value
            if key not in accepted:
                hint = suggest(key, accepted) if isinstance(key, str) else None
                if not accepted:
                    hint = f"{kind.value} {name!r} takes no parameters"
                self._report(
                    entry.key.error(
                        f"unknown parameter {shown(key)} for {kind.value} {name!r}", hint=hint
                    )
                )
            elif key in params:
                self._report(entry.key.error(f"parameter {key!r} given twice"))
            else:
                self._values.check_templates(entry.value)
                params[key] = entry.value.value
        return params

    def _command(self, node: Node, allowed: frozenset[str], what: str) -> dict[str, Any]:
        if isinstance(node.value, str):
            text = kw.to_string(node, what)
            self._values.check_templates(node)
            return {"cmd": text}
        arguments = self._arguments(node, allowed, what, free_form=False)
        if ("cmd" in arguments) == ("argv" in arguments):
            need = "cmd: or argv:" if "argv" in allowed else "cmd:"
            raise node.error(f"{what} needs exactly one {need}")
        args: dict[str, Any] = {}
        for key, value in arguments.items():
            args[key] = kw.to_argv(value) if key == "argv" else kw.to_string(value, f"{what} {key}")
            self._values.check_templates(value)
        return args

    def _debug(self, node: Node) -> dict[str, Any]:
        arguments = self._arguments(node, kw.DEBUG_ARGS, "debug", free_form=True)
        if "msg" in arguments and "var" in arguments:
            raise arguments["var"].error("debug takes msg: or var:, not both")
        args: dict[str, Any] = {}
        if "var" in arguments:
            args["var"] = self._values.expression(arguments["var"], "debug var")
            raw = arguments["var"].value
            if isinstance(raw, str) and raw.strip().startswith("{{"):  # var={{ item }}: Ansible
                args["var"] = raw  # renders it, then evaluates the name it gives (engine.kinds)
        else:
            msg = arguments.get("msg")
            args["msg"] = msg.value if msg is not None else "Hello world!"
            if msg is not None:
                self._values.check_templates(msg)
        if "verbosity" in arguments:
            args["verbosity"] = kw.to_int(arguments["verbosity"], "verbosity", minimum=0)
        return args

    def _set_fact(self, node: Node) -> dict[str, Any]:
        pairs: list[tuple[Node, Any, Node]]  # (where to point, name, value)
        if isinstance(node.value, str):
            pairs = [(value, key, value) for key, value in _free_form(node, "set_fact").items()]
        elif node.is_mapping and node.entries:
            pairs = [(e.key, e.key.value, e.value) for e in node.entries]
        else:
            raise node.error(f"set_fact needs a mapping of name: value, not {shown(node.value)}")
        facts: dict[str, Any] = {}
        for where, name, value in pairs:
            if name == "cacheable":
                # Accepted and ignored: fleetfix keeps no fact cache; every fact lasts the run.
                self._values.check_templates(value)
            elif str(name).startswith("_ansible_"):  # ansible-core refuses it at load
                self._report(where.error(kw.reserved_argument("set_fact", str(name))))
            elif not kw.is_variable_name(name) and not is_template(name):
                self._report(where.error(f"invalid variable name {shown(name)} in set_fact"))
            else:
                if is_template(name):  # `"{{ name }}": value`: the key is rendered per host
                    self._values.check_templates(where)
                self._values.check_templates(value)
                facts[name] = value.value
        return facts

    def _assert(self, node: Node) -> dict[str, Any]:
        arguments = self._arguments(node, kw.ASSERT_ARGS, "assert", free_form=False)
        that = arguments.get("that")
        if that is None:
            raise node.error("assert needs that: (a condition or a list of them)")
        if "msg" in arguments and "fail_msg" in arguments:
            raise arguments["msg"].error("assert takes fail_msg: or msg:, not both")
        args: dict[str, Any] = {"that": self._values.conditions(that, "that", allow_empty=False)}
        for key in ("fail_msg", "msg", "success_msg"):
            if key in arguments:
                self._values.check_templates(arguments[key])
                args["fail_msg" if key == "msg" else key] = arguments[key].value
        if "quiet" in arguments:
            args["quiet"] = kw.to_bool(arguments["quiet"], "quiet")
        return args

    def _fail(self, node: Node) -> dict[str, Any]:
        arguments = self._arguments(node, kw.FAIL_ARGS, "fail", free_form=True)
        msg = arguments.get("msg")
        if msg is None:
            return {"msg": "Failed as requested from task"}
        self._values.check_templates(msg)
        return {"msg": msg.value}

    def _arguments(
        self, node: Node, allowed: frozenset[str], what: str, *, free_form: bool
    ) -> dict[str, Node]:
        """The kind's arguments by name, from a mapping (or `k=v` words when free_form)."""
        if node.value is None:
            return {}
        if free_form and isinstance(node.value, str):
            return _free_form(node, what)
        if not node.is_mapping:
            raise node.error(f"{what} takes a mapping of arguments, not {shown(node.value)}")
        arguments: dict[str, Node] = {}
        for entry in node.entries:
            key = entry.key.value
            if isinstance(key, str) and key in allowed:
                arguments[key] = entry.value
            else:
                hint = suggest(key, allowed) if isinstance(key, str) else None
                self._report(entry.key.error(f"unknown {what} argument {shown(key)}", hint=hint))
        return arguments


# ---------------------------------------------------------------------- helpers without state


_LOCAL_ACTION = "local_action"


def local_action(node: Node) -> Node:
    """A step written with `local_action:` as the step Ansible runs for it: the module as its
    kind, `delegate_to: localhost` (`local_action: shell echo hi` or
    `local_action: {module: copy, src: a, dest: /b}`).

    Raises:
        PlaybookError: no module named, or delegate_to given too.
    """
    entry = node.entry(_LOCAL_ACTION)
    if entry is None:
        return node
    if node.entry("delegate_to") is not None:
        raise entry.key.error(
            "local_action and delegate_to are mutually exclusive", hint="keep one of them"
        )
    kind = _local_kind(entry)
    delegate = Entry(
        Node(NodeKind.SCALAR, "delegate_to", entry.key.position, entry.key.source_line),
        Node(NodeKind.SCALAR, "localhost", entry.key.position, entry.key.source_line),
    )
    entries = (*(kind if e is entry else e for e in node.entries), delegate)
    return replace(node, entries=entries)


_INCLUDE_NAMES = frozenset(
    f"{prefix}{kind}"
    for kind in ("include_tasks", "include_role")
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
)


def _include_action(node: Node) -> Node:
    """`action: include_tasks FILE` (Ansible's old form) as `include_tasks: FILE`; fleetfix's
    own `action:` names a remediation action, never an include."""
    entry = node.entry("action")
    value = entry.value.value if entry is not None else None
    if entry is None or not isinstance(value, str) or value.split(" ")[0] not in _INCLUDE_NAMES:
        return node
    module, _, rest = value.strip().partition(" ")
    key = Node(NodeKind.SCALAR, module, entry.value.position, entry.value.source_line)
    args = Node(
        NodeKind.SCALAR, rest.strip() or None, entry.value.position, entry.value.source_line
    )
    return replace(node, entries=tuple(Entry(key, args) if e is entry else e for e in node.entries))


def _module_action(node: Node) -> Node:
    """`action: {module: MODULE, ARG: ...}` (Ansible's action form, told from fleetfix's own
    `action: {name: ...}` by its module: key) as `MODULE: {ARG: ...}`. A templated module is
    refused: fleetfix gates, plans and journals a step by its module before anything runs.

    Raises:
        PlaybookError: the module is a template.
    """
    entry = node.entry("action")
    if entry is None or not entry.value.is_mapping or entry.value.entry("name") is not None:
        return node
    module = entry.value.entry("module")
    if module is None:
        return node
    if isinstance(module.value.value, str) and is_template(module.value.value):
        raise module.value.error(
            f"action: module: {module.value.value!r} names its module with a template: fleetfix"
            " must know a step's module when it loads the playbook (a disruptive command is"
            " gated and journaled before it is sent)",
            hint="write one step per module, each with a when: on the variable",
        )
    kind = _local_kind(entry)
    return replace(node, entries=tuple(kind if e is entry else e for e in node.entries))


def _local_kind(entry: Entry) -> Entry:
    """`local_action`'s value as the entry `MODULE: ARGS`."""
    value = entry.value
    if value.is_scalar and isinstance(value.value, str) and value.value.strip():
        module, _, rest = value.value.strip().partition(" ")
        args = Node(NodeKind.SCALAR, rest.strip() or None, value.position, value.source_line)
        key = Node(NodeKind.SCALAR, module, value.position, value.source_line)
        return Entry(key, args)
    module_entry = value.entry("module") if value.is_mapping else None
    if module_entry is None or not isinstance(module_entry.value.value, str):
        raise value.error(
            "local_action needs a module: 'local_action: MODULE ARGS' or"
            " 'local_action: {module: MODULE, ARG: ...}'"
        )
    rest_entries = tuple(e for e in value.entries if e is not module_entry)
    rest_value = {e.key.value: e.value.value for e in rest_entries}
    args = replace(value, entries=rest_entries, value=rest_value)
    return Entry(replace(module_entry.value, value=module_entry.value.value.strip()), args)


def _delimiters_inside(expression: str, exc: ConditionError) -> bool:
    """A condition that is a syntax error for the `{{ }}` written inside it."""
    cause = exc.__cause__
    return (
        "{{" in expression
        and isinstance(cause, jinja2.TemplateSyntaxError)
        and not isinstance(cause, jinja2.TemplateAssertionError)
    )


def _misplaced(key: str, kind: StepKind, role: Role) -> str | None:
    """Why `key` is not allowed on this step, or None."""
    if kind in INCLUDE_KINDS and key not in INCLUDE_KEYWORDS:
        return f"{key}: is not valid on {kind.value}; put it on the included steps"
    if key == "listen" and role is not Role.HANDLER:
        return "listen: is only valid on handlers"
    if role is Role.ESCALATE and key in ("verify", "escalate"):
        return f"{key}: is not valid on an escalate rung: the parent step's verify checks each rung"
    if kind is StepKind.BLOCK and key in kw.NOT_ON_BLOCK:
        return f"{key}: is not valid on a block; put it on the steps inside"
    if key in kw.ACTION_ONLY and kind is not StepKind.ACTION:
        return f"{key}: is only valid on action steps"
    if key in (*kw.LOOP_KEYWORDS, "loop_control") and (
        kind is StepKind.META or role in (Role.VERIFY, Role.ESCALATE)
    ):
        return f"{key}: is not valid on a meta step or in verify:/escalate:"
    if key == "expect_unreachable" and kind not in kw.EXPECT_UNREACHABLE_KINDS:
        return "expect_unreachable: is only valid on action, shell and command steps"
    return None


def _name_and_params(kind: StepKind, node: Node) -> tuple[Node, tuple[Entry, ...]]:
    if node.is_mapping:
        name_entry = node.entry("name")
        if name_entry is None:
            raise node.error(f"{kind.value} needs a name: {kind.value}: {{name: ..., PARAM: ...}}")
        return name_entry.value, tuple(e for e in node.entries if e is not name_entry)
    if node.is_scalar:
        return node, ()
    raise node.error(
        f"{kind.value} must be a name or a mapping with name:, not {shown(node.value)}"
    )


def _expand_params(entries: Iterable[Entry], accepted: frozenset[str]) -> Iterable[Entry]:
    """Inline params, plus the entries of a `params:` mapping (unless 'params' is a param)."""
    for entry in entries:
        if entry.key.value == "params" and "params" not in accepted and entry.value.is_mapping:
            yield from entry.value.entries
        else:
            yield entry


def _free_form(node: Node, what: str) -> dict[str, Node]:
    """`debug: msg="x y"` style arguments; every value points at the whole string."""
    try:
        pairs = parse_kv(node.value, template_keys=what == "set_fact")
    except ValueError as exc:
        example = "{name: value}" if what == "set_fact" else "{msg: ...}"
        raise node.error(
            f"{what}: {exc}", hint=f"or use the mapping form: {what}: {example}"
        ) from exc
    return {
        key: Node(NodeKind.SCALAR, value, node.position, node.source_line)
        for key, value in pairs.items()
    }


def _block_args(node: Node) -> dict[str, Any]:
    if not node.is_sequence:
        raise node.error(f"block must be a list of steps, not {shown(node.value)}")
    return {}


def _is_block(node: Node) -> bool:
    return node.is_mapping and node.entry("block") is not None
