"""Running one command for a step on a host: delegation, become, environment, events."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fleetfix.engine.context import HostState, RunContext
from fleetfix.events import CommandRan
from fleetfix.playbook.model import Step
from fleetfix.probes.base import Probe, verdict
from fleetfix.results import CommandResult
from fleetfix.secrets import NO_LOG_TEXT
from fleetfix.transport.pool import Retry


def become_wrap(command: str, user: str) -> str:
    """Run `command` as `user` through sudo without prompting (Ansible's default become)."""
    return f"sudo -n -H -u {shlex.quote(user)} -- /bin/sh -c {shlex.quote(command)}"


def redact(result: CommandResult) -> CommandResult:
    """The same result with its command and output hidden (no_log)."""
    return CommandResult(
        NO_LOG_TEXT, result.rc, "", "", result.duration, timed_out=result.timed_out
    )


def step_timeout(ctx: RunContext, step: Step, play_timeout: float | None) -> float:
    """Every command has a timeout: the step's, else the play's, else the run's default."""
    for value in (step.timeout, play_timeout):
        if value is not None and value > 0:
            return value
    return ctx.options.command_timeout


def target_of(step: Step, state: HostState, variables: Mapping[str, Any], ctx: RunContext) -> str:
    """The host a step's commands run on: delegate_to (rendered) or the host itself."""
    if step.delegate_to is None:
        return state.name
    return str(ctx.templar.render(step.delegate_to, variables))


async def run_command(
    ctx: RunContext,
    state: HostState,
    step: Step,
    command: str,
    variables: Mapping[str, Any],
    *,
    timeout: float,
    env: Mapping[str, str],
    become: bool,
    become_user: str,
    probe: Probe[Any] | None = None,
    shown: str | None = None,
    retry: Retry | None = None,
) -> CommandResult:
    """Run one command on the step's target; raises UnreachableError if it cannot be reached.
    With `retry` (read-only commands), a connection that drops under it is replaced and the
    command run again (transport/pool.py).
    `shown` is what the journal and console are told ran, when the command carries a payload
    that must not be kept (a file's content on its way to the node).

    With `probe`, a connection that can parse where the command ran (a host shard) returns
    the verdict in `parsed`; the caller parses itself when it is absent."""
    target = target_of(step, state, variables, ctx)
    target_vars = variables if target == state.name else vars_for(ctx, target)
    spec = ctx.spec_factory(target, target_vars)
    connection = await ctx.connections.get(spec)
    remote = become_wrap(command, become_user) if become else command
    if probe is not None:  # parsed where the output arrives when that is a host shard
        result = await connection.run_probe(
            remote, probe, timeout=timeout, env=dict(env) or None, retry=retry
        )
    else:
        result = await connection.run(remote, timeout=timeout, env=dict(env) or None, retry=retry)
    parsed = result.parsed
    if probe is not None and parsed is None and not result.timed_out and result.stdout.strip():
        parsed = verdict(probe, result.stdout)  # parsed where it arrived: here
    result = CommandResult(
        command, result.rc, result.stdout, result.stderr, result.duration, result.timed_out, parsed
    )
    told = replace(result, command=shown) if shown is not None else result
    told = redact(told) if step.no_log else replace(told, parsed=None)
    read = parsed is not None and parsed.error is None
    ctx.bus.emit(CommandRan(host=state.name, step=step.name, result=told, read_into_facts=read))
    return result


def announce_planned(ctx: RunContext, state: HostState, step: Step, command: str) -> None:
    """Tell every consumer what a dry run would have run."""
    shown = NO_LOG_TEXT if step.no_log else command
    planned = CommandResult(shown, None, "", "")
    ctx.bus.emit(CommandRan(host=state.name, step=step.name, result=planned, planned_only=True))


def vars_for(ctx: RunContext, host: str) -> Mapping[str, Any]:
    """Connection vars of a delegate: from the inventory when it is there, else just its name."""
    try:
        return ctx.inventory.host_vars(host)
    except KeyError:
        return {"ansible_host": host}
