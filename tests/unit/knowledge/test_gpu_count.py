"""The expected-GPU rule every check shares: the largest claim wins; nobody knowing is None."""

from __future__ import annotations

from fleetfix.knowledge.gpu_count import Expected, expected_gpus, shortfall


def test_the_largest_claim_wins_and_names_its_source() -> None:
    assert expected_gpus(inventory=None, gres=8, pci=8, seen=7) == Expected(8, "Slurm's Gres")
    assert expected_gpus(inventory="4", gres=None, pci=8, seen=None) == Expected(
        8, "NVIDIA GPUs on the PCI bus"
    )
    assert expected_gpus(seen=8) == Expected(8, "the most GPUs fleetfix saw on this node")


def test_unknown_and_unusable_claims_are_ignored() -> None:
    assert expected_gpus() is None
    assert expected_gpus(inventory="", gres=0, pci=None, seen=False) is None
    assert expected_gpus(inventory="eight", gres=None) is None


def test_shortfall_says_how_many_of_how_many_and_whose_count() -> None:
    expected = Expected(8, "Slurm's Gres")
    assert shortfall(7, expected) == "7 of 8 GPUs visible (Slurm's Gres)"
    assert shortfall(8, expected) is None
    assert shortfall(7, None) is None
    assert shortfall(None, expected) is None
