"""gpu_reset and imex_restart plans per board: NVIDIA's reset rules (actions/fabric.py) on facts
parsed from real nvidia-smi output.

The GPUs come from real captures: an A100-SXM4-80GB v12 XML (Ampere, fabric N/A), an H100 80GB
HBM3 `-q` on driver 590.48.01 (Hopper, fabric Completed/Success), an RTX PRO 6000 Blackwell v13
XML (a PCIe card, fabric N/A) and a Tesla P100 v11 XML (Pascal). Each is copied to an 8-GPU node
(4 for a GB200 tray); a case changes only the field it is about (fabric state, recovery action,
architecture). Services are the `services` probe's lines.
"""

from __future__ import annotations

import pytest

from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.fabric import Topology, board_of, reset_rule
from fleetfix.actions.gpu import ACTIONS
from fleetfix.probes import services
from fleetfix.probes.gpu_facts import Fabric, NvidiaSmiFacts
from tests.unit.actions.node_facts import A100, BLACKWELL_PCIE, H100, P100, flag, node, units

ALL = "0,1,2,3,4,5,6,7"
ACTION = {a.name: a for a in ACTIONS}
HGX = {"nvidia_persistenced": "active", "nvidia_dcgm": "active"}


def plan(
    smi: NvidiaSmiFacts,
    svc: services.ServicesFacts,
    action: str = "gpu_reset",
    interrupted: dict[str, str] | None = None,
    **params: object,
) -> ActionPlan:
    facts = {"nvidia_smi": smi, "services": svc}
    ctx = ActionContext("n1", params, facts, {}, interrupted=interrupted or {})
    return ACTION[action].plan(ctx)


def commands(result: ActionPlan) -> list[str]:
    """The plan's commands, the fabric wait's script shortened to its purpose."""
    return [
        "<wait for fabric>" if c.command.startswith("deadline=") else c.command
        for c in result.commands
    ]


def check(smi: NvidiaSmiFacts, svc: services.ServicesFacts, done: ActionPlan) -> str | None:
    ctx = ActionContext("n1", {}, {"nvidia_smi": smi, "services": svc}, {}, plan=done)
    checker = ACTION["gpu_reset"].check
    assert checker is not None
    return checker(ctx)


# -- the board, from facts -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("smi", "svc", "topology"),
    [
        (node(A100), units(**HGX, nvidia_fabricmanager="active"), Topology.NVSWITCH_AMPERE),
        (node(A100), units(**HGX), Topology.PCIE),
        (node(H100), units(**HGX, nvidia_fabricmanager="inactive"), Topology.NVSWITCH),
        (node(H100, 4), units(**HGX, nvidia_imex="active"), Topology.NVLINK_DOMAIN),
        (node(BLACKWELL_PCIE), units(**HGX), Topology.PCIE),
        (node(P100), units(**HGX), Topology.PRE_AMPERE),
        (node(H100, architecture=None, fabric=Fabric()), units(**HGX), Topology.UNKNOWN),
    ],
    ids=["hgx-a100", "a100-pcie", "hgx-h100", "gb200-tray", "pcie-blackwell", "p100", "unknown"],
)
def test_the_board_comes_from_the_facts(
    smi: NvidiaSmiFacts, svc: services.ServicesFacts, topology: Topology
) -> None:
    assert board_of(smi, svc).topology is topology


def test_a_fabric_manager_nobody_could_ask_about_is_not_guessed_installed() -> None:
    unknown = services.parse("nvidia-fabricmanager\nnvidia-dcgm loaded active\n")
    assert board_of(node(A100), unknown).fabric_manager == "absent"


# -- the reset, per board and Fabric Manager state -------------------------------------------


def test_ampere_nvswitch_with_fabric_manager_resets_the_flagged_gpu_only() -> None:
    smi = flag(node(A100), 1, recovery_action="reset")
    done = plan(smi, units(**HGX, nvidia_fabricmanager="active"))
    assert commands(done) == [
        "systemctl stop nvidia-dcgm",
        "nvidia-smi -r -i 1",
        "systemctl start nvidia-dcgm",
    ]
    assert done.before == {"services": "nvidia-dcgm"}


