"""Taint: what a template makes from a secret is a secret, and the run's Redactor learns it.

Every template the sandbox compiles is rewritten so that each value it uses passes through a
read (`READ`, a filter no playbook can name): a variable, an attribute or item, a call's result
(`lookup('vars', ...)`). A container a template only reaches through (`vault` in `vault.url`,
`hostvars` in `hostvars[h].rack`) is not a use; the member it reaches is. When a value the
evaluation used holds a secret (`Redactor.holds`), what it made is a secret as well:
`{{ db_password | upper }}`, `| b64encode`, `[:8]`, `'x' ~ db_password`. The Redactor learns it
(`Redactor.add`), so every event that carries it is masked, and a fact set from it taints each
template that uses that fact in turn: the taint travels with the value, not the variable's name.

A template without statements is watched one `{{ }}` at a time (the finalize hook closes each),
so `echo {{ user }} {{ db_password | upper }}` masks the second part only; a bare expression and
a template with statements (`{% %}`: a loop variable is a piece of a secret too short to learn)
are one evaluation each.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from fleetfix.errors import ConditionError
from fleetfix.secrets import LEARNED_MIN, Redactor, leaves

T = TypeVar("T")

READ = "fleetfix read"
"""The filter each used value passes through; a space keeps it out of any template's reach."""
_UNDEFINED_NAME = re.compile(r"'[A-Za-z_][A-Za-z0-9_]*' is undefined")
"""Jinja2's message for a name the template itself spells: it quotes no value."""


class Taint:
    """Notes the values each evaluation uses, and has the run's Redactor learn what an
    evaluation that used a secret made. Rendering is synchronous, so two evaluations never
    interleave, even when many hosts' steps run on the event loop."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        self._redactor = redactor
        self._reads: list[Any] | None = None
        self._each_output = False

    def read(self, value: Any) -> None:
        """The template being evaluated used `value`."""
        if self._reads is not None and not isinstance(value, jinja2.Undefined):
            self._reads.append(value)

    def output(self, value: Any) -> None:
        """One `{{ }}` is about to be written; in a template watched output by output, it is
        what the values read since the last one made."""
        if self._each_output and self._reads is not None:
            self._learn(value, self._reads)
            self._reads.clear()

    def watch(self, evaluate: Callable[[], T], *, each_output: bool = False) -> T:
        """`evaluate()`; when it used a secret, the Redactor learns the text of its result (or
        of each `{{ }}` that used one, with `each_output`).

        Raises:
            ConditionError: `evaluate`'s own; when it had used a secret, with the message
                hidden (a filter's error quotes the value it was given: `int('S3CR3T')`).
        """
        redactor = self._redactor
        if not redactor:  # nothing is secret yet: there is nothing to use
            return evaluate()
        outer = self._reads, self._each_output
        self._reads, self._each_output = [], each_output
        reads = self._reads
        try:
            result = evaluate()
        except ConditionError as exc:
            if any(map(redactor.holds, reads)):
                raise _hidden(exc) from None
            raise
        finally:
            self._reads, self._each_output = outer
            if self._reads is not None:  # an enclosing evaluation used it all too
                self._reads.extend(reads)
        self._learn(result, reads)
        return result

    def _learn(self, made: Any, reads: list[Any]) -> None:
        """Only a result with a text to learn has what it used searched: `{{ out.rc }}` costs
        no search of a large `out.stdout`."""
        texts = [text for text in {str(made), *leaves(made)} if len(text) >= LEARNED_MIN]
        if texts and self._redactor is not None and any(map(self._redactor.holds, reads)):
            self._redactor.add(texts)


def _hidden(exc: ConditionError) -> ConditionError:
    """`exc` without what the template was computing when it failed."""
    cause = exc.__cause__
    if cause is not None and _UNDEFINED_NAME.fullmatch(str(cause)):
        return exc
    kind = type(cause).__name__ if cause is not None else "error"
    message = f"the template failed ({kind}); its message is hidden: the template used a secret"
    return ConditionError(message, exc.expression)


class WatchedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, compiling each template so that it tells `taint` every value it uses and
    every `{{ }}` it writes (`finalize` still decides how a value is written)."""

    def __init__(self, taint: Taint, *, finalize: Callable[[Any], Any], **options: Any) -> None:
        @jinja2.pass_environment
        def written(env: jinja2.Environment, value: Any) -> Any:
            typing.cast(WatchedEnvironment, env).taint.output(value)
            return finalize(value)

        super().__init__(finalize=written, **options)
        self.taint = taint
        self.filters[READ] = _read

    def _generate(
        self,
        source: nodes.Template,
        name: str | None,
        filename: str | None,
        defer_init: bool = False,
    ) -> str:
        # Jinja2's documented hook between the parsed template and its Python code: every
        # template, expression and template file compiled here passes through it.
        return super()._generate(_with_reads(source), name, filename, defer_init)


@jinja2.pass_environment
def _read(env: jinja2.Environment, value: Any) -> Any:
    typing.cast(WatchedEnvironment, env).taint.read(value)
    return value


_USED = (nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Call)
"""The nodes whose value a template uses, unless it only reaches through it."""


def _with_reads(node: nodes.Node, *, called: bool = False) -> Any:
    """`node` with every value it uses wrapped in READ (a parse tree is rewritten in place);
    `called`: `node` is the callee of a Call."""
    for field in node.fields:
        child = getattr(node, field)
        if isinstance(child, list):
            setattr(node, field, [_child(node, field, item, called) for item in child])
        elif isinstance(child, nodes.Node):
            setattr(node, field, _child(node, field, child, called))
    return node


def _child(parent: nodes.Node, field: str, child: Any, parent_called: bool) -> Any:
    if not isinstance(child, nodes.Node):
        return child
    callee = isinstance(parent, nodes.Call) and field == "node"
    rewritten = _with_reads(child, called=callee)
    if not isinstance(child, _USED) or callee or _reached_through(parent, field, parent_called):
        return rewritten
    if isinstance(child, nodes.Name) and child.ctx != "load":
        return rewritten
    if isinstance(parent, nodes.CallBlock) and field == "call":
        return rewritten  # `{% call %}` needs its Call node; the call's own values are read
    return nodes.Filter(rewritten, READ, [], [], None, None, lineno=child.lineno)


def _reached_through(parent: nodes.Node, field: str, parent_called: bool) -> bool:
    """Is the value at `parent.field` only a way to a member (`vault` of `vault.url`)? Not
    when sliced (`pw[:8]` is made from pw; Jinja2 slices without `getitem`), nor when the
    member is a method that is called (`pw.upper()` is made from pw)."""
    if field != "node" or not isinstance(parent, nodes.Getattr | nodes.Getitem):
        return False
    if isinstance(parent, nodes.Getitem) and isinstance(parent.arg, nodes.Slice):
        return False
    return not parent_called
