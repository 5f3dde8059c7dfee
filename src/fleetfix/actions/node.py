"""Node actions: reboot, restart a service, kill GPU processes (opt-in), collect evidence.

A reboot goes over SSH by default, or through Slurm (`via: slurm`, or the host var
`fleetfix_reboot_via=slurm`): `scontrol reboot ASAP nextstate=DOWN reason="fleetfix: ..." NODE`,
so the node comes back out of service and only fleetfix's validation (`slurm_resume`) returns
it; `nextstate: resume` is the site's explicit choice to let Slurm return it at once
(docs/slurm.md, docs/decisions.md). Either way the engine journals the intent with the boot id
before sending and waits for a new boot id.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand, Settle
from fleetfix.actions.gates import (
    busy_reason,
    choice,
    duration,
    flag,
    integer,
    node_name,
    params_checker,
    quote_all,
    seconds,
)
from fleetfix.actions.slurm import drain_reason
from fleetfix.probes.gpu_processes import GpuProcessesFacts
from fleetfix.probes.slurm_node import SlurmNodeFacts

SERVICE_VERBS = ("restarted", "started", "stopped", "reloaded")
STATE_VERBS = MappingProxyType(
    {"restarted": "restart", "started": "start", "stopped": "stop", "reloaded": "reload"}
)
MANAGER_VERBS = ("daemon-reload", "daemon-reexec")
SYSTEMCTL_OPTIONS = (("no_block", "--no-block"), ("force", "--force"))
SIGNALS = ("TERM", "KILL", "INT", "SIGTERM", "SIGKILL", "SIGINT")


REBOOT_VIA = ("ssh", "slurm")
NEXT_STATES = ("down", "resume")
"""scontrol reboot's nextstate values; Slurm has no nextstate=DRAIN (man scontrol)."""
VIA_VAR = "fleetfix_reboot_via"
NEXT_STATE_VAR = "fleetfix_reboot_nextstate"


def _setting(ctx: ActionContext, param: str, var: str, default: str) -> str:
    """A step param, else the host var (inventory/play vars), else the default."""
    value = ctx.params.get(param)
    if value is None:
        value = ctx.vars.get(var)
    return str(value if value is not None else default).strip().lower()


def _plan_reboot(ctx: ActionContext) -> ActionPlan:
    busy = busy_reason(ctx)
    if busy is not None:
        return ActionPlan(refused=f"{busy}; a reboot would kill them")
    via = _setting(ctx, "via", VIA_VAR, "ssh")
    if via not in REBOOT_VIA:
        return ActionPlan(refused=f"reboot: via must be ssh or slurm, not {via!r}")
    if via == "slurm":
        return _plan_slurm_reboot(ctx)
    # Detach so the command returns before the connection drops; the engine then waits for
    # the host to come back with a new boot id.
    command = "nohup sh -c 'sleep 1; systemctl reboot || reboot' >/dev/null 2>&1 &"
    return ActionPlan(
        commands=(PlannedCommand(command, "reboot", timeout=30, expect_unreachable=True),)
    )


def _plan_slurm_reboot(ctx: ActionContext) -> ActionPlan:
    """`scontrol reboot ASAP`: slurmctld runs the RebootProgram (ASAP also keeps new jobs off
    the node until then). nextstate=DOWN keeps the node out of service after the reboot with
    its fleetfix reason, so a failed validation never returns it; RESUME only on request."""
    next_state = _setting(ctx, "nextstate", NEXT_STATE_VAR, "down")
    if next_state not in NEXT_STATES:
        why = "Slurm has no nextstate=DRAIN; down keeps the node out until fleetfix resumes it"
        extra = f" ({why})" if next_state == "drain" else ""
        return ActionPlan(refused=f"reboot: nextstate must be down or resume{extra}")
    slurm: SlurmNodeFacts | None = ctx.facts.get("slurm_node")
    node = node_name(ctx)
    if slurm is None:
        return ActionPlan(refused=f"via slurm: the Slurm state of {node} could not be read")
    pending = {"REBOOT_REQUESTED", "REBOOT_ISSUED"} & set(slurm.flags)
    if pending:
        return ActionPlan(refused=f"Slurm already has a reboot pending for {node} ({slurm.state})")
    reason = drain_reason(ctx) if ctx.params.get("reason") else "fleetfix: reboot"
    command = (
        f"scontrol reboot ASAP nextstate={next_state.upper()} "
        f"reason={quote_all([reason])} {quote_all([node])}"
    )
    why = f"reboot {node} through Slurm (nextstate={next_state.upper()})"
    return ActionPlan(commands=(PlannedCommand(command, why, timeout=30, expect_unreachable=True),))


