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
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

from fleetfix import __version__
from fleetfix.cli.streams import tolerant_output
from fleetfix.errors import FleetfixError, InputError, UsageError
from fleetfix.interrupt import ctrl_c_raises, exit_on_ctrl_c
from fleetfix.plugins import UnknownPluginError
from fleetfix.results import Outcome

EXIT_CODES = __doc__.split("Exit codes", 1)[1] if __doc__ else ""

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse whose errors become UsageError (exit 5), not exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fleetfix",
        description="Ansible-style fleet remediation for GPU clusters.",
        epilog="exit codes" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # The subcommands' modules (the engine, the journal, asyncssh: most of a second) are
    # imported here, inside run_cli's guard, so a Ctrl-C while they load is an interruption
    from fleetfix.cli import (  # noqa: PLC0415
        healthcheck_cmd,
        history_cmd,
        inventory_cmd,
        journal_cmd,
        lab_cmd,
        probe_cmd,
        report_cmd,
        run_cmd,
        tools_cmd,
    )

    parser.add_argument("--version", action="version", version=f"fleetfix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    run_cmd.add_parsers(sub)
    inventory_cmd.add_parser(sub)
    tools_cmd.add_parsers(sub)
    lab_cmd.add_parser(sub)
    history_cmd.add_parser(sub)
    journal_cmd.add_parser(sub)
    probe_cmd.add_parser(sub)
    report_cmd.add_parser(sub)
    healthcheck_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> NoReturn:
    exit_on_ctrl_c()  # outside run_cli's guard a Ctrl-C exits 99 at once, no traceback
    with tolerant_output():  # a reader that goes away ends the output, not the run
        code = run_cli(argv)
    sys.exit(code)


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Parse, dispatch, and map every failure to its exit code with a one-screen message."""
    try:
        with ctrl_c_raises():  # the messages below are printed with main's handler back
            args = build_parser().parse_args(argv)
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
