"""The probe contract: a read-only command plus a pure parser from text to typed facts.

`Probe.read` (and `verdict`, which wraps it) is the one way any output becomes facts: the
engine's probe step, a host shard's worker, `fleetfix parse`, `fleetfix healthcheck` and the
notification evidence all go through it. It removes terminal escapes once, for every probe
(`nvidia-smi topo -m` underlines its header even into a pipe), and hands the step's parameters
to a parser that reads them, as pyinfra gives a fact its arguments in both `command()` and
`process()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.plain import to_data
from fleetfix.probes.text import strip_terminal_escapes
from fleetfix.results import ParsedOutput

F = TypeVar("F")

__all__ = ["NO_PARAMS", "Probe", "to_data", "verdict"]

NO_PARAMS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Probe(Generic[F]):
    """A named probe: `command` builds the shell command from step parameters,
    `parse` turns the command's stdout into facts (raises ProbeParseError on garbage).

    The parser does no I/O, so every captured sample is a test case. Output becomes facts
    through `read` (or `verdict`), never by calling `parse` directly.
    """

    name: str
    summary: str
    command: Callable[[Mapping[str, Any]], str]
    parse: Callable[[str], F]
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Accepted step parameters and what each means; anything else is refused at load."""
    parse_with: Callable[[str, Mapping[str, Any]], F] | None = None
    """The parser, for a probe whose facts depend on the step's parameters (nvidia_smi's
    `expected_gpus`); None when `parse` needs only the text."""
    bound: Mapping[str, Any] = dataclasses.field(default_factory=lambda: NO_PARAMS)
    """The parameters of one run of the probe (`bind`): what its output is read with when
    it is parsed where it arrived (a host shard's worker)."""

    def bind(self, params: Mapping[str, Any]) -> Probe[F]:
        """This probe for one run with `params`: its output is read with them."""
        return dataclasses.replace(self, bound=MappingProxyType(dict(params)))

    def read(self, text: str, params: Mapping[str, Any] | None = None) -> F:
        """Facts from `text`, with `params` (default: the bound ones).

        Raises:
            ProbeParseError: the text is not this probe's output (ToolNotInstalled: the
                node does not have the tool).
        """
        clean = strip_terminal_escapes(text)
        if self.parse_with is None:
            return self.parse(clean)
        return self.parse_with(clean, self.bound if params is None else params)


def verdict(probe: Probe[Any], text: str, params: Mapping[str, Any] | None = None) -> ParsedOutput:
    """A probe's verdict on `text` (read with `params`, default the bound ones): its typed
    facts (their data view is made when read: ParsedOutput.data), or why parsing failed.
    Where output becomes facts, in the main process or in a host shard's worker."""
    try:
        facts = probe.read(text, params)
    except ToolNotInstalled as exc:
        return ParsedOutput(error=str(exc), absent=exc.tool)
    except ProbeParseError as exc:
        return ParsedOutput(error=str(exc))
    return ParsedOutput(facts=facts)
