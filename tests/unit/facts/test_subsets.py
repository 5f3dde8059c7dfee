"""gather_subset and filter, by Ansible's rules."""

from __future__ import annotations

import pytest

from fleetfix.facts.subsets import COLLECTORS, MINIMAL, SubsetError, filtered, selected


def test_all_by_default() -> None:
    assert selected(None) == selected(["all"]) == COLLECTORS


def test_not_all_leaves_the_minimal_collectors() -> None:
    assert selected(["!all"]) == MINIMAL


def test_not_hardware_drops_hardware_and_gpus() -> None:
    assert selected(["all", "!hardware"]) == COLLECTORS - {"hardware", "gpus"}


def test_a_named_subset_survives_its_exclusion() -> None:
    assert selected(["!all", "!min", "network"]) == {"network"}
    assert selected("!all,processor") == MINIMAL | {"hardware"}


def test_a_subset_fleetfix_does_not_collect_is_accepted() -> None:
    assert selected(["!all", "virtual"]) == MINIMAL


def test_an_unknown_subset_is_ansibles_error() -> None:
    with pytest.raises(SubsetError, match="Bad subset 'hardwre' given to Ansible"):
        selected(["hardwre"])


def test_filter_matches_prefixed_names() -> None:
    facts = {"hostname": "a", "distribution": "Debian", "env": {}}
    assert filtered(facts, ["ansible_dist*"]) == {"distribution": "Debian"}
    assert filtered(facts, []) == facts
