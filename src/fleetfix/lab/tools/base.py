"""What every emulated tool receives and returns: the call context and the reply."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fleetfix.lab.drivers import DriverForms, forms
from fleetfix.lab.state import FleetState, NodeState


@dataclass(frozen=True, slots=True)
class ToolReply:
    """The tool's output and exit code; `hang` makes the tool never answer.

    `delay` is how long the real tool would take (the server waits before answering) and
    `effect` names a side effect the server performs after answering (`reboot`), and
    `script` is extra shell code the shim runs on the node (e.g. to write a report file).
    """

    stdout: str = ""
    stderr: str = ""
    rc: int = 0
    hang: bool = False
    delay: float = 0.0
    effect: str | None = None
    script: str = ""


class LabHooks(Protocol):
    """What tools may ask of the server beyond changing state."""

    def kill_process(self, node: NodeState, pid: int, signal_number: int) -> bool:
        """Signal one of the node's GPU placeholder processes; False if it is not one."""
        ...

    def reboot(self, node: NodeState) -> None:
        """Reboot `node` shortly after this tool answers (Slurm's RebootProgram, run by
        slurmctld for `scontrol reboot`, which may name any node)."""
        ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """One tool call: the node it runs on, the fleet, the caller, the time."""

    node: NodeState
    fleet: FleetState
    hooks: LabHooks
    now: float
    user: str

    @property
    def driver(self) -> str:
        """The node's driver version (the fleet's unless the scenario gives the node its own)."""
        return self.node.driver

    @property
    def forms(self) -> DriverForms:
        return forms(self.node.driver)


Handler = Callable[[ToolContext, Sequence[str]], ToolReply]


def fail(message: str, rc: int = 1) -> ToolReply:
    """A reply with a message on stderr (newline added) and a non-zero exit code."""
    return ToolReply(stderr=message if message.endswith("\n") else message + "\n", rc=rc)


def lines(*rows: str) -> str:
    """Rows joined with newlines, ending with one."""
    return "".join(row + "\n" for row in rows)