def _plan_service(ctx: ActionContext) -> ActionPlan:
    """systemctl commands in Ansible's order: daemon-reload, daemon-reexec, mask or unmask,
    enable or disable, then the state verb. Each is run as asked (the `systemd` module asks
    only for what would change); with none of them asked for, the unit is restarted."""
    params = ctx.params
    unit = params.get("name")
    state = params.get("state")
    unit_changes = [key for key in ("masked", "enabled") if params.get(key) is not None]
    managers = [verb for verb in MANAGER_VERBS if flag(params, verb.replace("-", "_"))]
    if state is None and not unit_changes and not managers:
        state = "restarted"
    if not unit and (state is not None or unit_changes):
        return ActionPlan(refused="service: 'name' (the systemd unit) is required")
    if state is not None and str(state) not in SERVICE_VERBS:
        return ActionPlan(refused=f"service: state must be one of {', '.join(SERVICE_VERBS)}")
    systemctl = " ".join(
        ["systemctl", *(option for key, option in SYSTEMCTL_OPTIONS if flag(params, key))]
    )
    commands = [PlannedCommand(f"{systemctl} {verb}", verb) for verb in managers]
    for key, (yes, no) in (("masked", ("mask", "unmask")), ("enabled", ("enable", "disable"))):
        if key in unit_changes:
            verb = yes if flag(params, key) else no
            commands.append(_unit_command(systemctl, verb, str(unit)))
    if state is not None:
        commands.append(_unit_command(systemctl, STATE_VERBS[str(state)], str(unit)))
    return ActionPlan(commands=tuple(commands))


def _unit_command(systemctl: str, verb: str, unit: str) -> PlannedCommand:
    return PlannedCommand(f"{systemctl} {verb} {quote_all([unit])}", f"{verb} {unit}")


def _settle_service(params: Mapping[str, Any]) -> Settle:
    """A start, stop, enable or mask (and a daemon reload with them) done twice does no harm:
    an interrupted one runs again. A restart or reload cannot be told from the unit's state
    afterwards and is not repeated blindly: it is settled by evidence, as any action."""
    always_acts = params.get("state") in ("restarted", "reloaded")
    asks = any(params.get(k) is not None for k in ("state", "enabled", "masked"))
    return Settle.RERUN if asks and not always_acts else Settle.VERIFY


def _plan_kill(ctx: ActionContext) -> ActionPlan:
    facts: GpuProcessesFacts = ctx.facts["gpu_processes"]
    if not flag(ctx.params, "confirm"):
        return ActionPlan(refused="kill_gpu_processes needs confirm: true (it kills user jobs)")
    if not facts.pids:
        return ActionPlan(notes=("no GPU processes",))
    signal = str(ctx.params.get("signal", "TERM")).upper().removeprefix("SIG")
    pids = " ".join(str(p) for p in facts.pids)
    command = f"kill -s {quote_all([signal])} {pids}"
    return ActionPlan(commands=(PlannedCommand(command, f"send SIG{signal} to {pids}"),))


