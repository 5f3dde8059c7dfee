"""`python -m fleetfix.lab serve ...` runs the lab server; other words go to the lab CLI."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from fleetfix.errors import FleetfixError
from fleetfix.lab.cli import standalone_main
from fleetfix.lab.front import serve_front
from fleetfix.lab.scenario_file import load_scenario
from fleetfix.lab.server import LabRuntime, raise_open_file_limit


def serve_main(argv: Sequence[str]) -> int:
    """Run the server in the foreground (or detached with --detach) until stopped."""
    parser = argparse.ArgumentParser(prog="python -m fleetfix.lab serve")
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--reboot-time", type=float, default=None)
    parser.add_argument("--launch-id", default="")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument(
        "--nodes-per-process", type=int, default=_env_int("FLEETFIX_LAB_NODES_PER_PROCESS")
    )
    args = parser.parse_args(argv)
    if args.detach and os.fork() > 0:
        os._exit(0)  # the caller waits for this parent; the child serves on in its own session
    if args.detach:
        os.setsid()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    try:
        scenario = load_scenario(args.scenario, nodes=args.nodes)
        if args.reboot_time is not None:
            scenario = dataclasses.replace(scenario, reboot_time=args.reboot_time)
        runtime = LabRuntime(
            scenario, args.state_dir.resolve(), args.port, args.launch_id, args.nodes_per_process
        )
        asyncio.run(runtime.serve())
    except FleetfixError as exc:
        print(f"fleetfix lab: {exc}", file=sys.stderr)
        return 1
    return 0


def front_main(argv: Sequence[str]) -> int:
    """One SSH front of a sharded lab (started by the server, never by hand)."""
    parser = argparse.ArgumentParser(prog="python -m fleetfix.lab front")
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--shard", required=True, type=int)
    parser.add_argument("--link-port", required=True, type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    raise_open_file_limit()
    asyncio.run(serve_front(args.state_dir, args.shard, args.link_port))
    return 0


def _env_int(name: str) -> int | None:
    """An integer from the environment (a developer forcing sharded labs), else None."""
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["serve"]:
        return serve_main(words[1:])
    if words[:1] == ["front"]:
        return front_main(words[1:])
    return standalone_main(words)


if __name__ == "__main__":
    sys.exit(main())
