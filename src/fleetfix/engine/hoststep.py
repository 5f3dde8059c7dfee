"""One step on one host in flight, and the primitives every step kind uses."""

from __future__ import annotations

import datetime
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fleetfix.engine.commands import run_command, step_timeout
from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.gpus import expected_gpus_of
from fleetfix.engine.variables import ActiveHosts, PlayScope
from fleetfix.events import ActionStarted, ActionTaken, HostObserved, Reconnecting
from fleetfix.playbook.model import Play, Step
from fleetfix.probes.base import Probe, verdict
from fleetfix.results import INTERNAL_PREFIX, CommandResult, registered_output
from fleetfix.secrets import NO_LOG_TEXT
from fleetfix.transport.pool import GAVE_UP, ConnectionLostError, Retry, StaleConnectionError


@dataclass(frozen=True, slots=True)
class StepEnv:
    """Per-play settings a step reads while running on a host."""

    play: Play
    scope: PlayScope
    inherited_vars: Mapping[str, Any] = field(default_factory=dict)

    def with_vars(self, extra: Mapping[str, Any]) -> StepEnv:
        return replace(self, inherited_vars={**self.inherited_vars, **extra})


EXPECTING_PROBE = "nvidia_smi"
"""The probe held to the node's expected GPU count when its step names none."""
ABSENT_KEY = "absent"
"""In a probe step's data: the tool the node does not have (the step is skipped)."""


@dataclass(slots=True)
class Outcome:
    """What a kind's handler found, before changed_when/failed_when are applied."""

    changed: bool = False
    failed: bool = False
    skipped: bool = False
    message: str = ""
    commands: list[CommandResult] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    left: tuple[str, str] | None = None
    """(kind, why) when the engine leaves the host for this run: owned, refused, deferred."""
    registers_command: bool = True
    """The registered value carries the last command's rc/stdout/stderr (shell, command,
    raw); a module's is only its own return values."""
    registers_msg: bool = True
    """The registered value carries `message` as `msg` (when there is one); False where
    Ansible's result has no msg (`debug: var=`, a skipped `when`): the message is fleetfix's
    own line for the reports."""