def _check_killed(ctx: ActionContext) -> str | None:
    facts: GpuProcessesFacts | None = ctx.facts.get("gpu_processes")
    if facts is None:
        return "gpu_processes gave no facts"
    return f"GPU processes still running: {facts.pids}" if facts.count else None


def _plan_evidence(ctx: ActionContext) -> ActionPlan:
    lines = int(ctx.params.get("dmesg_lines", 500))
    commands = [
        PlannedCommand(f"dmesg -T | tail -n {lines}", "kernel log excerpt", ignore_rc=True),
        # A full report takes seconds on a healthy 8-GPU node; on a hung GPU (often why the
        # node is here) it never answers, and 120 s of waiting per node bought nothing.
        PlannedCommand("nvidia-smi -q", "full nvidia-smi report", timeout=30, ignore_rc=True),
    ]
    if flag(ctx.params, "bug_report"):
        timeout = seconds(ctx.params.get("bug_report_timeout"), 900.0)
        report = "nvidia-bug-report.sh --output-file /var/tmp/fleetfix-nvidia-bug-report.log"
        commands.append(PlannedCommand(report, "nvidia-bug-report", timeout=timeout))
    return ActionPlan(commands=tuple(commands))


ACTIONS = (
    Action(
        name="reboot",
        validate=params_checker({"via": choice(*REBOOT_VIA), "nextstate": choice(*NEXT_STATES)}),
        summary="reboot (over SSH, or through Slurm's scontrol reboot) and wait for the node"
        " to return with a new boot id",
        plan=_plan_reboot,
        params={
            "allow_busy": "reboot even with GPU processes or Slurm jobs (kills them)",
            "via": f"ssh (default) or slurm: scontrol reboot ASAP (host var {VIA_VAR})",
            "nextstate": "with via: slurm, the Slurm state after the reboot: down (default:"
            " out of service until fleetfix validates and resumes it) or resume (Slurm returns"
            f" it at once; host var {NEXT_STATE_VAR})",
            "reason": "with via: slurm, the reboot reason (prefixed with 'fleetfix:')",
            "node": "Slurm node name (default: short inventory hostname)",
        },
        requires=("gpu_processes",),
        optional=("slurm_node",),
        disruptive=True,
    ),
    Action(
        name="service",
        validate=params_checker({"state": choice(*SERVICE_VERBS)}),
        summary="restart, start, stop or reload a systemd unit; mask, enable, daemon-reload",
        plan=_plan_service,
        params={
            "name": "systemd unit",
            "state": "restarted (default when nothing else is asked), started, stopped, reloaded",
            "enabled": "true: systemctl enable; false: disable",
            "masked": "true: systemctl mask; false: unmask",
            "daemon_reload": "systemctl daemon-reload first",
            "daemon_reexec": "systemctl daemon-reexec first",
            "no_block": "systemctl --no-block",
            "force": "systemctl --force",
        },
        settle=_settle_service,
    ),
    Action(
        name="kill_gpu_processes",
        validate=params_checker(
            {"signal": choice("TERM", "KILL", "INT", "SIGTERM", "SIGKILL", "SIGINT")}
        ),
        summary="signal every process holding a GPU (opt-in: needs confirm: true)",
        plan=_plan_kill,
        params={"confirm": "must be true", "signal": "TERM (default) or KILL"},
        requires=("gpu_processes",),
        verify=("gpu_processes",),
        check=_check_killed,
        disruptive=True,
    ),
    Action(
        name="collect_evidence",
        validate=params_checker({"dmesg_lines": integer, "bug_report_timeout": duration}),
        summary="kernel log excerpt and nvidia-smi -q (optionally nvidia-bug-report), journaled",
        plan=_plan_evidence,
        params={
            "dmesg_lines": "kernel log lines to keep (500)",
            "bug_report": "also run nvidia-bug-report.sh",
            "bug_report_timeout": "its timeout (15m)",
        },
        changes_state=False,
        repeatable=True,
    ),
)
