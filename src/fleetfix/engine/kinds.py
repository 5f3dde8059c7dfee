"""What each step kind does on a host: shell/command, probe, action, debug, set_fact, ..."""

from __future__ import annotations

import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2

from fleetfix.engine.commands import announce_planned
from fleetfix.engine.disruptive import command_action, disruptive_command
from fleetfix.engine.hoststep import HostStep, Outcome, ansible_times, command_line
from fleetfix.engine.inventory_kinds import add_host_step, group_by_step, refresh_inventory
from fleetfix.engine.parking import PARK_KEY, PARKED, parked_from
from fleetfix.engine.remediate import run_action, run_command_action
from fleetfix.engine.verdict import left
from fleetfix.errors import FleetfixError
from fleetfix.playbook.includes import candidates
from fleetfix.playbook.model import StepKind
from fleetfix.results import DEBUG_KEY, META_KEY, VERBOSE_KEY, WARNINGS_KEY, CommandResult
from fleetfix.verdicts import LeftKind

KindHandler = Callable[[HostStep], Awaitable[Outcome]]


def command_outcome(result: CommandResult, *, changed: bool) -> Outcome:
    """A finished command as an outcome: non-zero rc or a timeout fails the step."""
    outcome = Outcome(changed=changed, commands=[result])
    if result.timed_out:
        outcome.failed = True
        outcome.message = "command timed out and was killed"
    elif result.rc != 0:
        outcome.failed = True
        outcome.message = "non-zero return code"  # Ansible's msg; rc is a key of its own
    return outcome


async def _shell(hs: HostStep) -> Outcome:
    rendered = hs.render(dict(hs.step.args))
    command = command_line(hs.step.kind is StepKind.COMMAND, rendered)
    guard = await _creates_removes(hs, rendered)
    if guard is not None:
        return guard
    what = disruptive_command(command)
    if what is not None:  # a reboot, driver unload or GPU reset: an action's gates
        return _leaving(
            hs, await run_command_action(hs, command_action(command, what), KIND_HANDLERS)
        )
    if hs.dry:
        announce_planned(hs.ctx, hs.state, hs.step, command)
        return Outcome(
            skipped=True,
            message=f"check mode: would run: {command}",
            data=_not_run(hs.step.kind is StepKind.COMMAND, rendered),
        )
    result = await hs.command(command)
    outcome = command_outcome(result, changed=True)
    # Registered as Ansible's command module has it: cmd as argv (command) or the line
    # (shell), msg ("" when it went well), start and end next to delta.
    cmd: Any = str(rendered["cmd"]) if "cmd" in rendered else command
    if hs.step.kind is StepKind.COMMAND:
        cmd = [str(a) for a in rendered.get("argv") or shlex.split(str(rendered["cmd"]))]
    outcome.data.update(cmd=cmd, msg=outcome.message, **ansible_times(result.duration))
    return outcome


def _not_run(kind_is_command: bool, rendered: Mapping[str, Any]) -> dict[str, Any]:
    """What ansible-core's command module registers under --check: skipped, nothing run."""
    if kind_is_command:
        cmd: Any = list(rendered.get("argv") or shlex.split(str(rendered["cmd"])))
    else:
        cmd = str(rendered["cmd"])
    return {
        "cmd": cmd,
        "msg": "Command would have run if not in check mode",
        "failed": False,
        "rc": 0,
        "start": None,
        "end": None,
        "delta": None,
        "stdout": "",
        "stderr": "",
        "stdout_lines": [],
        "stderr_lines": [],
    }


async def _creates_removes(hs: HostStep, rendered: Mapping[str, Any]) -> Outcome | None:
    """Ansible's creates/removes: not run when the path already exists / is already gone;
    `ok` with Ansible's msg and stdout, as ansible-core's command module reports it."""
    for key, skip_if_exists in (("creates", True), ("removes", False)):
        path = rendered.get(key)
        if not path:
            continue
        exists = (await hs.command(f"test -e {shlex.quote(str(path))}")).rc == 0
        if exists == skip_if_exists:
            verb = "exists" if exists else "does not exist"
            did = "Would" if hs.dry else "Did"
            return Outcome(
                message=f"{did} not run command since '{path}' {verb}",
                data={"rc": 0, "stdout": f"skipped, since {path} {verb}", "stderr": ""},
                registers_command=False,
            )
    return None


async def _probe(hs: HostStep) -> Outcome:
    params = hs.render(dict(hs.step.args.get("params") or {}))
    return await hs.probe(str(hs.step.args["name"]), params)


def _not_a_name(value: Any) -> str:
    """ansible-core 2.19's words for a `var` whose template gave no variable name."""
    kind = type(value).__name__
    return (
        f"argument 'var' is of type {kind} and we were unable to convert to"
        f" _check_type_str_no_conversion: '{value}' is not a string and conversion is not allowed"
    )