@dataclass(slots=True)
class HostStep:
    """The step being run, the host it runs on, and everything around them."""

    ctx: RunContext
    env: StepEnv
    state: HostState
    step: Step
    variables: dict[str, Any]

    @property
    def dry(self) -> bool:
        """Whether mutating work only plans here (--check, or check_mode on the step)."""
        if self.step.check_mode is not None:
            return self.step.check_mode
        if self.env.play.check_mode is not None:  # task > block > play > --check, as Ansible
            return self.env.play.check_mode
        return self.ctx.options.check

    def render(self, value: Any) -> Any:
        return plain_hosts(self.ctx.templar.render(value, self.variables))

    def evaluate(
        self, expressions: tuple[str, ...], extra: Mapping[str, Any] | None = None
    ) -> bool:
        """All expressions true (a list is an AND), seeing `extra` vars on top."""
        view = {**self.variables, **extra} if extra else self.variables
        return all(self.ctx.templar.evaluate(expr, view) for expr in expressions)

    def with_step(self, step: Step) -> HostStep:
        return replace(self, step=step)

    def action_event(
        self, kind: type[ActionStarted | ActionTaken], action: str, **fields: Any
    ) -> None:
        """Tell every consumer (first the journal) an action of this step starts or ended."""
        event = kind(
            host=self.state.name,
            step=self.step.name,
            key=self.step.key,
            action=action,
            **fields,
        )
        self.ctx.bus.emit(event)
        if isinstance(event, ActionTaken) and not fields.get("failed"):
            self.state.actions_done.append(action)

    async def command(
        self,
        command: str,
        *,
        timeout: float | None = None,
        probe: Probe[Any] | None = None,
        shown: str | None = None,
        read_only: bool | None = None,
    ) -> CommandResult:
        """Run a command for this step: delegation, become, environment and timeout applied.

        A read-only command (a probe's, by default) whose connection drops is run again on a
        fresh connection after each of the run's `reconnect_delays`. Any other command that was
        sent when its connection dropped may have run: it is not repeated, and raises
        ConnectionLostError saying so (an action's is settled by evidence: engine/remediate.py).
        """
        play, step, ctx = self.env.play, self.step, self.ctx
        become = step.become if step.become is not None else (play.become or ctx.options.become)
        user = step.become_user or play.become_user or ctx.options.become_user
        environment = {**play.environment, **step.environment}
        repeatable = probe is not None if read_only is None else read_only
        try:
            return await run_command(
                ctx,
                self.state,
                step,
                command,
                self.variables,
                timeout=timeout or step_timeout(ctx, step, play.timeout),
                env={str(k): str(self.render(v)) for k, v in environment.items()},
                become=bool(become),
                become_user=user,
                probe=probe,
                shown=shown,
                retry=self._retry() if repeatable else None,
            )
        except StaleConnectionError:
            raise  # nothing of it was sent
        except ConnectionLostError as exc:
            if repeatable:
                raise
            message = f"{exc.message}; it may have run, so it is not repeated: {GAVE_UP}"
            raise ConnectionLostError(exc.host, message) from exc

    def _retry(self) -> Retry:
        """The run's retry policy for a read-only command, each retry told at -v."""
        bus, step = self.ctx.bus, self.step.name

        def notice(host: str, tries: int, delay: float, exc: ConnectionLostError) -> None:
            bus.emit(Reconnecting(host=host, step=step, tries=tries, delay=delay, why=exc.message))

        return Retry(self.ctx.options.reconnect_delays, notice)

    async def probe(self, name: str, params: Mapping[str, Any]) -> Outcome:
        """Run a probe and parse its output with the step's `params` (where it arrives, on a
        host shard); typed facts are kept on the host state."""
        if name == EXPECTING_PROBE and params.get("expected_gpus") in (None, ""):
            # Held to the most GPUs anyone says the node has (knowledge/gpu_count.py), also
            # where the playbook names no count: a node short of one is never "count_ok".
            expected = expected_gpus_of(self.ctx, self.state)
            if expected is not None:
                params = {**params, "expected_gpus": expected.count}
        probe = self.ctx.probes.get(name).bind(params)
        # One copy of the command text for every host that runs it (about 1 KB each for
        # nvidia_smi, gpu_processes and services): the run keeps it with each step's result.
        result = await self.command(sys.intern(probe.command(params)), probe=probe)
        return self.parse_output(name, result, params)

    def parse_output(
        self, name: str, result: CommandResult, params: Mapping[str, Any] | None = None
    ) -> Outcome:
        """Parse one command's output with probe `name` and the step's `params`; a hung or
        failed tool is a failure, never an empty (healthy-looking) result."""
        probe = self.ctx.probes.get(name)
        outcome = Outcome(commands=[result], data={"facts": None})
        typed = None
        if result.timed_out:
            outcome.failed = True
            outcome.message = f"probe {name} timed out and was killed (hung tool?)"
        elif result.rc != 0 and not result.stdout.strip():
            outcome.failed = True
            detail = result.stderr.strip()[:200]
            outcome.message = f"probe {name} failed (rc={result.rc}): {detail}"
        else:
            # A host shard's worker may have parsed it already, where it arrived.
            parsed = result.parsed or verdict(probe, result.stdout, params or {})
            if parsed.absent is not None:
                # Not a fault of the node and not facts: skipped, as Ansible skips what does
                # not apply; a gate fed by it still refuses (engine/gates.py).
                outcome.skipped = True
                outcome.message = f"{parsed.absent} is not installed on this node"
                outcome.data[ABSENT_KEY] = parsed.absent
                forget_probe(self.state, name)
                return outcome
            if parsed.error is not None:
                outcome.failed = True
                outcome.message = parsed.error
            else:
                typed = self.state.probe_facts[name] = parsed.facts
                outcome.data["facts"] = parsed.data
        remember_probe(
            self.ctx, self.state, name, outcome.data["facts"], outcome.message, typed=typed
        )
        return outcome


