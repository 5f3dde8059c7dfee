"""Shell commands that do what a disruptive action does: a user's `shell: systemctl reboot`
gets the reboot action's gates.

fleetfix's own actions declare whether they take a node out of service; a `shell`, `command`
or `raw` step does not. Without this, a runbook that reboots with `shell: reboot` (or unloads
the driver with `rmmod`) would do so on a node someone else drained, on a busy node, past the
topology caps and the repair budget, with nothing journaled before it ran. The table below
names the commands whose effect on a node is the same as a disruptive action's; a step that
runs one passes the same gates (ownership, busy, caps and budget, the intent journaled first,
never repeated by a resumed run). Matched at a command's start (after `;`, `&&`, `|`, `(`,
`$(`, `sudo`, `nohup`, `exec`, `timeout N`), so `echo will reboot` is not a reboot. What a
script the step calls does inside is not seen: use fleetfix's actions for that (decisions.md).
"""

from __future__ import annotations

import re

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.actions.gates import busy_reason

_START = (
    r"(?:^|[;&|(`\n]|\$\()\s*(?:\w+=\S*\s+)*"
    r"(?:(?:sudo(?:\s+-\S+)*|nohup|exec|timeout\s+\S+)\s+)*"
)
_BIN = r"(?:/usr)?(?:/s?bin/)?"
_END = r"(?=$|[\s;&|)`])"
"""A command name ends where the word does: `reboot-report` is another program."""

_PACKAGE_TOOLS = r"(?:apt-get|apt|aptitude|dnf|yum|zypper|dpkg|rpm)\b[^;&|\n]*?"
_PACKAGE_VERBS = (
    r"\s(?:install|reinstall|remove|purge|upgrade|dist-upgrade|erase|downgrade|"
    r"-i|-e|-U|--install|--remove|--purge|--erase|--upgrade)\b[^;&|\n]*?"
)
_GPU_PACKAGES = (
    r"[\s'\"](?:nvidia|libnvidia|cuda|libcuda|libnccl|nccl|datacenter-gpu-manager|dcgm|"
    r"kmod-nvidia|xorg-x11-drv-nvidia)"
)
"""A package change of the GPU stack (driver, fabric manager, DCGM, CUDA, NCCL): it breaks
what runs on the node, as an unload of the driver does."""

DISRUPTIVE_COMMANDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(_START + _BIN + pattern))
    for what, pattern in (
        ("reboot", r"(?:reboot|poweroff|halt|shutdown)" + _END),
        ("reboot", r"systemctl(?:\s+-\S+)*\s+(?:reboot|poweroff|halt|kexec|soft-reboot)" + _END),
        ("reboot", r"scontrol\s+reboot" + _END),
        ("reboot", r"ipmitool\b[^;&|\n]*\bpower\s+(?:cycle|reset|off)\b"),
        ("reboot", r"echo\s+[bco]\s*>\s*/proc/sysrq-trigger"),
        ("driver unload", r"rmmod" + _END),
        ("driver unload", r"modprobe(?:\s+-\S+)*\s+(?:-\w*r\w*|--remove)\b"),
        ("GPU reset", r"nvidia-smi\b[^;&|\n]*\s(?:-r|--gpu-reset)(?:\s|$)"),
        ("ECC counter reset", r"nvidia-smi\b[^;&|\n]*\s(?:-p\s*[01]|--reset-ecc-errors)\b"),
        ("GPU package change", _PACKAGE_TOOLS + _PACKAGE_VERBS + _GPU_PACKAGES),
    )
)


def disruptive_command(command: str) -> str | None:
    """What `command` does that takes a node or its GPUs out of service, or None."""
    for what, pattern in DISRUPTIVE_COMMANDS:
        if pattern.search(command):
            return what
    return None


def command_action(command: str, what: str) -> Action:
    """The command as a disruptive action: the gates of fleetfix's own (gpu_processes and
    Slurm read fresh, busy refused, ownership, caps, budget, intent first), run as typed."""

    def plan(ctx: ActionContext) -> ActionPlan:
        busy = busy_reason(ctx)
        if busy is not None:
            return ActionPlan(refused=f"{busy}; the command would disrupt them ({what})")
        return ActionPlan(commands=(PlannedCommand(command, what),))

    return Action(
        name=f"command ({what})",
        summary=f"a step's own command that does a {what}",
        plan=plan,
        requires=("gpu_processes",),
        optional=("slurm_node",),
        disruptive=True,
    )