async def _debug(hs: HostStep) -> Outcome:
    """Ansible's debug: the result is `{"msg": value}` or `{var: value}` (the value as it
    is, not its text), printed whole (VERBOSE_KEY); `verbosity: N` skips it below -v x N. An
    undefined `var` prints Ansible 2.19's placeholder and a warning; the host stays ok."""
    args = hs.step.args
    verbosity = int(args.get("verbosity") or 0)
    if verbosity > hs.ctx.options.verbosity:
        return Outcome(
            skipped=True,
            message="Verbosity threshold not met.",
            data={"skipped_reason": "Verbosity threshold not met.", "failed": False},
            registers_msg=False,
        )
    if "var" in args:
        name = str(args["var"])
        if "{{" in name:  # Ansible templates the argument, then evaluates what it names
            rendered = hs.render(name)
            if not isinstance(rendered, str):
                return Outcome(failed=True, message=_not_a_name(rendered))
            name = rendered
        data: dict[str, Any] = {VERBOSE_KEY: True, DEBUG_KEY: True}
        try:
            value = hs.render("{{ " + name + " }}")
        except FleetfixError as exc:
            if not isinstance(exc.__cause__, jinja2.UndefinedError):
                raise
            value = f"<< error 1 - {exc.__cause__} >>"
            data[WARNINGS_KEY] = [
                f"Encountered 1 template error.\nerror 1 - {exc.__cause__}\n"
                f"Origin: {hs.step.position}"
            ]
        shown = hs.ctx.bus.redactor.redact(value)
        return Outcome(
            message=f"{name}: {shown!r}", data={name: value, **data}, registers_msg=False
        )
    value = hs.render(args.get("msg", "Hello world!"))
    return Outcome(message=str(value), data={"msg": value, VERBOSE_KEY: True, DEBUG_KEY: True})


async def _set_fact(hs: HostStep) -> Outcome:
    values = hs.render(dict(hs.step.args))
    hs.state.facts.update(values)
    return Outcome(data={"ansible_facts": values})


async def _assert(hs: HostStep) -> Outcome:
    """Ansible's assert: the first condition that does not hold fails the step, and the result
    names it (`assertion`, `evaluated_to: false`); msg is fail_msg (or msg), else "Assertion
    failed". A pass registers success_msg. Unless `quiet`, the result is printed whole."""
    args = hs.step.args
    that = args.get("that", ())
    conditions = (that,) if isinstance(that, str) else tuple(str(c) for c in that)
    shown = {} if args.get("quiet") else {VERBOSE_KEY: True}
    for condition in conditions:
        if not hs.evaluate((condition,)):
            message = hs.render(args.get("fail_msg") or args.get("msg") or "Assertion failed")
            data = {"assertion": condition, "evaluated_to": False, "msg": message, **shown}
            return Outcome(failed=True, message=str(message), data=data)
    success = hs.render(args.get("success_msg", "All assertions passed"))
    return Outcome(message=str(success), data={"msg": success, **shown})


async def _fail(hs: HostStep) -> Outcome:
    message = hs.render(hs.step.args.get("msg", "Failed as requested from task"))
    return Outcome(failed=True, message=str(message))


async def _meta(hs: HostStep) -> Outcome:
    """A meta step on one host (flush_handlers, end_play, end_batch and clear_host_errors act
    on the batch and are consumed by the play runner). Its result is Ansible's `msg`, never
    printed (META_KEY) and never counted in the recap (engine.steps._record)."""
    name = hs.step.args.get("name")
    quiet = {META_KEY: True}
    if name == "end_host":
        hs.state.ended = True
        return Outcome(message=f"ending play for {hs.state.name}", data=quiet)
    if name == "end_role":  # the rest of this use of the role is skipped for the host
        hs.env.scope.roles.end(hs.state.name, hs.step)
        role = hs.step.role.name if hs.step.role is not None else ""
        return Outcome(message=f"ending role {role} for {hs.state.name}", data=quiet)
    if name == "refresh_inventory":
        return refresh_inventory(hs, quiet)
    if name == "clear_facts":  # Ansible's fact cache only: set_fact and register stay
        hs.state.gathered.clear()
        return Outcome(message="facts cleared", data=quiet)
    if name == "reset_connection":  # the next command opens a fresh connection, as Ansible
        await hs.ctx.connections.drop(hs.state.name)
        return Outcome(message="reset connection", data=quiet)
    return Outcome(message=str(name), data=quiet)


async def _action(hs: HostStep) -> Outcome:
    return _leaving(hs, await run_action(hs, KIND_HANDLERS))


