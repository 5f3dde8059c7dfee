"""The whole fleetfix exception tree; every error carries its evidence.

    FleetfixError
    ├── InputError                 bad user input found before anything runs (exit 1)
    │   ├── InputErrors            several of them, found in one pass
    │   ├── InventoryError         inventory file, group_vars, host_vars
    │   ├── PatternError           host pattern in `hosts:` or `--limit`
    │   ├── PlaybookError          playbook YAML, keywords, step arguments
    │   └── LabError               lab scenario or lab control
    ├── UsageError                 bad command-line options (exit 5)
    ├── ConditionError             a Jinja2 condition or template failed to evaluate
    ├── ProbeParseError            tool output a probe parser did not understand
    │   ├── ToolNotInstalled       the tool is not on the node (no Slurm, IB, DCGM there)
    │   └── JobNotFound            Slurm (scontrol and sacct) knows no such job
    ├── KnowledgeError             the shipped Xid catalog is broken, or a value it cannot read
    └── TransportError             talking to one host failed
        ├── UnreachableError       could not connect or authenticate (exit 4)
        │   └── HostKeyError       host key unknown or mismatched
        └── CommandTimeout         a remote command ran past its timeout and was killed

Foreign exceptions (asyncssh, jinja2, yaml) are translated at the module boundary that
meets them, with `raise ... from exc`, so no foreign type crosses a fleetfix API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourcePosition:
    """A place in a user's file: 1-based line and column."""

    file: str
    line: int
    column: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class FleetfixError(Exception):
    """Base of every error fleetfix raises on purpose."""


class InputError(FleetfixError):
    """User input (inventory, playbook, pattern, scenario) is wrong; carries where."""

    def __init__(
        self,
        message: str,
        position: SourcePosition | None = None,
        *,
        source_line: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.position = position
        self.source_line = source_line
        self.hint = hint

    def render(self) -> str:
        """The message as shown to an operator: location, text, the line, a caret, a hint."""
        head = f"{self.position}: {self.message}" if self.position else self.message
        parts = [head]
        if self.source_line is not None and self.position is not None:
            parts.append(f"    {self.source_line.rstrip()}")
            parts.append("    " + " " * max(self.position.column - 1, 0) + "^")
        if self.hint:
            parts.append(f"    {self.hint}")
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.render()


class InputErrors(InputError):
    """Several input errors found in one pass, shown together so one edit fixes them all."""

    def __init__(self, errors: Sequence[InputError]) -> None:
        super().__init__(f"{len(errors)} errors")
        self.errors = tuple(errors)

    def render(self) -> str:
        shown = "\n".join(error.render() for error in self.errors)
        return f"{shown}\n{len(self.errors)} errors; nothing was run"


class InventoryError(InputError):
    """An inventory source could not be read."""


class PatternError(InputError):
    """A host pattern is malformed."""


class PlaybookError(InputError):
    """A playbook is malformed or names something that does not exist."""


class LabError(InputError):
    """A lab scenario is malformed or the lab cannot be controlled."""


class UsageError(FleetfixError):
    """Command-line options are wrong or contradict each other."""


class ConditionError(FleetfixError):
    """A condition or template could not be evaluated for a host."""

    def __init__(self, message: str, expression: str) -> None:
        super().__init__(f"{message} (in: {expression})")
        self.expression = expression


class ProbeParseError(FleetfixError):
    """Tool output did not look like what the tool prints; never read as healthy."""

    def __init__(self, probe: str, reason: str, text: str, *, line: int | None = None) -> None:
        self.probe = probe
        self.reason = reason
        self.line = line
        self.excerpt = _excerpt(text, line)
        where = f" at line {line}" if line is not None else ""
        super().__init__(f"{probe}: {reason}{where}: {self.excerpt!r}")


class ToolNotInstalled(ProbeParseError):
    """The probe's tool is not installed on the node (no Slurm, no InfiniBand, no DCGM there):
    not a fault of the node, and not facts either, so a gate fed by them refuses."""

    def __init__(self, probe: str, tool: str, text: str) -> None:
        super().__init__(probe, f"{tool} is not installed on this node", text)
        self.tool = tool


class JobNotFound(ProbeParseError):
    """Neither slurmctld nor accounting knows the job (`Invalid job id specified`, no sacct
    row): a wrong id, or one older than accounting keeps; not facts, and not a fault."""

    def __init__(
        self, probe: str, job: str | None, said: str, text: str, *, line: int | None = None
    ) -> None:
        named = f"job {job}" if job else "the job"
        super().__init__(probe, f"Slurm does not know {named} ({said})", text, line=line)
        self.job = job


class KnowledgeError(FleetfixError):
    """The shipped knowledge (Xid catalog) is broken, or a reported value is unknown to it."""


class TransportError(FleetfixError):
    """A transport failed to talk to a host."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.message = message


class UnreachableError(TransportError):
    """The host could not be reached or refused our credentials."""


class HostKeyError(UnreachableError):
    """The host's key is not known or does not match known_hosts."""


class CommandTimeout(TransportError):
    """A command ran past its timeout; the remote process was killed."""

    def __init__(self, host: str, command: str, timeout: float) -> None:
        super().__init__(host, f"command timed out after {timeout:g}s and was killed: {command}")
        self.command = command
        self.timeout = timeout


_CHARACTER_NAMES = {0x00: "NUL byte", 0x1B: "escape character U+001B (ESC)"}


def describe_character(character: str) -> str:
    """An operator's name for a character that cannot be shown: `control character U+0007`."""
    code = ord(character)
    if code in _CHARACTER_NAMES:
        return _CHARACTER_NAMES[code]
    if 0xDC80 <= code <= 0xDCFF:
        return f"byte 0x{code - 0xDC00:02X} that is not UTF-8"
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return f"control character U+{code:04X}"
    return f"character U+{code:04X}"


def _excerpt(text: str, line: int | None, width: int = 160) -> str:
    """A short piece of `text` around `line` (1-based), for error messages."""
    lines = text.splitlines()
    if line is not None and 1 <= line <= len(lines):
        snippet = lines[line - 1]
    else:
        snippet = text.strip()[:width]
    return snippet[:width]
