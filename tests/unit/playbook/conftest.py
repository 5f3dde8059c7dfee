"""Shared fixtures for the playbook front-end tests: the step catalog and fixture paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.playbook.catalog import StepCatalog

PLAYBOOKS = Path(__file__).resolve().parents[2] / "fixtures" / "playbooks"


def make_catalog() -> StepCatalog:
    """The brief's test catalog, plus the actions a realistic remediation playbook uses."""
    return StepCatalog(
        probes={"nvidia_smi": frozenset(), "xid": frozenset({"since_boot"})},
        actions={
            "reboot": frozenset({"timeout"}),
            "clean_shm": frozenset({"older_than", "patterns"}),
            "slurm_drain": frozenset({"reason", "wait"}),
            "slurm_resume": frozenset(),
            "gpu_reset": frozenset({"gpus"}),
            "reload_driver": frozenset(),
            "collect_evidence": frozenset(),
        },
    )


@pytest.fixture
def catalog() -> StepCatalog:
    return make_catalog()


@pytest.fixture
def playbooks() -> Path:
    return PLAYBOOKS
