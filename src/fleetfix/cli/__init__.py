"""Command line: argument parsing and exit codes; the only place that prints or exits.

Exit codes (README lists them too; scripts and timers depend on them):
  0 all ok                      1 error before/outside hosts (bad playbook, inventory, no hosts)
  2 some host failed            4 some host unreachable
  5 bad options                 6 aborted by a safety gate (max_fail_percentage, ...)
  7 --check found changes (with --detailed-exitcode)
  99 interrupted (Ctrl-C)       250 internal error
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from fleetfix import __version__
from fleetfix.cli.heap import collector_paused, frozen_heap
from fleetfix.cli.streams import tolerant_output
from fleetfix.errors import FleetfixError, InputError, UsageError
from fleetfix.interrupt import ctrl_c_raises, exit_on_ctrl_c, forget_caught_ctrl_c
from fleetfix.plugins import UnknownPluginError
from fleetfix.results import Outcome

EXIT_CODES = __doc__.split("Exit codes", 1)[1] if __doc__ else ""

Command = Callable[[argparse.Namespace], int]


@dataclass(frozen=True, slots=True)
class Commands:
    """The subcommands one module adds (`adder(sub)`), each with its one-line help: the top
    level lists them all without importing the modules, whose imports (the engine, the
    journal, asyncssh, rich) take most of a second; only the command given is imported."""

    module: str
    adder: str
    helps: tuple[tuple[str, str], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.helps)


COMMANDS: tuple[Commands, ...] = (
    Commands(
        "fleetfix.cli.run_cmd",
        "add_parsers",
        (
            ("run", "run a remediation playbook against an inventory"),
            ("validate", "check a playbook without running it"),
        ),
    ),
    Commands(
        "fleetfix.cli.inventory_cmd",
        "add_parser",
        (("inventory", "show an inventory as fleetfix (and Ansible) reads it"),),
    ),
    Commands(
        "fleetfix.cli.tools_cmd",
        "add_parsers",
        (
            ("parse", "run a probe's parser on saved output, print JSON"),
            (
                "xid",
                "explain an Xid (or, with --sxid, an NVSwitch SXid) and what fleetfix does"
                " about it",
            ),
            (
                "ib-counter",
                "explain an InfiniBand port counter (sysfs or perfquery name) and its threshold",
            ),
            ("probes", "list the built-in probes"),
        ),
    ),
    Commands(
        "fleetfix.cli.lab_cmd",
        "add_parser",
        (("lab", "run a simulated GPU cluster over real SSH"),),
    ),
    Commands(
        "fleetfix.cli.history_cmd",
        "add_parser",
        (("history", "recent runs recorded in the journal"),),
    ),
    Commands(
        "fleetfix.cli.journal_cmd",
        "add_parser",
        (("journal", "export a journal, or migrate it into another"),),
    ),
    Commands(
        "fleetfix.cli.probe_cmd",
        "add_parser",
        (("probe", "run probes across the fleet and print a health table"),),
    ),
    Commands(
        "fleetfix.cli.triage_cmd",
        "add_parser",
        (("triage", "from a failed or hung Slurm job to its suspect nodes, GPUs and links"),),
    ),
    Commands(
        "fleetfix.cli.report_cmd",
        "add_parser",
        (("report", "re-render a past run's report from the journal"),),
    ),
    Commands(
        "fleetfix.cli.healthcheck_cmd",
        "add_parser",
        (
            (
                "healthcheck",
                "check this node's GPUs and drain it in Slurm if unhealthy (HealthCheckProgram)",
            ),
        ),
    ),
)
"""Every subcommand, in the order `fleetfix --help` lists them."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors become UsageError (exit 5), not exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser: with `argv`, only the subcommand it names is built in full
    (its module imported), the others listed by name and help; without, every subcommand."""
    parser = _Parser(
        prog="fleetfix",
        description="Ansible-style fleet remediation for GPU clusters.",
        epilog="exit codes" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fleetfix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    named = _command_named(argv) if argv is not None else None
    for commands in COMMANDS:
        if argv is None or named in commands.names:
            # Imported here, inside run_cli's guard, so a Ctrl-C while they load is an
            # interruption
            module = importlib.import_module(commands.module)
            getattr(module, commands.adder)(sub)
        else:
            for name, text in commands.helps:
                sub.add_parser(name, help=text, add_help=False)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names: its first word that is not an option (the top level's
    options, -h and --version, take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    exit_on_ctrl_c()  # outside run_cli's guard a Ctrl-C exits 99 at once, no traceback
    with tolerant_output():  # a reader that goes away ends the output, not the run
        code = run_cli(argv)
    if code == Outcome.INTERRUPTED:
        forget_caught_ctrl_c()
    sys.exit(code)


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Parse, dispatch, and map every failure to its exit code with a one-screen message."""
    try:
        with ctrl_c_raises():  # the messages below are printed with main's handler back
            words = sys.argv[1:] if argv is None else list(argv)
            with collector_paused():  # the command's modules load (cli/heap.py) ...
                args = build_parser(words).parse_args(words)
            with frozen_heap():  # ... and live as long as it runs
                command: Command = args.handler
                return command(args)
    except UsageError as exc:
        _error(str(exc))
        return Outcome.BAD_OPTIONS
    except InputError as exc:
        _error(exc.render())
        return Outcome.ERROR
    except UnknownPluginError as exc:
        _error(str(exc))
        return Outcome.ERROR
    except FleetfixError as exc:
        _error(str(exc))
        return Outcome.ERROR
    except KeyboardInterrupt:
        _error("interrupted")
        return Outcome.INTERRUPTED
    except BrokenPipeError:
        return Outcome.OK
    except Exception:
        _error("internal error (this is a fleetfix bug; please report it with the details below)")
        if os.environ.get("FLEETFIX_DEBUG") or "-vvv" in (argv or sys.argv):
            traceback.print_exc()
        else:
            print("  run again with FLEETFIX_DEBUG=1 to see the traceback", file=sys.stderr)
        return Outcome.INTERNAL


def _error(message: str) -> None:
    print(f"ERROR: {message}", file=sys.stderr)