def test_ampere_nvswitch_starts_fabric_manager_before_the_reset() -> None:
    """nvidia-smi -r: "On Ampere NVSwitch systems, Fabric Manager is required to facilitate
    reset"."""
    smi = flag(node(A100), 1, recovery_action="reset")
    done = plan(smi, units(**HGX, nvidia_fabricmanager="inactive"))
    assert commands(done) == [
        "systemctl stop nvidia-dcgm",
        "systemctl start nvidia-fabricmanager",
        "nvidia-smi -r -i 1",
        "systemctl start nvidia-dcgm",
    ]


def test_hopper_nvswitch_with_fabric_manager_resets_the_flagged_gpu_and_waits() -> None:
    smi = flag(node(H100), 3, recovery_action="reset")
    done = plan(smi, units(**HGX, nvidia_fabricmanager="active"))
    assert commands(done) == [
        "systemctl stop nvidia-dcgm",
        "nvidia-smi -r -i 3",
        "systemctl start nvidia-dcgm",
        "<wait for fabric>",
    ]


def test_hopper_nvswitch_without_fabric_manager_resets_every_peer_then_starts_it() -> None:
    """nvidia-smi -r: without Fabric Manager, "any GPUs with NVLink connections to a GPU being
    reset must also be reset in the same command"; on HGX that is all eight."""
    done = plan(node(H100), units(**HGX, nvidia_fabricmanager="inactive"), gpus=[2])
    assert commands(done) == [
        "systemctl stop nvidia-dcgm",
        f"nvidia-smi -r -i {ALL}",
        "systemctl start nvidia-fabricmanager",
        "systemctl start nvidia-dcgm",
        "<wait for fabric>",
    ]
    assert any("NVLink peers of [2]" in note for note in done.notes)


def test_gpus_waiting_in_progress_are_the_ones_reset() -> None:
    """Fabric Manager restarted without a reset: every GPU In Progress needs one."""
    smi = node(H100, fabric=Fabric(state="In Progress", status=None))
    done = plan(smi, units(**HGX, nvidia_fabricmanager="active"))
    assert commands(done)[1] == f"nvidia-smi -r -i {ALL}"


def test_pcie_resets_the_flagged_gpu_without_fabric_manager_or_wait() -> None:
    smi = flag(node(BLACKWELL_PCIE), 0, recovery_action="reset")
    done = plan(smi, units(**HGX))
    assert commands(done) == [
        "systemctl stop nvidia-dcgm",
        "nvidia-smi -r -i 0",
        "systemctl start nvidia-dcgm",
    ]


def test_a_gb200_tray_resets_per_gpu_and_waits_for_the_remote_fabric() -> None:
    smi = flag(node(H100, 4, architecture="Blackwell"), 1, recovery_action="reset")
    done = plan(smi, units(**HGX, nvidia_imex="active"))
    assert commands(done) == [
        "systemctl stop nvidia-dcgm",
        "nvidia-smi -r -i 1",
        "systemctl start nvidia-dcgm",
        "<wait for fabric>",
    ]


def test_before_ampere_every_gpu_goes_together_and_persistence_stops() -> None:
    done = plan(node(P100), units(**HGX), gpus=[5])
    assert commands(done) == [
        "systemctl stop nvidia-dcgm",
        "systemctl stop nvidia-persistenced",
        f"nvidia-smi -r -i {ALL}",
        "systemctl start nvidia-persistenced",
        "systemctl start nvidia-dcgm",
    ]


def test_an_unknown_architecture_with_a_stopped_fabric_manager_is_refused() -> None:
    smi = node(H100, architecture=None, fabric=Fabric())
    refused = plan(smi, units(**HGX, nvidia_fabricmanager="inactive"), gpus=[0])
    assert refused.refused is not None and "nvidia-fabricmanager" in refused.refused
    alone = plan(smi, units(**HGX), gpus=[0])
    assert "systemctl stop nvidia-persistenced" in commands(alone)


@pytest.mark.parametrize("fabric_manager", ["active", "inactive"])
@pytest.mark.parametrize("sample", [A100, H100, BLACKWELL_PCIE, P100])
def test_fabric_manager_is_never_stopped_and_persistence_only_before_ampere(
    sample: str, fabric_manager: str
) -> None:
    done = plan(node(sample), units(**HGX, nvidia_fabricmanager=fabric_manager), gpus=[0])
    assert not [c for c in commands(done) if "stop nvidia-fabricmanager" in c]
    stops_persistence = "systemctl stop nvidia-persistenced" in commands(done)
    assert stops_persistence is (sample == P100)


