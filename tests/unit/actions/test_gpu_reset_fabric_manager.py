"""gpu_reset left to pick its own GPUs on a board whose Fabric Manager is stopped: remedy's
Fabric Manager rule (knowledge/remedy.py) names every GPU, and the board's reset rule
(actions/fabric.py) does the Fabric Manager guide's sequence. Facts from real captures, as in
test_gpu_reset_rules.py."""

from __future__ import annotations

from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.gpu import ACTIONS
from fleetfix.probes import services
from fleetfix.probes.gpu_facts import NvidiaSmiFacts
from tests.unit.actions.node_facts import A100, H100, flag, node, units

ALL = "0,1,2,3,4,5,6,7"
GPU_RESET = next(a for a in ACTIONS if a.name == "gpu_reset")
HGX = {"nvidia_persistenced": "active", "nvidia_dcgm": "active"}


def plan(smi: NvidiaSmiFacts, svc: services.ServicesFacts) -> ActionPlan:
    ctx = ActionContext("n1", {}, {"nvidia_smi": smi, "services": svc}, {}, interrupted={})
    return GPU_RESET.plan(ctx)


def check(smi: NvidiaSmiFacts, svc: services.ServicesFacts, done: ActionPlan) -> str | None:
    ctx = ActionContext("n1", {}, {"nvidia_smi": smi, "services": svc}, {}, plan=done)
    assert GPU_RESET.check is not None
    return GPU_RESET.check(ctx)


def commands(done: ActionPlan) -> list[str]:
    return [
        "<wait for fabric>" if c.command.startswith("deadline=") else c.command
        for c in done.commands
    ]


def test_hopper_with_fabric_manager_stopped_resets_every_gpu_then_starts_it() -> None:
    """Every GPU Completed, nothing flagged: only the stopped Fabric Manager asks for it."""
    done = plan(node(H100), units(**HGX, nvidia_fabricmanager="inactive"))
    assert commands(done) == [
        "systemctl stop nvidia-dcgm",
        f"nvidia-smi -r -i {ALL}",
        "systemctl start nvidia-fabricmanager",
        "systemctl start nvidia-dcgm",
        "<wait for fabric>",
    ]


def test_the_reset_does_not_verify_until_fabric_manager_runs() -> None:
    smi = node(H100)
    done = plan(smi, units(**HGX, nvidia_fabricmanager="inactive"))
    problem = check(smi, units(**HGX, nvidia_fabricmanager="inactive"), done)
    assert problem is not None and "nvidia-fabricmanager is not running" in problem
    assert check(smi, units(**HGX, nvidia_fabricmanager="active"), done) is None


def test_ampere_reports_no_fabric_state_so_the_rule_does_not_fire() -> None:
    """Nothing nvidia-smi shows tells an HGX A100 from A100 cards with Fabric Manager merely
    installed (docs/gpu-procedures.md); a reset another rule asks for still starts it first."""
    assert plan(node(A100), units(**HGX, nvidia_fabricmanager="inactive")).noop
    flagged = flag(node(A100), 3, recovery_action="reset")
    done = plan(flagged, units(**HGX, nvidia_fabricmanager="inactive"))
    assert commands(done)[1:3] == ["systemctl start nvidia-fabricmanager", "nvidia-smi -r -i 3"]
