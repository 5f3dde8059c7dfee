"""`fleetfix healthcheck`: check this node (Slurm's HealthCheckProgram) and drain it if unhealthy.

Runs locally, with no inventory, playbook, journal or SSH. Exit codes (docs/slurm.md):
  0 healthy                     1 unhealthy: drained (now, or already by fleetfix)
  2 unhealthy: --dry-run        3 unhealthy: drained/down by someone else, left alone
  4 unhealthy: could not drain  5 bad options   250 internal error
One line is printed: on stdout when healthy, on stderr when not.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from fleetfix.errors import FleetfixError, UsageError
from fleetfix.healthcheck import (
    CHECKS,
    DEFAULT_CHECKS,
    HealthOutcome,
    Limits,
    Report,
    Settings,
    healthcheck,
)
from fleetfix.transport.base import ConnectionSpec
from fleetfix.transport.local import LocalTransport

SLURM_DEADLINE = 60.0
"""Slurm kills a health check that runs this long; the whole budget must stay below it."""
KILL_GRACE = 1.0
DEFAULTS = Limits()
DESCRIPTION = """\
Check this node locally (nvidia-smi, the kernel's Xid log; no inventory, no SSH) and, when it
is unhealthy, drain it:
  scontrol update NodeName=<node> State=DRAIN Reason="fleetfix: healthcheck: ..."
A node drained or down by someone else is never touched. For slurm.conf, point
HealthCheckProgram at a wrapper that runs `fleetfix healthcheck` (docs/slurm.md)."""
EXIT_CODES = __doc__.split("Exit codes (docs/slurm.md):", 1)[1] if __doc__ else ""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "healthcheck",
        help="check this node's GPUs and drain it in Slurm if unhealthy (HealthCheckProgram)",
        description=DESCRIPTION,
        epilog="exit codes:" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--check",
        action="append",
        choices=CHECKS,
        metavar="NAME",
        help=f"run only this check; repeatable ({', '.join(CHECKS)}; default:"
        f" {' '.join(DEFAULT_CHECKS)})",
    )
    parser.add_argument(
        "--skip", action="append", choices=CHECKS, default=[], metavar="NAME", help="skip a check"
    )
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="GPUs this node must show (default: the node's Gres in Slurm)",
    )
    parser.add_argument(
        "--node", help="Slurm node name (default: $SLURMD_NODENAME, else hostname -s)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="decide and print; do not drain the node"
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=DEFAULTS.probe_timeout,
        metavar="S",
        help="seconds each probe may take; a tool still running then is killed"
        f" ({DEFAULTS.probe_timeout:g})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULTS.budget,
        metavar="S",
        help=f"the whole check's budget, below Slurm's 60 s ({DEFAULTS.budget:g})",
    )
    parser.set_defaults(handler=healthcheck_command)


def settings_from(args: argparse.Namespace) -> Settings:
    checks = tuple(c for c in (args.check or DEFAULT_CHECKS) if c not in args.skip)
    if not checks:
        raise UsageError("healthcheck: every check is skipped; nothing to check")
    if args.gpus is not None and args.gpus < 0:
        raise UsageError("healthcheck: --gpus must be 0 or more")
    if not 0 < args.timeout < SLURM_DEADLINE:
        raise UsageError(f"healthcheck: --timeout must be above 0 and below {SLURM_DEADLINE:g}")
    if not 0 < args.probe_timeout <= args.timeout:
        raise UsageError("healthcheck: --probe-timeout must be above 0 and at most --timeout")
    limits = Limits(budget=args.timeout, probe_timeout=args.probe_timeout)
    return Settings(checks, args.gpus, args.node, args.dry_run, limits)


def healthcheck_command(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    try:
        report = asyncio.run(_check(settings))
    except FleetfixError as exc:
        print(f"fleetfix healthcheck: could not check: {exc}; not drained", file=sys.stderr)
        return int(HealthOutcome.NOT_DRAINED)
    healthy = report.outcome is HealthOutcome.HEALTHY
    print(f"fleetfix healthcheck: {report.line}", file=sys.stdout if healthy else sys.stderr)
    return int(report.outcome)


async def _check(settings: Settings) -> Report:
    transport = LocalTransport(kill_grace=KILL_GRACE)
    try:
        connection = await transport.connect(ConnectionSpec(name="localhost", address="localhost"))
        return await healthcheck(connection, settings)
    finally:
        await transport.aclose()
