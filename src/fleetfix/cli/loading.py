"""Loading a playbook against the built-in probes and actions, values of their params included."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from fleetfix.actions import action_registry
from fleetfix.actions.base import Action
from fleetfix.errors import FleetfixError, InputErrors, PlaybookError
from fleetfix.playbook.loader import (
    StepCatalog,
    load_playbook,
    load_task_file,
    validate_playbook,
)
from fleetfix.playbook.model import Playbook, Step, StepKind
from fleetfix.plugins import Registry
from fleetfix.probes import probe_registry
from fleetfix.probes.base import Probe


def builtin_catalog() -> StepCatalog:
    """Every built-in probe and action with the parameters it accepts (each plugin's module
    loaded when a playbook names it)."""
    return StepCatalog(probes=_Params(probe_registry()), actions=_Params(action_registry()))


class _Params(Mapping[str, frozenset[str]]):
    """A registry seen as plugin name -> the params it accepts."""

    def __init__(self, registry: Registry[Probe[Any]] | Registry[Action]) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> frozenset[str]:
        if name not in self._registry:
            raise KeyError(name)
        return frozenset(self._registry.get(name).params)

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.names())

    def __len__(self) -> int:
        return len(self._registry)


def builtin_task_loader() -> Callable[[str], tuple[Step, ...]]:
    """Reads (once each) the task files include_tasks names with a template, at run time."""
    catalog = builtin_catalog()
    read: dict[str, tuple[Step, ...]] = {}

    def load(path: str) -> tuple[Step, ...]:
        if path not in read:
            read[path] = load_task_file(path, catalog)
        return read[path]

    return load


def load_builtin_playbook(path: str, *, missing_handler_errors: bool = True) -> Playbook:
    """Load `path`; report every problem at once (InputErrors) and nothing runs.
    `missing_handler_errors`: ansible's error_on_missing_handler (a notify naming no handler
    is refused at load; false: left to run time, which warns)."""
    catalog = builtin_catalog()
    errors = validate_playbook(path, catalog, missing_handler_errors=missing_handler_errors)
    if len(errors) > 1:
        raise InputErrors(errors)
    playbook = load_playbook(path, catalog, missing_handler_errors=missing_handler_errors)
    problems = param_problems(playbook, probe_registry(), action_registry())
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise InputErrors(problems)
    return playbook


def param_problems(
    playbook: Playbook, probes: Registry[Probe[Any]], actions: Registry[Action]
) -> list[PlaybookError]:
    """Literal (untemplated) probe/action params that cannot work, found before any host."""
    lines = _source_lines(playbook.path)
    problems = []
    for step in _every_step(playbook):
        params = dict(step.args.get("params") or {})
        if _templated(params):
            continue  # known only per host at run time; checked then
        problem = _check(step, params, probes, actions)
        if problem is not None:
            source = lines[step.position.line - 1] if 0 < step.position.line <= len(lines) else None
            problems.append(PlaybookError(problem, step.position, source_line=source))
    return problems


def _check(
    step: Step, params: dict[str, Any], probes: Registry[Probe[Any]], actions: Registry[Action]
) -> str | None:
    name = str(step.args.get("name"))
    if step.kind is StepKind.PROBE:
        try:
            probes.get(name).command(params)  # pure: builds a string, runs nothing
        except (FleetfixError, ValueError, TypeError) as exc:
            return f"probe {name}: {exc}"
    elif step.kind is StepKind.ACTION:
        validate = actions.get(name).validate
        problem = validate(params) if validate is not None else None
        if problem is not None:
            return f"action {name}: {problem}"
    return None


def _every_step(playbook: Playbook) -> Iterator[Step]:
    for play in playbook.plays:
        yield from _walk((*play.pre_tasks, *play.tasks, *play.post_tasks, *play.handlers))


def _walk(steps: tuple[Step, ...]) -> Iterator[Step]:
    for step in steps:
        yield step
        yield from _walk((*step.block, *step.rescue, *step.always, *step.verify, *step.escalate))


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(_templated(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_templated(v) for v in value)
    return False


def _source_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
