"""Looped steps (`loop`, `with_items`, `with_list`): one run of the step per item, as Ansible.

Each item runs as a copy of the step keyed by its place in the list and its value
(`Step.key`), so its journaled verdict and action intents are its own: a resumed run replays
the items the interrupted run finished and settles or re-runs only the rest. The item's
variables (`item` or `loop_control.loop_var`, `index_var`, `ansible_loop_var`) are values put
on top of the host's variables, never rendered as templates: an item read from a node's output
stays data. The step's verdict and registered value combine the items' as Ansible does
(`results`, `msg`, `changed`/`failed`/`skipped`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import jinja2

from fleetfix.engine.hoststep import HostStep, with_lines
from fleetfix.errors import FleetfixError
from fleetfix.events import LoopItemFinished
from fleetfix.playbook.catalog import is_variable_name
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.lookups import LookupFailed
from fleetfix.playbook.model import Step
from fleetfix.results import CommandResult, Status, StepResult

ItemRunner = Callable[[Step, Mapping[str, Any]], Awaitable[StepResult]]
"""Runs one item's copy of the step with the item's variables and returns its verdict."""


class LoopError(FleetfixError):
    """A loop's value did not render to a list on this host."""


async def run_loop(hs: HostStep, run_item: ItemRunner) -> StepResult:
    """Run the step once per item of its loop on this host; the combined verdict."""
    step = hs.step
    try:
        step = _named(hs)
    except FleetfixError as exc:
        return _combined(hs, [], failure=f"{step.position}: {exc}")
    try:
        items = loop_items(hs)
    except Exception as exc:  # a template error or not a list: this host's failure
        undefined = isinstance(exc.__cause__, jinja2.UndefinedError)
        false_condition = _when_false(hs) if undefined else None
        if false_condition is not None:
            return _combined(hs, [], when_false=false_condition)
        if isinstance(exc.__cause__, LookupFailed):  # with_sequence's own words, as Ansible's
            return _combined(hs, [], failure=str(exc.__cause__))
        return _combined(hs, [], failure=f"{step.position}: {exc}")
    results: list[StepResult] = []
    registered: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if index and step.loop_control.pause:
            await asyncio.sleep(step.loop_control.pause)
        item_vars = _item_vars(step, index, item, items)
        result = await run_item(_item_step(step, index, item), item_vars)
        # The item's result holds its variables, as Ansible's does (a debug item prints them).
        result = replace(result, data={**result.data, **item_vars})
        label = _label(hs, item_vars, item)
        hs.ctx.bus.emit(LoopItemFinished(result=result, label=label))
        results.append(result)
        registered.append(with_lines(result.data))
        if hs.state.unreachable:  # Ansible stops a host's loop when the host is lost
            break
        if step.loop_control.break_when and _breaks(hs, item_vars):
            break
    return _combined(hs, results, registered=registered)


def _when_false(hs: HostStep) -> str | None:
    """Ansible skips a step whose loop names an undefined variable when its `when` (read
    without the item) is false: the false condition. An error in that reading leaves the
    loop's error standing (None)."""
    try:
        return next((c for c in hs.step.when if not hs.evaluate((c,))), None)
    except Exception:
        return None


def loop_items(hs: HostStep) -> list[Any]:
    """The step's loop rendered for this host: a list (with_items flattened one level)."""
    step = hs.step
    value = hs.render(step.loop)
    if step.loop_flatten:
        value = value if isinstance(value, list | tuple) else [value]
        return [
            leaf for item in value for leaf in (item if isinstance(item, list | tuple) else [item])
        ]
    if not isinstance(value, list | tuple):
        raise LoopError(
            f"loop requires a list, got this instead: {value!r}"
            " (Hint: to loop over a mapping, use 'loop: \"{{ x | dict2items }}\"')"
        )
    return list(value)


def _named(hs: HostStep) -> Step:
    """The step with a templated loop_var/index_var rendered for this host, as ansible-core's
    loop_control post_validate (Raises FleetfixError: a template error or not a name)."""
    control = hs.step.loop_control
    loop_var, index_var = _name(hs, "loop_var", control.loop_var), None
    if control.index_var is not None:
        index_var = _name(hs, "index_var", control.index_var)
    if (loop_var, index_var) == (control.loop_var, control.index_var):
        return hs.step
    return replace(hs.step, loop_control=replace(control, loop_var=loop_var, index_var=index_var))


def _name(hs: HostStep, key: str, written: str) -> str:
    if not is_template(written):
        return written
    rendered = hs.render(written)
    if not is_variable_name(rendered):
        raise FleetfixError(f"loop_control {key} must be a variable name, not {rendered!r}")
    return str(rendered)


