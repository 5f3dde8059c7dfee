"""`fleetfix lab up|down|status|truth|inventory|scenarios`: argument parsing and printing.

The lead wires `add_lab_parser` into the main CLI; `python -m fleetfix.lab ...` uses
`standalone_main`. Returns exit codes (0 ok, 1 lab error) rather than exiting.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TextIO

from fleetfix.errors import LabError

if TYPE_CHECKING:
    from fleetfix.lab.control import LabHandle

# The lab's modules load when a lab command runs, not with every `fleetfix run`: the CLI
# builds this parser at every start, and the time to the first command counts (issue 10).

DEFAULT_SCENARIO = "xid79"


def add_lab_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `lab` and its subcommands to an argparse subparsers object."""
    lab = subparsers.add_parser("lab", help="run a simulated GPU cluster over real SSH")
    lab.set_defaults(handler=run_lab)
    _add_commands(lab)
    return lab  # type: ignore[no-any-return]


def _add_commands(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="lab_command", metavar="COMMAND")
    commands.required = True
    up = commands.add_parser("up", help="start a lab server in the background")
    up.add_argument("--scenario", default=DEFAULT_SCENARIO, help="shipped name or YAML file")
    up.add_argument("--nodes", type=int, default=None, help="override the fleet's node count")
    up.add_argument("--port", type=int, default=None, help="SSH port for every node")
    up.add_argument("--reboot-time", type=float, default=None, help="seconds a reboot takes")
    up.add_argument(
        "--inventory-out", type=Path, default=None, help="also write the inventory here"
    )
    _add_target(up)
    for name, text in (
        ("down", "stop the lab"),
        ("status", "nodes up/down/rebooting"),
        ("truth", "what is still broken, per node"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("--scenario", default=None)
        _add_target(command)
        if name != "down":
            command.add_argument("--json", action="store_true", help="machine-readable output")
    inventory = commands.add_parser("inventory", help="print a scenario's inventory (INI)")
    inventory.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO)
    inventory.add_argument("--nodes", type=int, default=None)
    commands.add_parser("scenarios", help="list the shipped scenarios")
    logs = commands.add_parser(
        "job-logs", help="write the logs a scenario's Slurm job wrote (NCCL_DEBUG, watchdog)"
    )
    logs.add_argument("job", type=int, help="the job id the scenario's nodes run")
    logs.add_argument("--scenario", default=DEFAULT_SCENARIO, help="shipped name or YAML file")
    logs.add_argument("--nodes", type=int, default=None, help="override the fleet's node count")
    logs.add_argument("--out", type=Path, default=Path(), help="directory to write them to (.)")


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, default=None, help="lab state directory")


