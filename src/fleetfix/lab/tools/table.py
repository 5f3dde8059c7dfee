"""The table the lab server dispatches tool calls on: command name -> emulator."""

from __future__ import annotations

from fleetfix.lab.tools import (
    dcgm,
    dmesg,
    ib,
    modules,
    nccl,
    node,
    nvidia_smi,
    packages,
    ps,
    slurm,
    slurm_jobs,
    systemd,
)
from fleetfix.lab.tools.base import Handler

FALLBACK_ONLY_TOOLS = ("hostname",)
"""Tools shimmed only when the sandbox cannot give the node its own UTS namespace."""


def tool_table() -> dict[str, Handler]:
    """Command name -> handler, for every command the lab puts on a node's PATH."""
    table: dict[str, Handler] = {
        "nvidia-smi": nvidia_smi.nvidia_smi,
        "dmesg": dmesg.dmesg,
        "journalctl": dmesg.journalctl,
        "lsmod": modules.lsmod,
        "modprobe": modules.modprobe,
        "rmmod": modules.rmmod,
        "insmod": modules.insmod,
        "systemctl": systemd.systemctl,
        "ibstat": ib.ibstat,
        "ibstatus": ib.ibstatus,
        "perfquery": ib.perfquery,
        "scontrol": slurm.scontrol,
        "sinfo": slurm.sinfo,
        "squeue": slurm.squeue,
        "scancel": slurm.scancel,
        "sacct": slurm_jobs.sacct,
        "reboot": node.reboot,
        "shutdown": node.shutdown,
        "fuser": node.fuser,
        "kill": node.kill,
        "ps": ps.ps,
        "lspci": node.lspci,
        "nvidia-bug-report.sh": node.nvidia_bug_report,
        "mpirun": nccl.mpirun,
        "dcgmi": dcgm.dcgmi,
        "dpkg-query": packages.dpkg_query,
        "apt-get": packages.apt_get,
        "hostname": node.hostname,
    }
    for name in nccl.OPS:
        table[name] = nccl.perf_tool(name)
    return table