def plain_hosts(value: Any) -> Any:
    """A rendered value with the play's host lists as the lists Ansible's are: the lazy
    ActiveHosts (`ansible_play_hosts`, `ansible_play_batch`) and the tuples the play keeps
    (`ansible_play_hosts_all`) made lists, so a set_fact keeps them as they are now and a
    debug prints them as lists. Containers without them are returned as they are."""
    if isinstance(value, ActiveHosts | tuple):
        return [plain_hosts(item) for item in value]
    if isinstance(value, list):
        items = [plain_hosts(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, dict):
        pairs = {key: plain_hosts(item) for key, item in value.items()}
        return pairs if any(pairs[k] is not value[k] for k in value) else value
    return value


def forget_probe(state: HostState, name: str) -> None:
    """The node does not have the probe's tool: neither facts nor a failure to count."""
    state.probe_facts.pop(name, None)
    state.probe_data.drop(name)
    state.probe_failures.pop(name, None)


def remember_probe(
    ctx: RunContext,
    state: HostState,
    name: str,
    facts: Mapping[str, Any] | None,
    failure: str,
    *,
    typed: Any = None,
) -> None:
    """Keep a probe's latest verdict on the host (the end-of-run health check reads it) and
    tell the journal what outlives the run: GPUs seen, whether Slurm has the node in service.
    `typed`: the typed facts `facts` is the data of, kept instead of it (ProbeData)."""
    if facts is None:
        state.probe_failures[name] = failure or f"probe {name} failed"
        state.probe_data.drop(name)
        return
    state.probe_failures.pop(name, None)
    state.probe_data.keep(name, facts if typed is None else typed)
    if name == "nvidia_smi" and isinstance(facts.get("gpu_count"), int):
        # A GPU that fell off the bus is still in the node: it counts as one the node has.
        count = facts["gpu_count"] + len(facts.get("lost_gpus") or ())
        state.gpus_seen = max(state.gpus_seen or 0, count)
        ctx.bus.emit(HostObserved(host=state.name, gpu_count=count))
    elif name == "pci_gpus" and isinstance(facts.get("count"), int) and facts["count"]:
        # A GPU the driver could not bring up is still on the bus: one the node has.
        state.gpus_seen = max(state.gpus_seen or 0, facts["count"])
        ctx.bus.emit(HostObserved(host=state.name, gpu_count=facts["count"]))
    elif name == "slurm_node":
        out = any(facts.get(flag) for flag in ("drained", "draining", "down"))
        ctx.bus.emit(HostObserved(host=state.name, in_service=not out))


def registered(
    outcome: Outcome, attempts: int | None = None, *, no_log: bool = False
) -> dict[str, Any]:
    """The value `register:` stores, key for key as Ansible's: changed and failed, `skipped`
    only when skipped, `msg` where there is one, `attempts` only when given (a retried step),
    the last command's cmd/rc/stdout/stderr/delta for command kinds, plus the kind's data."""
    value: dict[str, Any] = {"changed": outcome.changed}
    if outcome.skipped:  # Ansible's skipped result has no `failed`
        value["skipped"] = True
    else:
        value["failed"] = outcome.failed
    if outcome.message and outcome.registers_msg:
        value["msg"] = outcome.message
    if attempts is not None:
        value["attempts"] = attempts
    if outcome.commands and outcome.registers_command:
        last = outcome.commands[-1]
        value.update(
            cmd=last.command,
            rc=last.rc,
            stdout=registered_output(last.stdout),
            stderr=registered_output(last.stderr),
            delta=ansible_delta(last.duration),
        )
        if last.timed_out:
            value["timed_out"] = True
    value.update(outcome.data)
    if no_log:
        for key in ("cmd", "stdout", "stderr", "msg"):
            if key in value:
                value[key] = NO_LOG_TEXT
        if isinstance(value.get("ansible_facts"), dict):  # set_fact: the names, not the values
            value["ansible_facts"] = dict.fromkeys(value["ansible_facts"], NO_LOG_TEXT)
        value["censored"] = NO_LOG_TEXT  # as Ansible shows a no_log result
    return value


def ansible_delta(seconds: float) -> str:
    """A duration as Ansible's command module registers it: `0:00:00.003456`."""
    return str(datetime.timedelta(seconds=seconds))


def ansible_times(duration: float) -> dict[str, str]:
    """`start` and `end` of a command that just ended, as Ansible's command module registers
    them (local time, `2026-12-07 03:09:46.123456`)."""
    end = datetime.datetime.now()
    start = end - datetime.timedelta(seconds=duration)
    return {"start": start.strftime(TIME_FORMAT), "end": end.strftime(TIME_FORMAT)}


TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def with_lines(value: Mapping[str, Any]) -> dict[str, Any]:
    """A registered value as `register:` exposes it: `stdout_lines`/`stderr_lines` next to
    the stdout/stderr it has, without the console's internal keys. Only built for steps that
    register: a step result keeps the text once, not twice."""
    shown = {k: v for k, v in value.items() if not k.startswith(INTERNAL_PREFIX)}
    for key in ("stdout", "stderr"):
        if key in shown:
            text = shown[key]
            shown[f"{key}_lines"] = text.splitlines() if isinstance(text, str) else []
    items = shown.get("results")
    if isinstance(items, list):  # a loop's items (a replayed one has them without lines)
        shown["results"] = [with_lines(i) if isinstance(i, Mapping) else i for i in items]
    return shown


def command_line(kind_is_command: bool, rendered: Mapping[str, Any]) -> str:
    """The command line a shell/command step runs (argv quoted for `command`, chdir folded in)."""
    if kind_is_command:
        argv = rendered.get("argv") or shlex.split(str(rendered["cmd"]))
        cmd = shlex.join(str(a) for a in argv)
    else:
        cmd = str(rendered["cmd"])
    chdir = rendered.get("chdir")
    return f"cd {shlex.quote(str(chdir))} && {cmd}" if chdir else cmd