async def _module(hs: HostStep) -> Outcome:
    # Imported here: the modules build on engine.hoststep and engine.remediate, so a module
    # imported at the top would make `import fleetfix.modules.copy` (before the engine) a cycle.
    from fleetfix.modules.registry import run_module  # noqa: PLC0415

    # reboot runs fleetfix's reboot action: like any action it may leave the host.
    return _leaving(hs, await run_module(hs, KIND_HANDLERS))


def _leaving(hs: HostStep, outcome: Outcome) -> Outcome:
    if outcome.left is not None:
        kind, reason = outcome.left
        leave(hs, kind, reason, outcome.data.get(PARK_KEY))
        outcome.data[LEFT_KEY] = {"kind": kind, "reason": reason}  # journaled: a resume replays it
    return outcome


async def _include(hs: HostStep) -> Outcome:
    """The include itself, on this host: which file (or role) it includes. The file is read
    here, so one that cannot be read fails this host's include; the play runner then runs
    the included steps (`included_steps`)."""
    if hs.step.kind is StepKind.INCLUDE_ROLE:
        role = str(hs.step.args["role"])
        if hs.step.args.get("missing"):  # Ansible fails the include, not the load
            return _unloaded(f"the role '{role}' was not found", role)
        from fleetfix.engine.role_includes import included_role, run_time_role  # noqa: PLC0415

        if "run_time" in hs.step.args:  # a templated name: this host's role, read now
            return run_time_role(hs)
        return included_role(hs)
    name = str(hs.render(hs.step.args["file"]))
    playbook_dir = Path(str(hs.variables.get("playbook_dir", ".")))
    role_dir = Path(hs.step.role.path) if hs.step.role is not None else None
    places = candidates(name, hs.step.position.file, playbook_dir, role_dir)
    path = next((p for p in places if p.is_file()), None)
    if path is None:
        looked = ", ".join(str(p.parent) for p in places)
        return _unloaded(f"Could not find or access '{name}' (looked in {looked})", name)
    if "steps" not in hs.step.args or name != hs.step.args["file"]:
        loader = hs.ctx.options.task_loader
        if loader is None:
            return Outcome(failed=True, message=f"include_tasks {name}: no task loader in this run")
        try:
            loader(str(path))
        except FleetfixError as exc:
            return _unloaded(f"include_tasks {name}: {exc}", name)
    return Outcome(data={INCLUDED_KEY: str(path.resolve())})


INCLUDED_KEY = "included"
"""In an include's registered result: the file (or role) it included on this host."""
UNLOADED_KEY = "reason"
"""In a failed include's result: why its file (or role) could not be read (ansible-core's
`reason`); such a failure counts as failed even when a rescue catches it (engine/play.py)."""


def _unloaded(reason: str, name: str) -> Outcome:
    """An include whose file (or role) could not be read, as ansible-core reports it."""
    return Outcome(failed=True, message=reason, data={"include": name, UNLOADED_KEY: reason})


LEFT_KEY = "fleetfix_left"
"""In an action step's registered result: the engine left the host there (kind, reason)."""


def leave(hs: HostStep, kind: str, reason: str, parked: Mapping[str, Any] | None = None) -> None:
    """The engine leaves this host for the rest of the play, and the run says why (and exits
    non-zero for it). A deferred host frees its place under the topology caps. A parked one
    (PARKED) only leaves its batch: it stays out of service and the play looks at it again
    (engine/parking.py); a resumed run replaying its park keeps the journaled deadline."""
    ctx, host = hs.ctx, hs.state.name
    if kind == PARKED:
        journaled = ctx.options.resume.steps.get((host, hs.step.key))
        if parked is None and journaled is not None:
            parked = journaled.data.get(PARK_KEY)
        park = parked_from(hs, parked)
        if park is not None and ctx.parking.park(park, time.time()):
            hs.state.ended = True
            return
        kind = LeftKind.DEFERRED  # its wait is over already
        reason = park.deferred() if park is not None else reason.replace(PARKED, kind, 1)
    hs.state.ended = True
    ctx.result.left[host] = reason
    left(ctx, host, LeftKind(kind), reason)
    if kind == LeftKind.DEFERRED and not hs.dry:
        ctx.safety.defer(host)


KIND_HANDLERS: dict[StepKind, KindHandler] = {
    StepKind.SHELL: _shell,
    StepKind.COMMAND: _shell,
    StepKind.PROBE: _probe,
    StepKind.ACTION: _action,
    StepKind.DEBUG: _debug,
    StepKind.SET_FACT: _set_fact,
    StepKind.ASSERT: _assert,
    StepKind.FAIL: _fail,
    StepKind.META: _meta,
    StepKind.ADD_HOST: add_host_step,
    StepKind.GROUP_BY: group_by_step,
    StepKind.MODULE: _module,
    StepKind.INCLUDE_TASKS: _include,
    StepKind.INCLUDE_ROLE: _include,
}
"""Blocks are not here: the play runner walks block/rescue/always itself."""
