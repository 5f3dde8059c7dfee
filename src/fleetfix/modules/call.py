"""One module on one host: its resolved parameters and the host step it runs in.

Modules build their commands from these primitives; every command goes through the step's
transport (become, environment, delegation and timeout applied) and is journaled as the step's
commands. A module's registered value is Ansible's return values (`Outcome.data`), not the
last command's stdout: `registers_command` is off unless the module is a command (raw).
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fleetfix.engine.hoststep import HostStep, Outcome
from fleetfix.modules.spec import ModuleSpec
from fleetfix.results import CommandResult

KindHandlers = Mapping[Any, Callable[[HostStep], Awaitable[Outcome]]]


class ModuleFailed(Exception):
    """A module cannot go on on this host; the step fails with this message (and data)."""

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.data = data


@dataclass(slots=True)
class ModuleCall:
    """What a module's coroutine gets: the parameters by canonical name, coerced, defaults
    filled in; the host step; the kind handlers (reboot runs fleetfix's reboot action)."""

    hs: HostStep
    spec: ModuleSpec
    params: dict[str, Any]
    handlers: KindHandlers
    commands: list[CommandResult] = field(default_factory=list)

    @property
    def dry(self) -> bool:
        """--check (or check_mode: true): report what would change, change nothing."""
        return self.hs.dry

    @property
    def diffing(self) -> bool:
        """--diff (or `diff:` on the step): a module's `diff` result holds the texts before and
        after, as Ansible's module._diff."""
        step = self.hs.step.diff
        return self.hs.ctx.options.diff if step is None else step

    @property
    def host(self) -> str:
        return self.hs.state.name

    async def run(
        self, command: str, *, timeout: float | None = None, shown: str | None = None
    ) -> CommandResult:
        """Run a command for this module and keep it with the step's commands (as `shown`,
        when the command carries content the journal must not keep)."""
        result = await self.hs.command(command, timeout=timeout, shown=shown)
        self.commands.append(replace(result, command=shown) if shown is not None else result)
        return result

    async def checked(
        self, command: str, what: str, *, timeout: float | None = None, shown: str | None = None
    ) -> str:
        """Run a command that must succeed; its stdout. A failure fails the module, saying
        what it was doing and what the command said.

        Raises:
            ModuleFailed: non-zero exit or timeout.
        """
        result = await self.run(command, timeout=timeout, shown=shown)
        if result.timed_out:
            raise ModuleFailed(f"{what}: timed out")
        if result.rc != 0:
            said = (result.stderr.strip() or result.stdout.strip())[:300]
            raise ModuleFailed(f"{what}: {said or f'exit status {result.rc}'}", rc=result.rc)
        return result.stdout

    def outcome(self, *, changed: bool = False, message: str = "", **data: Any) -> Outcome:
        """A finished module: Ansible's return values in `data`."""
        return Outcome(
            changed=changed,
            message=message,
            commands=list(self.commands),
            data=data,
            registers_command=False,
        )

    def failure(self, message: str, **data: Any) -> Outcome:
        outcome = self.outcome(message=message, **data)
        outcome.failed = True
        return outcome


def quoted(path: str) -> str:
    """A path as one shell word."""
    return shlex.quote(path)
