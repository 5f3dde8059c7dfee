"""Sandboxed Jinja2 conditions and templates: compiled once, evaluated per host, safe to fail.

One `Templar` per run. Conditions (`when`, `until`, `changed_when`, `failed_when`, `assert`) are
native expressions whose result must be a boolean, as in ansible-core 2.19: a string like "false"
from `-e` must not silently count as true on a remediation gate. Templates are strings with
`{{ }}`; a string that is exactly one `{{ expr }}` keeps the expression's native type.

Variables are data. Only the playbook's own strings (the `value` given to `render`, the definitions
given to `resolve`) are templates; a registered stdout that contains `{{ 7*7 }}` stays literal.
Every failure, including a sandbox refusal, leaves as ConditionError. The filters and tests the
sandbox offers are in `filters`.

Given the run's Redactor, what a template makes from a secret is a secret too (playbook/taint.py):
each `{{ }}` of a template without statements on its own, a bare `{{ expr }}` or a template with
statements (`{% %}`) whole. Conditions make only true or false: they are not watched.
"""

from __future__ import annotations

import functools
import graphlib
import re
from collections.abc import Mapping
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.environment import TemplateExpression

from fleetfix.errors import ConditionError
from fleetfix.playbook import lookups
from fleetfix.playbook.filters import FILTERS, GLOBALS, TESTS
from fleetfix.playbook.taint import READ, Taint, WatchedEnvironment
from fleetfix.playbook.yamlpos import UnsafeText
from fleetfix.secrets import Redactor


class _StrictChainableUndefined(jinja2.ChainableUndefined, jinja2.StrictUndefined):
    """Any use of an undefined value fails, but `a.b is defined` and `a.b | default(x)` work
    when `a` itself is undefined (Ansible's behaviour)."""

    __slots__ = ()


def _finalize(value: Any) -> Any:
    """`{{ none }}` prints nothing inside a string, as in Ansible."""
    return "" if value is None else value


def _new_environment(taint: Taint) -> WatchedEnvironment:
    env = WatchedEnvironment(
        taint,
        undefined=_StrictChainableUndefined,
        finalize=_finalize,
        keep_trailing_newline=True,
        autoescape=False,
        extensions=["jinja2.ext.loopcontrols"],
    )
    env.filters.update(FILTERS)
    env.tests.update(TESTS)
    env.globals.update(lookups.GLOBALS)
    env.globals.update(GLOBALS)
    return env


OMIT = "__omit_place_holder__fleetfix"
"""Ansible's `omit`, where fleetfix renders a keyword: a keyword that renders to it is not set.
(Module arguments do not see `omit`: an undefined `omit` there stays an error.)"""

_OMIT_ONLY = re.compile(r"^\s*\{\{\s*omit\s*\}\}\s*$")


def is_omit(value: object) -> bool:
    """A keyword written as `{{ omit }}`: Ansible leaves such a keyword unset."""
    return isinstance(value, str) and _OMIT_ONLY.match(value) is not None


def is_template(value: object) -> bool:
    """True when a string has Jinja2 markup (and is not `!unsafe`)."""
    return (
        isinstance(value, str)
        and not isinstance(value, UnsafeText)
        and ("{{" in value or "{%" in value or "{#" in value)
    )


