"""Taint: what a template made from a secret is a secret, and the run's Redactor learns it.

The sandbox reports every value a template reads: each variable it names (the context's
`resolve_or_missing`, which `lookup('vars', ...)` goes through too) and each attribute and item
it takes (`getattr`/`getitem`: `hostvars['gpu001'].db_password`, `vault.token`,
`map(attribute=...)`). When one of them holds a secret (`Redactor.holds`), the result of that
evaluation is a secret as well: `{{ db_password | upper }}`, `| b64encode`, `[:8]`,
`'x' ~ db_password`. The Redactor learns it (`Redactor.add`), so every event that carries it
is masked, and a fact set from it taints every template that reads that fact in
turn: the taint travels with the value from template to template, not with the variable's name.

What one evaluation is (one `{{ }}` of a plain template, a bare expression, a whole template with
statements) is the Templar's choice (playbook/conditions.py).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import missing

from fleetfix.errors import ConditionError
from fleetfix.secrets import LEARNED_MIN, Redactor, leaves

T = TypeVar("T")

_UNDEFINED_NAME = re.compile(r"'[A-Za-z_][A-Za-z0-9_]*' is undefined")
"""Jinja2's message for a name the template itself spells: it quotes no value."""


class Taint:
    """Notes what each evaluation reads, and has the run's Redactor learn what an evaluation
    that read a secret made. Rendering is synchronous, so two evaluations never interleave,
    even when many hosts' steps run on the event loop."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        self._redactor = redactor
        self._reads: list[Any] | None = None

    @property
    def active(self) -> bool:
        """Is anything secret yet (else there is nothing a template could read)."""
        return bool(self._redactor)

    def read(self, value: Any) -> None:
        """The template being evaluated read `value` (a variable, an attribute, an item)."""
        if self._reads is not None:
            self._reads.append(value)

    def watch(self, evaluate: Callable[[], T]) -> T:
        """`evaluate()`; when it read a secret, the Redactor learns the text of its result
        (each scalar's, from LEARNED_MIN characters up).

        What it read is only searched for a secret when the result has such a text (or it
        failed): `{{ out.rc }}` costs no search of a large `out.stdout`.

        Raises:
            ConditionError: `evaluate`'s own; when it had read a secret, with the message
                hidden (a filter's error quotes the value it was given: `int('S3CR3T')`).
        """
        redactor = self._redactor
        if not redactor:  # nothing is secret yet: there is nothing to read
            return evaluate()
        outer, self._reads = self._reads, []
        reads = self._reads
        try:
            result = evaluate()
        except ConditionError as exc:
            if any(map(redactor.holds, reads)):
                raise _hidden(exc) from None
            raise
        finally:
            self._reads = outer
            if outer is not None:  # an enclosing evaluation read it all too
                outer.extend(reads)
        made = [text for text in leaves(result) if len(text) >= LEARNED_MIN]
        if made and any(map(redactor.holds, reads)):
            redactor.add(made)
        return result


def _hidden(exc: ConditionError) -> ConditionError:
    """`exc` without what the template was computing when it failed."""
    cause = exc.__cause__
    if cause is not None and _UNDEFINED_NAME.fullmatch(str(cause)):
        return exc
    kind = type(cause).__name__ if cause is not None else "error"
    message = f"the template failed ({kind}); its message is hidden: the template read a secret"
    return ConditionError(message, exc.expression)


class _WatchedContext(Context):
    """A template context that tells the Taint each variable the template reads."""

    def resolve_or_missing(self, key: str) -> Any:
        value = super().resolve_or_missing(key)
        if value is not missing:
            typing.cast(WatchedEnvironment, self.environment).taint.read(value)
        return value


class WatchedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, telling `taint` every variable, attribute and item a template reads."""

    context_class = _WatchedContext

    def __init__(self, taint: Taint, **options: Any) -> None:
        super().__init__(**options)
        self.taint = taint

    def getattr(self, obj: Any, attribute: str) -> Any:
        value = super().getattr(obj, attribute)
        self.taint.read(value)
        return value

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        self.taint.read(value)
        return value