def _item_vars(step: Step, index: int, item: Any, items: list[Any]) -> dict[str, Any]:
    control = step.loop_control
    names: dict[str, Any] = {control.loop_var: item, "ansible_loop_var": control.loop_var}
    if control.index_var is not None:
        names[control.index_var] = index
        names["ansible_index_var"] = control.index_var
    if control.extended:
        names["ansible_loop"] = _extended(index, items, allitems=control.extended_allitems)
    return names


def _extended(index: int, items: list[Any], *, allitems: bool) -> dict[str, Any]:
    """`loop_control: extended`: Ansible's ansible_loop for the item at `index`."""
    length = len(items)
    loop: dict[str, Any] = {
        "index": index + 1,
        "index0": index,
        "first": index == 0,
        "last": index + 1 == length,
        "length": length,
        "revindex": length - index,
        "revindex0": length - index - 1,
    }
    if allitems:
        loop["allitems"] = items
    if index + 1 < length:
        loop["nextitem"] = items[index + 1]
    if index > 0:
        loop["previtem"] = items[index - 1]
    return loop


def _breaks(hs: HostStep, item_vars: Mapping[str, Any]) -> bool:
    """`loop_control: break_when` holds after this item (with the item's variables). An error
    in it ends the loop too: no more items run on a condition nobody could read."""
    try:
        return hs.evaluate(hs.step.loop_control.break_when, item_vars)
    except Exception:
        return True


def _item_step(step: Step, index: int, item: Any) -> Step:
    """The copy of the step that runs one item: no loop, and its own journal key (place and
    value: an item list that changed before a resume never replays another item's verdict).
    It keeps `register` for its own until/changed_when/failed_when; only the whole step's
    verdict is registered and notifies (engine.steps._record), as in Ansible."""
    digest = hashlib.sha256(json.dumps(item, sort_keys=True, default=str).encode()).hexdigest()
    return replace(step, loop=None, item_key=f"{index}:{digest[:12]}")


def _label(hs: HostStep, item_vars: Mapping[str, Any], item: Any) -> str:
    label = hs.step.loop_control.label
    if label is None:
        return str(item)  # as Ansible shows it: {'name': 'gpu001'}, ['a', 'b'], 3
    try:
        return str(hs.ctx.templar.render(label, {**hs.variables, **item_vars}))
    except Exception:  # a label is for display only: show the template rather than fail
        return label


def _combined(
    hs: HostStep,
    results: list[StepResult],
    *,
    registered: list[dict[str, Any]] | None = None,
    failure: str | None = None,
    when_false: str | None = None,
) -> StepResult:
    """The step's verdict from its items' (Ansible's rules); `failure`: the loop itself failed."""
    step = hs.step
    statuses = [r.status for r in results]
    changed = any(r.changed for r in results)
    skipped = failure is None and all(s is Status.SKIPPED for s in statuses)
    failed = failure is not None or any(
        s in (Status.FAILED, Status.IGNORED, Status.UNREACHABLE) for s in statuses
    )
    if Status.UNREACHABLE in statuses:
        status = Status.UNREACHABLE
    elif failed:
        status = Status.IGNORED if step.ignore_errors else Status.FAILED
    elif skipped:
        status = Status.SKIPPED
    else:
        status = Status.CHANGED if changed else Status.OK
    message = failure or _message(results, failed=failed, skipped=skipped)
    data: dict[str, Any] = {
        "changed": changed,
        "skipped": skipped,
        "msg": message,
        "results": registered or [],
    }
    if failed:  # Ansible's loop result names failed only when it is true
        data["failed"] = True
    if when_false is not None:
        message = "Conditional result was False"
        data = {
            "changed": False,
            "false_condition": False if when_false == "False" else when_false,  # `when: false`
            "skip_reason": message,
            "skipped": True,
        }
    elif not results and failure is None:
        data["skipped_reason"] = "No items in the list"
    commands: tuple[CommandResult, ...] = tuple(c for r in results for c in r.commands)
    return StepResult(
        host=hs.state.name,
        step=step.name,
        status=status,
        changed=changed and status is not Status.SKIPPED,
        message=message,
        commands=commands,
        data=data,
        attempts=len(results),
        key=step.key,
    )


def _message(results: list[StepResult], *, failed: bool, skipped: bool) -> str:
    if not results:
        return "No items in the list"
    if failed:
        return "One or more items failed"
    if skipped:
        return "All items skipped"
    return "All items completed"
