"""The reboot action's plan with `via: slurm`: scontrol reboot ASAP with nextstate DOWN unless
the site chose RESUME; refused where Slurm cannot be read or a reboot is pending."""

from __future__ import annotations

from typing import Any

from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.node import ACTIONS
from fleetfix.probes import slurm_node

REBOOT = next(a for a in ACTIONS if a.name == "reboot")


def record(state: str, reason: str | None = None) -> slurm_node.SlurmNodeFacts:
    lines = [
        "NodeName=gpu007 Arch=x86_64 CoresPerSocket=56",
        "   Gres=gpu:h100:8",
        f"   State={state} ThreadsPerCore=2 TmpDisk=0 Weight=1",
        "   Partitions=gpu",
    ]
    if reason:
        lines.append(f"   Reason={reason} [root@2026-11-25T03:00:00]")
    return slurm_node.parse("\n".join(lines) + "\n")


def plan(
    params: dict[str, Any], hostvars: dict[str, Any] | None = None, **facts: Any
) -> ActionPlan:
    facts.setdefault("slurm_node", record("IDLE+DRAIN", "fleetfix: xid79 remediation"))
    context = ActionContext("gpu007.cluster", params, facts, hostvars or {})
    return REBOOT.plan(context)


def test_default_is_ssh() -> None:
    (command,) = plan({}).commands
    assert "systemctl reboot" in command.command and command.expect_unreachable


def test_via_slurm_reboots_asap_into_down_with_a_fleetfix_reason() -> None:
    (command,) = plan({"via": "slurm", "reason": "xid79"}).commands
    assert command.command == (
        "scontrol reboot ASAP nextstate=DOWN reason='fleetfix: xid79' gpu007"
    )
    assert command.expect_unreachable


def test_host_vars_choose_slurm_and_resume() -> None:
    hostvars = {"fleetfix_reboot_via": "slurm", "fleetfix_reboot_nextstate": "resume"}
    (command,) = plan({}, hostvars).commands
    assert (
        command.command == "scontrol reboot ASAP nextstate=RESUME reason='fleetfix: reboot' gpu007"
    )


def test_nextstate_drain_is_refused_with_why() -> None:
    refused = plan({"via": "slurm", "nextstate": "drain"}).refused
    assert refused is not None and "no nextstate=DRAIN" in refused


def test_refused_without_slurm_facts_or_with_a_pending_reboot() -> None:
    assert plan({"via": "slurm"}, slurm_node=None).refused is not None
    pending = record("IDLE+DRAIN+REBOOT_REQUESTED", "fleetfix: reboot")
    refused = plan({"via": "slurm"}, slurm_node=pending).refused
    assert refused is not None and "already has a reboot pending" in refused


def test_busy_node_is_refused_either_way() -> None:
    busy = record("ALLOCATED")
    assert plan({"via": "slurm"}, slurm_node=busy).refused is not None
    assert plan({}, slurm_node=busy).refused is not None
