"""reset_ecc never hides what the GPUs still need, and never asks for what the GPU cannot do:
aggregate counters only before Ampere (facts from real nvidia-smi captures)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.gpu import ACTIONS
from fleetfix.probes.gpu_facts import EccCounters, EccFacts, NvidiaSmiFacts
from tests.unit.actions.node_facts import A100, H100, P100, flag, node

RESET_ECC = next(action for action in ACTIONS if action.name == "reset_ecc")


def _plan(smi: NvidiaSmiFacts, **params: Any) -> ActionPlan:
    return RESET_ECC.plan(ActionContext("n1", params, {"nvidia_smi": smi}, {}))


def _with_volatile(smi: NvidiaSmiFacts, index: int, sbe: int, dbe: int) -> NvidiaSmiFacts:
    gpu = next(g for g in smi.gpus if g.index == index)
    ecc = replace(gpu.ecc, volatile=replace(gpu.ecc.volatile, sbe=sbe, dbe=dbe))
    return flag(smi, index, ecc=ecc)


def test_volatile_correctable_counts_are_reset() -> None:
    smi = _with_volatile(node(H100), 3, sbe=12, dbe=0)
    plan = _plan(smi)
    assert plan.refused is None
    assert [c.command for c in plan.commands] == ["nvidia-smi -i 3 -p 0"]


def test_an_uncorrectable_count_that_calls_for_a_reset_is_not_zeroed() -> None:
    smi = _with_volatile(node(H100), 3, sbe=0, dbe=2)
    plan = _plan(smi)
    assert plan.refused is not None and "reset" in plan.refused
    assert plan.commands == ()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"recovery_action": "reset"}, "driver recovery action: reset"),
        ({"recovery_action": "reboot"}, "reboot"),
    ],
)
def test_counters_are_not_reset_while_the_driver_asks_for_more(
    change: dict[str, Any], words: str
) -> None:
    smi = flag(_with_volatile(node(H100), 1, sbe=5, dbe=0), 1, **change)
    plan = _plan(smi)
    assert plan.refused is not None and words in plan.refused


@pytest.mark.parametrize("sample", [A100, H100])
def test_aggregate_counters_are_refused_from_ampere_on(sample: str) -> None:
    smi = node(sample)
    gpu0 = smi.gpus[0]
    aggregate = replace(gpu0.ecc, aggregate=EccCounters(sbe=7, dbe=0))
    plan = _plan(flag(smi, 0, ecc=aggregate), counters="aggregate")
    assert plan.refused is not None and "only before Ampere" in plan.refused


def test_aggregate_counters_are_reset_before_ampere() -> None:
    """The real P100 capture carries lifetime (aggregate) correctable counts of its own."""
    smi = node(P100, gpus=2)
    assert all((g.ecc.aggregate.sbe or 0) > 0 for g in smi.gpus)
    plan = _plan(smi, counters="aggregate")
    assert plan.refused is None, plan.refused
    assert [c.command for c in plan.commands] == ["nvidia-smi -i 0,1 -p 1"]


def test_an_unknown_architecture_is_not_assumed_old() -> None:
    smi = node(P100, gpus=1, architecture=None)
    ecc = replace(smi.gpus[0].ecc, aggregate=EccCounters(sbe=7, dbe=0))
    assert isinstance(ecc, EccFacts)
    plan = _plan(flag(smi, 0, ecc=ecc), counters="aggregate")
    assert plan.refused is not None
