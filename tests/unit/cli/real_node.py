"""Running `fleetfix probe` with every probe, `--transport local`, on what a real GPU node
showed: the H200 VM of tests/fixtures/samples/real-nodes (no Slurm, InfiniBand, DCGM,
nccl-tests, systemd, lsmod). The PATH holds small fake tools that print that node's captures
byte for byte, plus the basic utilities; the tools the node lacked are on no PATH here either."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from fleetfix.probes import BUILTIN_PROBES
from tests.probes.absent import REAL_NODE

PROBES = tuple(name for name in BUILTIN_PROBES if name not in ("pci_gpus", "ib_counters"))
"""Every probe but pci_gpus and ib_counters, which read this machine's /sys/bus/pci and
/sys/class/infiniband: no PATH can fake them."""
NOT_INSTALLED = {
    "ib": "ibstat",
    "slurm_node": "slurm",
    "dcgm_diag": "dcgmi",
    "nccl_tests": "nccl-tests",
    "services": "systemd",
}
"""Probe -> the tool the node did not have."""
BASICS = (
    "sh", "bash", "dash", "grep", "awk", "sed", "mktemp", "rm", "timeout", "sleep", "kill",
    "date", "id", "df", "find", "sort", "hostname", "env", "pgrep", "head", "tail", "tr", "wc",
    "cut", "uname", "printf", "echo", "test", "true", "false", "ls",
)  # fmt: skip
NVIDIA_SMI = """#!/bin/sh
# nvidia-smi on the H200 VM: each form the probes run prints what the node printed.
case "$*" in
  "-q -x") exec {cat} {real}/nvidia-smi-q-x.txt ;;
  "topo -m") exec {cat} {real}/nvidia-smi-topo-m.txt ;;
  "nvlink -s") exec {cat} {real}/nvidia-smi-nvlink-s.txt ;;
  "nvlink -e") exec {cat} {real}/nvidia-smi-nvlink-e.txt ;;
  "-L") exec {cat} {real}/nvidia-smi-L.txt ;;
  --query-compute-apps=*) exec {cat} {real}/nvidia-smi-query-compute-apps.txt ;;
esac
echo "fake nvidia-smi: no capture for: $*" >&2
exit 2
"""
DMESG = """#!/bin/sh
[ "$*" = "-T" ] && exec {cat} {real}/dmesg.txt
echo "fake dmesg: no capture for: $*" >&2
exit 2
"""
CAT = """#!/bin/sh
# The node's /proc files, read by the probes with cat; any other cat is the real one.
case "$*" in
  /proc/modules) exec {cat} {real}/proc-modules.txt ;;
  /proc/driver/nvidia/version) exec {cat} {real}/driver-version.txt ;;
esac
exec {cat} "$@"
"""
FUSER = """#!/bin/sh
# Nothing held /dev/nvidia* on the node: fuser printed nothing and exited 1.
exit 1
"""


def real_node_path(tmp_path: Path) -> str:
    """A PATH directory with the fake node tools and links to the basic utilities only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in BASICS:
        found = shutil.which(name)
        if found is not None:
            (bin_dir / name).symlink_to(found)
    real_cat = shutil.which("cat")
    assert real_cat is not None
    fakes = {"nvidia-smi": NVIDIA_SMI, "dmesg": DMESG, "cat": CAT, "fuser": FUSER}
    for name, script in fakes.items():
        (bin_dir / name).write_text(script.format(cat=real_cat, real=REAL_NODE), encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    for absent in ("lsmod", "systemctl", "ibstat", "ibstatus", "scontrol", "sinfo", "dcgmi"):
        assert not (bin_dir / absent).exists()
    return str(bin_dir)


def probe(
    tmp_path: Path, *options: str, columns: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`fleetfix probe <every probe> -i <localhost, local> --transport local`, stdout a pipe."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("localhost ansible_connection=local\n", encoding="utf-8")
    env = {"PATH": real_node_path(tmp_path), "HOME": str(tmp_path), "NO_COLOR": "1"}
    if columns is not None:
        env["COLUMNS"] = columns
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    command = [sys.executable, "-m", "fleetfix", "probe", *PROBES]
    command += ["-i", str(inventory), "--transport", "local", *options]
    return subprocess.run(
        command,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