class Templar:
    """Compiles each expression and template once; evaluates them against a host's variables.

    With `secrets` (the run's Redactor, the one its EventBus masks events with), what a
    template makes from a secret is added to it (playbook/taint.py)."""

    def __init__(self, secrets: Redactor | None = None) -> None:
        self._taint = Taint(secrets)
        self._env = _new_environment(self._taint)
        self._expressions: dict[str, TemplateExpression] = {}
        self._templates: dict[str, TemplateExpression | jinja2.Template] = {}
        self._statements: dict[str, bool] = {}
        self._bare: dict[str, str | None] = {}
        self._names: dict[str, frozenset[str]] = {}

    @property
    def compiled_count(self) -> int:
        """How many distinct expressions and templates have been compiled (each only once)."""
        return len(self._expressions) + len(self._templates)

    @property
    def filter_names(self) -> frozenset[str]:
        return frozenset(self._env.filters) - {READ}

    @property
    def test_names(self) -> frozenset[str]:
        return frozenset(self._env.tests)

    def evaluate(self, expression: str, variables: Mapping[str, Any]) -> bool:
        """Evaluate a condition; its result must be a boolean.

        Raises:
            ConditionError: syntax error, undefined variable, unsafe access, failing filter,
                or a result that is not true/false.
        """
        compiled = self._expression(expression)
        result = self._call(compiled, variables, expression)
        if not isinstance(result, bool):
            raise ConditionError(
                f"condition result {_short(result)} is a {type(result).__name__}, not true/false; "
                "compare it explicitly or use '| bool'",
                expression,
            )
        return result

    def render(self, value: Any, variables: Mapping[str, Any]) -> Any:
        """Render templates in a playbook value: strings, and lists/tuples/dicts recursively.

        A string that is exactly one `{{ expr }}` returns the expression's native value.
        `!unsafe` strings and non-strings come back as they are.

        Raises:
            ConditionError: the template failed for these variables.
        """
        if isinstance(value, str):
            return self._render_text(value, variables) if is_template(value) else value
        if isinstance(value, Mapping):
            return {self.render(k, variables): self.render(v, variables) for k, v in value.items()}
        if isinstance(value, list):
            return [self.render(item, variables) for item in value]
        if isinstance(value, tuple):
            return tuple(self.render(item, variables) for item in value)
        return value

    def render_file(
        self,
        text: str,
        variables: Mapping[str, Any],
        *,
        name: str,
        trim_blocks: bool = True,
        lstrip_blocks: bool = False,
        newline_sequence: str = "\n",
    ) -> str:
        """Render a template file's text (the template module), with Ansible's options for
        it: trim_blocks on by default, unlike a playbook string. Not cached: files change.

        Raises:
            ConditionError: the template failed for these variables (`name` says which).
        """
        env = self._env.overlay(
            trim_blocks=trim_blocks,
            lstrip_blocks=lstrip_blocks,
            newline_sequence=newline_sequence,  # type: ignore[arg-type]
        )
        try:
            template = env.from_string(text)
        except jinja2.TemplateSyntaxError as exc:
            raise ConditionError(_syntax_message(exc, text), name) from exc
        return self._taint.watch(functools.partial(_render, template, variables, name))

    def resolve(
        self, definitions: Mapping[str, Any], variables: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Render variable definitions (play/step `vars`) that may refer to each other in any
        order and to `variables`; a definition shadows a variable of the same name.

        Raises:
            ConditionError: a definition failed, or definitions refer to each other in a loop.
        """
        resolved: dict[str, Any] = {}
        for name in self._resolution_order(definitions):
            scope = {**variables, **resolved}
            resolved[name] = self.render(definitions[name], scope)
        return resolved

    def broken(self, reason: str) -> Any:
        """A value that fails, saying `reason`, wherever a template uses it (a variable whose
        own template could not be rendered), as Ansible fails only where it is used."""
        return self._env.undefined(hint=reason)

    def check_expression(self, expression: str) -> None:
        """Compile a condition now (at load) so a syntax error is reported before the run."""
        self._expression(expression)

    def check_template(self, text: str) -> None:
        """Compile a template string now (at load)."""
        if is_template(text):
            self._template(text)

    def bare_expression(self, text: str) -> str | None:
        """'x' for a string that is exactly '{{ x }}', else None."""
        if text not in self._bare:
            self._bare[text] = self._find_bare(text)
        return self._bare[text]

    def _find_bare(self, text: str) -> str | None:
        if not (text.startswith("{{") and text.endswith("}}")):
            return None
        try:
            body = self._env.parse(text).body
        except jinja2.TemplateSyntaxError:
            return None
        if len(body) != 1 or not isinstance(body[0], nodes.Output):
            return None
        parts = body[0].nodes
        if len(parts) != 1 or isinstance(parts[0], nodes.TemplateData):
            return None
        return text[2:-2].strip("-+").strip()

    def _expression(self, expression: str) -> TemplateExpression:
        compiled = self._expressions.get(expression)
        if compiled is None:
            source = self.bare_expression(expression) or expression
            try:
                compiled = self._env.compile_expression(source, undefined_to_none=False)
            except jinja2.TemplateSyntaxError as exc:
                message = _syntax_message(exc, expression, condition=True)
                raise ConditionError(message, expression) from exc
            self._check_lookups("{{ " + source + " }}", expression)
            self._expressions[expression] = compiled
        return compiled

    def _template(self, text: str) -> TemplateExpression | jinja2.Template:
        compiled = self._templates.get(text)
        if compiled is None:
            bare = self.bare_expression(text)
            try:
                compiled = (
                    self._env.compile_expression(bare, undefined_to_none=False)
                    if bare is not None
                    else self._env.from_string(text)
                )
            except jinja2.TemplateSyntaxError as exc:
                raise ConditionError(_syntax_message(exc, text), text) from exc
            self._check_lookups(text, text)
            self._templates[text] = compiled
        return compiled

    def _has_statements(self, text: str) -> bool:
        """Does a template have `{% %}` (is anything in it more than its text and `{{ }}`)."""
        if text not in self._statements:
            body = self._env.parse(text).body
            self._statements[text] = not all(isinstance(node, nodes.Output) for node in body)
        return self._statements[text]

    def _check_lookups(self, template: str, source: str) -> None:
        """A lookup plugin fleetfix does not have is refused when the template compiles (at
        load), not on the first host that renders it."""
        for name in lookups.unsupported(self._env.parse(template)):
            raise ConditionError(
                f"lookup plugin {name!r} is not supported by fleetfix"
                f" (it has: {', '.join(lookups.SUPPORTED)})",
                source,
            )

    def _render_text(self, text: str, variables: Mapping[str, Any]) -> Any:
        compiled = self._template(text)
        watch = self._taint.watch
        if isinstance(compiled, TemplateExpression):
            return watch(functools.partial(self._call, compiled, variables, text))
        render = functools.partial(_render, compiled, variables, text)
        return watch(render, each_output=not self._has_statements(text))

    def _call(self, compiled: TemplateExpression, variables: Mapping[str, Any], source: str) -> Any:
        try:
            result = compiled(variables)
            undefined = _first_undefined(result)
            if undefined is not None:
                undefined._fail_with_undefined_error()
        except Exception as exc:
            raise ConditionError(_runtime_message(exc), source) from exc
        return result

    def _resolution_order(self, definitions: Mapping[str, Any]) -> tuple[str, ...]:
        sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
        for name, value in definitions.items():
            sorter.add(name, *(ref for ref in self._references(value) if ref in definitions))
        try:
            return tuple(sorter.static_order())
        except graphlib.CycleError as exc:
            cycle = exc.args[1]
            loop = " -> ".join(cycle)
            raise ConditionError(
                f"variables refer to each other in a loop: {loop}", str(definitions[cycle[0]])
            ) from exc

    def _references(self, value: Any) -> set[str]:
        """Names a value's templates read (any branch), for ordering `resolve`."""
        if is_template(value):
            if value not in self._names:
                try:
                    self._names[value] = frozenset(
                        meta.find_undeclared_variables(self._env.parse(value))
                    )
                except jinja2.TemplateSyntaxError as exc:
                    raise ConditionError(_syntax_message(exc, value), value) from exc
            return set(self._names[value])
        if isinstance(value, Mapping):
            return {name for item in value.values() for name in self._references(item)}
        if isinstance(value, list | tuple):
            return {name for item in value for name in self._references(item)}
        return set()


def _render(template: jinja2.Template, variables: Mapping[str, Any], source: str) -> str:
    try:
        return template.render(variables)
    except Exception as exc:
        # Anything a user's template raises (UndefinedError, SecurityError, a filter's
        # ValueError, ZeroDivisionError...) is that template's failure, not ours.
        raise ConditionError(_runtime_message(exc), source) from exc


def _first_undefined(value: Any) -> jinja2.Undefined | None:
    """An undefined value anywhere in a native result (`[x, 1]` with x undefined)."""
    if isinstance(value, jinja2.Undefined):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            found = _first_undefined(item)
            if found is not None:
                return found
    return None


_NO_SUCH_NAME = re.compile(r"^No (filter|test) named '([^']+)'\.?")


def _syntax_message(
    exc: jinja2.TemplateSyntaxError, source: str, *, condition: bool = False
) -> str:
    where = f" (line {exc.lineno} of the template)" if "\n" in source.strip() else ""
    if isinstance(exc, jinja2.TemplateAssertionError) and exc.message:
        # Jinja2 says "No filter named 'x'." at compile time; say it in our words.
        unknown = _NO_SUCH_NAME.sub(r"unknown Jinja2 \1 '\2'", exc.message)
        return f"{unknown}{where}"
    message = f"template syntax error: {exc.message}{where}"
    if condition and "{{" in source:
        message += "; a condition is already an expression: drop the {{ }} inside it"
    return message


def _runtime_message(exc: Exception) -> str:
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return f"refused by the sandbox: {exc}"
    if isinstance(exc, lookups.LookupFailed):
        return str(exc)
    if isinstance(exc, jinja2.UndefinedError):
        return str(exc)  # "'gpu_count' is undefined"
    return f"{type(exc).__name__}: {exc}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
