"""`make bench`: fleetfix vs ansible-playbook vs a bare asyncssh fan-out on the lab (DESIGN 13).

    .venv/bin/python benchmarks/run.py [--hosts 1000] [--ansible-hosts 200] [--quick]
        [--no-ansible] [--profile PATH] [--keep]

1. Times `load_inventory` on a generated 10,000-host INI (min/median of 5; target < 1 s).
2. Starts the `healthy-1000` lab once (free port, temp state dir) and writes an inventory for
   it without the scenario line (so nothing embedded starts), with the connection vars.
3. Runs a 5-probe workload (nvidia_smi, xid, gpu_processes, shm, services) three ways, each as a
   whole process under GNU time: the bare fan-out (the floor), `fleetfix run -f 50`, and
   `ansible-playbook -f 50` with the same commands as `raw` tasks on fewer hosts
   (--ansible-hosts; per-host rates keep the ratio meaningful).
4. Prints a table and the ratios against the targets; never asserts a timing.
The lab is stopped by PID at the end, also on failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import pstats
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from bench_inventory import inventory_text, time_host_vars, time_parse
from contenders import (
    Setup,
    profile_fleetfix,
    run_ansible,
    run_bare,
    run_fleetfix,
    venv_bin,
    warm_up,
)
from measure import TIME_BINARY, Measurement, load_average
from table import measurement_table, parse_lines, ratio_lines
from workload import lab_inventory, probe_commands

from fleetfix.errors import LabError
from fleetfix.lab.control import LabHandle, start_lab

SCENARIO = "healthy-1000"
QUICK_HOSTS = 100


@dataclass(frozen=True, slots=True)
class Options:
    """What to run: host counts per contender, and the optional extras."""

    hosts: int
    ansible_hosts: int
    inventory_hosts: int
    ansible: bool
    warm_up: bool
    profile: Path | None
    keep: bool


def parse_options(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000, help="hosts for fleetfix and bare")
    parser.add_argument("--ansible-hosts", type=int, default=200, help="hosts for ansible")
    parser.add_argument("--inventory-hosts", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_HOSTS} hosts for all")
    parser.add_argument("--no-ansible", action="store_true", help="skip ansible-playbook")
    parser.add_argument("--no-warm-up", action="store_true", help="skip the untimed warm-up")
    parser.add_argument("--profile", type=Path, help="also run fleetfix under cProfile to PATH")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (outputs)")
    args = parser.parse_args(argv)
    hosts, ansible_hosts = args.hosts, args.ansible_hosts
    if args.quick:
        hosts = ansible_hosts = QUICK_HOSTS
    if min(hosts, ansible_hosts, args.inventory_hosts) < 1:
        parser.error("host counts must be at least 1")
    profile = args.profile.resolve() if args.profile else None
    return Options(
        hosts,
        ansible_hosts,
        args.inventory_hosts,
        not args.no_ansible,
        not args.no_warm_up,
        profile,
        args.keep,
    )


def _say(text: str) -> None:
    print(text, flush=True)


def _versions() -> str:
    found = []
    for package in ("fleetfix", "ansible-core", "asyncssh"):
        try:
            found.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package} ?")
    return ", ".join(found)


def bench_inventory(work: Path, hosts: int) -> list[str]:
    path = work / f"inventory-{hosts}.ini"
    path.write_text(inventory_text(hosts), encoding="utf-8")
    return parse_lines(time_parse(path), time_host_vars(path))


def _start(options: Options, work: Path) -> LabHandle:
    nodes = max(options.hosts, options.ansible_hosts if options.ansible else 0)
    started = time.perf_counter()
    lab = start_lab(SCENARIO, work / "lab", port=0, nodes=nodes)
    _say(
        f"lab {SCENARIO}: {len(lab.hosts)} nodes on port {lab.port}, sandbox {lab.sandbox}, "
        f"pid {lab.pid}, up in {time.perf_counter() - started:.1f} s"
    )
    return lab


def _contenders(setup: Setup, options: Options) -> dict[str, Measurement]:
    found: dict[str, Measurement] = {}
    if options.warm_up:
        hosts = max(options.hosts, options.ansible_hosts if options.ansible else 0)
        _say(f"warm-up (untimed): one command on {hosts} hosts: {warm_up(setup, hosts):.1f} s")
    runs = [("bare", run_bare, options.hosts), ("fleetfix", run_fleetfix, options.hosts)]
    if options.ansible:
        runs.append(("ansible", run_ansible, options.ansible_hosts))
    for key, runner, hosts in runs:
        _say(f"running {key} on {hosts} hosts ...")
        found[key] = runner(setup, hosts)
        _say(f"  {found[key].time.wall_s:.1f} s wall; {found[key].outcome}")
    return found


def _profile(setup: Setup, options: Options, path: Path) -> list[str]:
    """Run fleetfix once more under cProfile; the functions with the most own time."""
    seconds = profile_fleetfix(setup, options.hosts, path)
    stats = pstats.Stats(str(path))
    # get_stats_profile() keys rows by bare function name, merging every `<genexpr>`; the raw
    # table (untyped in typeshed) keeps file and line apart.
    table: dict[tuple[str, int, str], tuple[Any, ...]] = vars(stats)["stats"]
    # Time blocked in epoll is the event loop waiting for the lab, not work.
    idle = sum(row[2] for key, row in table.items() if "select.epoll" in key[2])
    busy = {key: row for key, row in table.items() if "select.epoll" not in key[2]}
    total = sum(row[2] for row in busy.values())
    lines = [
        f"cProfile of fleetfix on {options.hosts} hosts: {seconds:.1f} s wall, {total:.1f} s "
        f"profiled CPU, {idle:.1f} s waiting (cProfile inflates Python code ~2x); {path}",
        "  own s    cum s  function",
    ]
    top = sorted(busy.items(), key=lambda item: float(item[1][2]), reverse=True)
    for (filename, line, name), row in top[:15]:
        lines.append(f"  {row[2]:6.1f} {row[3]:8.1f}  {Path(filename).name}:{line}({name})")
    return lines


def run(options: Options, work: Path) -> None:
    _say(f"machine: {os.cpu_count()} CPUs, load {load_average():.1f}; {_versions()}")
    for line in bench_inventory(work, options.inventory_hosts):
        _say(line)
    lab = _start(options, work)
    try:
        inventory = work / "lab-inventory.ini"
        inventory.write_text(lab_inventory(lab), encoding="utf-8")
        setup = Setup(lab, work, inventory, probe_commands(), venv_bin())
        results = _contenders(setup, options)
        profile = _profile(setup, options, options.profile) if options.profile else []
    finally:
        lab.stop()
    _say("")
    _say(measurement_table(list(results.values())))
    _say("")
    for line in ratio_lines(results["fleetfix"], results):
        _say(line)
    for line in profile:
        _say(line)


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM unwinds like Ctrl-C, so `finally` stops the lab."""
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    options = parse_options(argv)
    if not Path(TIME_BINARY).exists():
        _say(f"{TIME_BINARY} is missing: apt-get install time")
        return 1
    signal.signal(signal.SIGTERM, _terminate)
    # Short path: Ansible's ControlPath sockets live under it (108-byte socket path limit).
    work = Path(tempfile.mkdtemp(prefix="ffb-", dir="/tmp"))
    try:
        run(options, work)
    except KeyboardInterrupt:
        _say("interrupted; lab stopped")
        return 99
    except LabError as exc:
        _say(f"the lab failed: {exc}")
        return 1
    finally:
        if options.keep:
            _say(f"outputs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