def run_lab(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `fleetfix lab` subcommand; LabError is reported and gives exit code 1."""
    stream = out or sys.stdout
    try:
        return _COMMANDS[args.lab_command](args, stream)
    except LabError as exc:
        print(f"fleetfix lab: {exc.render()}", file=sys.stderr)
        return 1


def _up(args: argparse.Namespace, out: TextIO) -> int:
    from fleetfix.lab.control import default_state_dir, start_lab  # noqa: PLC0415

    state_dir = args.state_dir or default_state_dir(args.scenario)
    handle = start_lab(
        args.scenario,
        state_dir,
        port=args.port,
        nodes=args.nodes,
        reboot_time=args.reboot_time,
        detach=True,
    )
    inventory = handle.inventory_path
    if args.inventory_out is not None:
        args.inventory_out.write_text(inventory.read_text(encoding="utf-8"), encoding="utf-8")
        inventory = args.inventory_out
    counts = handle.status()["counts"]
    print(
        f"lab {handle.scenario} up: {len(handle.hosts)} nodes ({_counts(counts)}), "
        f"ssh port {handle.port}, sandbox {handle.sandbox}, pid {handle.pid}",
        file=out,
    )
    print(inventory, file=out)
    return 0


def _find(args: argparse.Namespace) -> LabHandle:
    from fleetfix.lab.control import default_state_dir, find_lab  # noqa: PLC0415

    if args.state_dir is not None or args.scenario is not None:
        state_dir = args.state_dir or default_state_dir(args.scenario)
        handle = find_lab(state_dir)
        if handle is None:
            raise LabError(
                f"no lab is running from {state_dir}", hint="start one with `fleetfix lab up`"
            )
        return handle
    running = running_labs()
    if len(running) != 1:
        names = ", ".join(h.scenario for h in running)
        problem = "no lab is running" if not running else f"several labs are running ({names})"
        raise LabError(
            problem,
            hint="name one with --scenario or --state-dir"
            if running
            else "start one with `fleetfix lab up`",
        )
    return running[0]


def running_labs() -> list[LabHandle]:
    """Labs running from the default state directories."""
    from fleetfix.lab.control import default_state_dir, find_lab  # noqa: PLC0415

    root = default_state_dir("x").parent
    if not root.is_dir():
        return []
    found = [find_lab(child) for child in sorted(root.iterdir()) if child.is_dir()]
    return [handle for handle in found if handle is not None]


def _down(args: argparse.Namespace, out: TextIO) -> int:
    handle = _find(args)
    handle.stop()
    print(f"lab {handle.scenario} stopped (pid {handle.pid})", file=out)
    return 0


def _status(args: argparse.Namespace, out: TextIO) -> int:
    handle = _find(args)
    status = handle.status()
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True), file=out)
        return 0
    print(
        f"lab {status['scenario']} (pid {status['pid']}, port {status['port']}, sandbox "
        f"{status['sandbox']}): {len(status['nodes'])} nodes, {_counts(status['counts'])}",
        file=out,
    )
    rows = [
        (name, n["address"], n["status"], str(n["boots"])) for name, n in status["nodes"].items()
    ]
    _table(out, ("NODE", "ADDRESS", "STATUS", "BOOTS"), rows)
    return 0


def _truth(args: argparse.Namespace, out: TextIO) -> int:
    handle = _find(args)
    truth = handle.truth()
    if args.json:
        print(json.dumps(truth, indent=2, sort_keys=True), file=out)
        return 0
    rows = [
        (
            name,
            node["status"],
            _slurm_text(node["slurm"]),
            fabric_text(node),
            "; ".join(fault_text(f) for f in node["faults"]) or "-",
        )
        for name, node in truth["nodes"].items()
    ]
    _table(out, ("NODE", "STATUS", "SLURM", "FABRIC", "FAULTS"), rows)
    broken = sum(1 for node in truth["nodes"].values() if node["faults"])
    print(f"\n{broken} of {len(rows)} nodes still have faults", file=out)
    for name, node in truth["nodes"].items():
        lease = node.get("lease")
        if lease:
            print(f"lease on {name}: {_lease_text(lease)}", file=out)
    for resv in truth.get("reservations", []):
        print(
            f"reservation {resv['name']}: {','.join(resv['nodes'])}"
            f" ({','.join(resv['flags'])}; by {resv['created_by']})",
            file=out,
        )
    return 0


def _lease_text(lease: dict[str, Any]) -> str:
    """`run R from controller C (pid P), until 2026-01-01T12:10:00+00:00` (expired: said)."""
    expires = lease.get("expires")
    until = ""
    if isinstance(expires, int):
        when = datetime.fromtimestamp(expires, UTC).isoformat(timespec="seconds")
        until = f", {'expired' if expires <= time.time() else 'until'} {when}"
    who = f"run {lease.get('run', '?')} from controller {lease.get('controller', '?')}"
    return f"{who} (pid {lease.get('pid', '?')}){until}"


def _inventory(args: argparse.Namespace, out: TextIO) -> int:
    from fleetfix.lab.inventory import render_inventory  # noqa: PLC0415
    from fleetfix.lab.scenario_file import load_scenario  # noqa: PLC0415

    out.write(render_inventory(load_scenario(args.scenario, nodes=args.nodes)))
    return 0


def _scenarios(args: argparse.Namespace, out: TextIO) -> int:
    from fleetfix.lab.scenario_file import load_scenario, shipped_scenarios  # noqa: PLC0415

    for name in shipped_scenarios():
        scenario = load_scenario(name)
        summary = scenario.description.splitlines()[0] if scenario.description else ""
        print(f"{name:<16} {scenario.fleet.node_count:>5} nodes  {summary}", file=out)
    return 0


def _job_logs(args: argparse.Namespace, out: TextIO) -> int:
    from fleetfix.lab.joblogs import scenario_job_logs  # noqa: PLC0415
    from fleetfix.lab.scenario_file import load_scenario  # noqa: PLC0415

    scenario = load_scenario(args.scenario, nodes=args.nodes)
    texts = scenario_job_logs(scenario, args.job, time.time())
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (args.out / name).write_text(text, encoding="utf-8")
            print(args.out / name, file=out)
    except OSError as exc:
        raise LabError(f"cannot write the job's logs to {args.out}: {exc.strerror}") from exc
    return 0


_COMMANDS = MappingProxyType(
    {
        "up": _up,
        "down": _down,
        "status": _status,
        "truth": _truth,
        "inventory": _inventory,
        "scenarios": _scenarios,
        "job-logs": _job_logs,
    }
)


def fault_text(fault: dict[str, Any]) -> str:
    """One fault in a few words: `xid79 gpu2 (reboot)`, `stale_shm x3`."""
    kind = fault["kind"]
    where = f" gpu{fault['gpu']}" if "gpu" in fault else ""
    if kind == "xid":
        return f"xid{fault['code']}{where} ({fault['recovery']})"
    if kind == "ecc":
        vol, agg = fault["volatile"], fault["aggregate"]
        return f"ecc{where} vol {vol['sbe']}/{vol['dbe']} agg {agg['sbe']}/{agg['dbe']}"
    if kind == "stale_shm":
        return f"stale_shm x{fault['count']}"
    if kind == "persistence_off":
        return f"persistence_off gpus {','.join(str(g) for g in fault['gpus'])}"
    if kind == "modules_unloaded":
        return "modules_unloaded " + ",".join(fault["modules"])
    if kind == "nvlink_down":
        return f"nvlink_down{where} link{int(fault['value'])}"
    if kind in ("ib_port_down", "ib_symbol_errors"):
        return f"{kind} mlx5_{int(fault['value'])}"
    if kind == "degraded_leaf":
        return f"degraded_leaf {fault['leaf']}"
    if kind == "sxid":
        return f"sxid{fault['code']} nvswitch{fault['switch']}{where} ({fault['recovery']})"
    if kind == "sram":
        limit = " threshold exceeded" if fault["threshold_exceeded"] else ""
        return f"sram{where} vol {fault['volatile']} agg {fault['aggregate']}{limit}"
    value = f" {fault['value']:g}" if "value" in fault else ""
    return f"{kind}{where}{value}"


def fabric_text(node: dict[str, Any]) -> str:
    """The board, its Fabric Manager (or IMEX) and the GPUs' fabric states in a few words:
    `hgx-h100 fm active 8 Completed`, `hgx-a100 fm inactive`, `pcie`."""
    fabric = node.get("fabric") or {}
    words = [str(node.get("board", "classic"))]
    for unit, short in (("manager", "fm"), ("imex", "imex")):
        if fabric.get(unit) is not None:
            words.append(f"{short} {fabric[unit]}")
    states: dict[str, int] = {}
    for state in fabric.get("gpus", []):
        states[state] = states.get(state, 0) + 1
    words += [f"{n} {state}" for state, n in states.items() if state != "N/A"]
    return " ".join(words)


def _slurm_text(slurm: dict[str, Any]) -> str:
    state = str(slurm["state"]).lower() + ("+drain" if slurm["drain"] else "")
    if slurm.get("completing"):
        state += "+completing"
    if slurm.get("job_id"):
        state += f" job {slurm['job_id']}"
    if slurm.get("reservation"):
        state += f" reserved {slurm['reservation']}"
    if slurm.get("reason"):
        state += f" ({slurm['reason_user']}: {slurm['reason']})"
    if slurm.get("unreadable"):
        state += " [unreadable from the node]"
    return state


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def _table(out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(header[i]), *(len(row[i]) for row in rows)]) for i in range(len(header) - 1)]
    for row in (header, *rows):
        cells = [f"{cell:<{widths[i]}}" for i, cell in enumerate(row[:-1])]
        print("  ".join([*cells, row[-1]]).rstrip(), file=out)


def standalone_main(argv: Sequence[str]) -> int:
    """`python -m fleetfix.lab up ...`, for use without the main fleetfix CLI."""
    parser = argparse.ArgumentParser(prog="python -m fleetfix.lab")
    _add_commands(parser)
    args = parser.parse_args(list(argv))
    try:
        return run_lab(args)
    except BrokenPipeError:  # `fleetfix lab truth | head`
        return 0