def test_nothing_flagged_is_a_no_op() -> None:
    done = plan(node(H100), units(**HGX, nvidia_fabricmanager="active"))
    assert done.noop and done.notes == ("no GPU reports a reset as needed",)


def test_a_reset_rule_never_names_fewer_gpus_than_asked() -> None:
    board = board_of(node(H100), units(**HGX, nvidia_fabricmanager="active"))
    assert reset_rule(board, [4, 1, 4]).gpus == (1, 4)


# -- what holds the GPUs ---------------------------------------------------------------------


def test_monitoring_and_mps_stop_before_dcgm_and_start_after_it() -> None:
    svc = units(
        **HGX,
        nvidia_fabricmanager="active",
        dcgm_exporter="active",
        nvsm="active",
        nvidia_cuda_mps_control="active",
    )
    done = plan(node(H100), svc, gpus=[0])
    assert commands(done) == [
        "systemctl stop dcgm-exporter",
        "systemctl stop nvsm",
        "systemctl stop nvidia-dcgm",
        "echo quit | nvidia-cuda-mps-control",
        "nvidia-smi -r -i 0",
        "nvidia-cuda-mps-control -d",
        "systemctl start nvidia-dcgm",
        "systemctl start nvsm",
        "systemctl start dcgm-exporter",
        "<wait for fabric>",
    ]
    assert done.before == {
        "services": "dcgm-exporter,nvsm,nvidia-dcgm,nvidia-cuda-mps-control",
    }
    assert all(c.always for c in done.commands[5:9])


def test_a_resumed_reset_restores_what_the_interrupted_one_stopped() -> None:
    """The crash came after the stops: nothing runs now, but the journaled `before` says what
    ran, so the repeat starts it again."""
    interrupted = {"services": "dcgm-exporter,nvidia-dcgm"}
    svc = units(nvidia_persistenced="active", nvidia_fabricmanager="active")
    done = plan(node(H100), svc, interrupted=interrupted, gpus=[0])
    assert commands(done) == [
        "nvidia-smi -r -i 0",
        "systemctl start nvidia-dcgm",
        "systemctl start dcgm-exporter",
        "<wait for fabric>",
    ]
    assert done.before == interrupted


# -- verification ----------------------------------------------------------------------------


def test_verification_names_the_fabric_state_it_saw() -> None:
    svc = units(**HGX, nvidia_fabricmanager="active")
    done = plan(node(H100), svc, gpus=[0])
    waiting = flag(node(H100), 0, fabric=Fabric(state="In Progress", status=None))
    problem = check(waiting, svc, done)
    assert problem is not None and "GPU 0: fabric In Progress (status N/A)" in problem
    assert check(node(H100), svc, done) is None


def test_verification_fails_while_fabric_manager_is_stopped() -> None:
    svc = units(**HGX, nvidia_fabricmanager="inactive")
    done = plan(node(H100), svc, gpus=[0])
    problem = check(node(H100), svc, done)
    assert problem is not None and "nvidia-fabricmanager" in problem


def test_verification_fails_while_the_driver_still_asks_for_a_reset() -> None:
    svc = units(**HGX, nvidia_fabricmanager="active")
    smi = flag(node(A100), 1, recovery_action="reset")
    problem = check(smi, svc, plan(smi, svc))
    assert problem == "GPUs [1] still need a reset"


# -- GB200: the IMEX domain ------------------------------------------------------------------


def test_recover_imex_domain_restarts_imex_instead_of_resetting() -> None:
    svc = units(**HGX, nvidia_imex="active")
    smi = flag(node(H100, 4, architecture="Blackwell"), 1, recovery_action="recover_imex_domain")
    assert plan(smi, svc).noop, "a GPU reset is not what the driver asks for"
    done = plan(smi, svc, "imex_restart")
    assert commands(done) == ["systemctl restart nvidia-imex", "<wait for fabric>"]
    no_imex = plan(smi, units(**HGX), "imex_restart")
    assert no_imex.refused is not None and "nvidia-imex" in no_imex.refused
    assert plan(node(H100, 4), svc, "imex_restart").noop
    checker = ACTION["imex_restart"].check
    assert checker is not None
    still = checker(ActionContext("n1", {}, {"nvidia_smi": smi, "services": svc}, {}))
    assert still == "GPUs [1] still ask to recover the IMEX domain"
