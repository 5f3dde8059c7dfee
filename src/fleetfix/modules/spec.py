"""What an Ansible module accepts: its parameters, their types, aliases, choices and rules.

Pure data and checks, no I/O: the loader checks a step's literal arguments with `problems()`
before anything runs, and the engine `resolve()`s the rendered ones on each host (templated
values are only known there). Both speak Ansible's words: an unknown parameter is
"Unsupported parameters", a missing one "missing required arguments".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetfix.booleans import boolean

ParamType = Literal["str", "path", "bool", "int", "float", "raw", "list", "dict"]


class ModuleArgsError(ValueError):
    """A module's arguments are wrong; the message says which and why, in Ansible's words."""


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter. `default` None means "not given" (modules test for None)."""

    type: ParamType = "str"
    required: bool = False
    default: Any = None
    choices: tuple[Any, ...] = ()
    aliases: tuple[str, ...] = ()
    no_log: bool = False


@dataclass(frozen=True, slots=True)
class ModuleSpec:
    """An `ansible.builtin` module fleetfix runs natively."""

    name: str
    summary: str
    params: Mapping[str, Param]
    free_form: str | None = None
    """The parameter a bare string goes to (raw's command); None: `k=v` words, as Ansible."""
    read_only: bool = False
    """Only reads the node (stat, slurp, wait_for): runs in --check, no confirmation."""
    mutually_exclusive: tuple[tuple[str, ...], ...] = ()
    required_one_of: tuple[tuple[str, ...], ...] = ()
    required_if: tuple[tuple[str, Any, tuple[str, ...]], ...] = ()
    """(param, value, needed): when param == value, every name in needed must be given."""
    required_by: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(param, needed): when param is given, every name in needed must be given too."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Ansible parameters fleetfix deliberately does not take, with the reason."""

    def canonical(self, name: str) -> str | None:
        """The parameter `name` stands for (itself or an alias), or None if unknown."""
        if name in self.params:
            return name
        for canonical, param in self.params.items():
            if name in param.aliases:
                return canonical
        return None

    @property
    def accepted(self) -> frozenset[str]:
        names = set(self.params)
        for param in self.params.values():
            names.update(param.aliases)
        return frozenset(names)


def problems(
    spec: ModuleSpec, given: Mapping[str, Any], is_template: Callable[[Any], bool]
) -> list[tuple[str | None, str]]:
    """(parameter as written or None, problem) for a step's arguments as written; a templated
    value is only checked for being there (its type is known once rendered)."""
    found: list[tuple[str | None, str]] = []
    seen: dict[str, str] = {}
    for written, value in given.items():
        if written in spec.refused:
            found.append(
                (written, f"{spec.name}: {written} is not supported: {spec.refused[written]}")
            )
            continue
        canonical = spec.canonical(written)
        if canonical is None:
            found.append((written, f"Unsupported parameters for ({spec.name}) module: {written}"))
            continue
        if canonical in seen:
            found.append(
                (written, f"{spec.name}: {written} and {seen[canonical]} are one parameter")
            )
            continue
        seen[canonical] = written
        if not is_template(value):
            try:
                _coerce(spec, canonical, value)
            except ModuleArgsError as exc:
                found.append((written, str(exc)))
    if not found or all(problem.startswith("argument ") for _, problem in found):
        # As Ansible: a misspelt or refused parameter is the problem, not what it leaves out.
        found.extend((None, p) for p in _rules(spec, set(seen), lambda name: given.get(seen[name])))
    return found


def resolve(spec: ModuleSpec, rendered: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter by its canonical name, coerced to its type, defaults filled in.

    Raises:
        ModuleArgsError: unknown, missing, mistyped or conflicting parameters.
    """
    values: dict[str, Any] = {}
    for written, value in rendered.items():
        canonical = spec.canonical(written)
        if canonical is None:
            raise ModuleArgsError(f"Unsupported parameters for ({spec.name}) module: {written}")
        values[canonical] = _coerce(spec, canonical, value)
    given = {name for name, value in values.items() if value is not None}
    rule_problems = _rules(spec, given, values.get)
    if rule_problems:
        raise ModuleArgsError("; ".join(rule_problems))
    for name, param in spec.params.items():
        if values.get(name) is None:
            values[name] = param.default
    return values


def _rules(spec: ModuleSpec, given: set[str], value_of: Callable[[str], Any]) -> list[str]:
    found: list[str] = []
    missing = [name for name, param in spec.params.items() if param.required and name not in given]
    if missing:
        found.append(f"missing required arguments: {', '.join(sorted(missing))}")
    for group in spec.mutually_exclusive:
        both = [name for name in group if name in given]
        if len(both) > 1:
            found.append(f"parameters are mutually exclusive: {'|'.join(both)}")
    for group in spec.required_one_of:
        if not any(name in given for name in group):
            found.append(f"one of the following is required: {', '.join(group)}")
    for name, value, needed in spec.required_if:
        if name in given and value_of(name) == value:
            lacking = [n for n in needed if n not in given]
            if lacking:
                found.append(
                    f"{name} is {value} but all of the following are missing: {', '.join(lacking)}"
                )
    for name, needed in spec.required_by:
        lacking = [n for n in needed if n not in given] if name in given else []
        if lacking:
            found.append(f"missing parameter(s) required by '{name}': {', '.join(lacking)}")
    return found


def _coerce(spec: ModuleSpec, name: str, value: Any) -> Any:
    param = spec.params[name]
    if value is None:
        return None
    try:
        converted = _CONVERTERS[param.type](value)
    except (TypeError, ValueError) as exc:
        raise ModuleArgsError(
            f"argument '{name}' is of type {type(value).__name__} and we were unable to convert"
            f" to {param.type}: {exc}"
        ) from exc
    if param.choices and converted not in param.choices:
        choices = ", ".join(str(c) for c in param.choices)
        raise ModuleArgsError(f"value of {name} must be one of: {choices}, got: {converted}")
    return converted


def to_bool(value: Any) -> bool:
    """Ansible's boolean: yes/no, on/off, true/false, 1/0 (any case)."""
    try:
        return boolean(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid boolean") from None


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not an integer")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{value!r} is not an integer")
    return int(str(value).strip()) if isinstance(value, str) else int(value)


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def _to_str(value: Any) -> str:
    if isinstance(value, Mapping | list | tuple):
        raise ValueError(f"{value!r} is not a string")
    return str(value)


def _to_list(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [value]


def _to_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    raise ValueError(f"{value!r} is not a dictionary")


_CONVERTERS: Mapping[str, Callable[[Any], Any]] = {
    "str": _to_str,
    "path": _to_str,
    "bool": to_bool,
    "int": _to_int,
    "float": _to_float,
    "raw": lambda value: value,
    "list": _to_list,
    "dict": _to_dict,
}
