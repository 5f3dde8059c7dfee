"""The validation before return to service (actions/validation.py) on real readings: an
NVSwitch node whose Fabric Manager is not running is not returned to service, whatever
playbook resumes it (CUDA cannot start there: Fabric Manager user guide)."""

from __future__ import annotations

from fleetfix.actions.base import ActionContext
from fleetfix.actions.validation import return_to_service_problems
from fleetfix.probes.nvidia_smi import PROBE as NVIDIA_SMI
from fleetfix.probes.services import PROBE as SERVICES
from tests.probes.cases import SAMPLES

HGX_H100 = SAMPLES / "nvidia-smi-xml/lab-healthy-1000-8xh100-550.90.07.xml"
UNITS = SAMPLES / "synthetic-services"


def _context(units: str | None) -> ActionContext:
    facts = {
        "nvidia_smi": NVIDIA_SMI.parse(HGX_H100.read_text(encoding="utf-8")),
        "services": None if units is None else SERVICES.parse((UNITS / units).read_text()),
    }
    return ActionContext("gpu001", {}, facts, {"gpus": 8})


def test_a_healthy_nvswitch_node_with_fabric_manager_running_may_return() -> None:
    assert return_to_service_problems(_context("synthetic-services-hgx-h100-all-active.txt")) == []


def test_fabric_manager_stopped_keeps_the_node_out() -> None:
    problems = return_to_service_problems(
        _context("synthetic-services-fm-failed-persistenced-off.txt")
    )
    assert len(problems) == 1 and "nvidia-fabricmanager is not running" in problems[0], problems


def test_without_the_services_reading_nvidia_smi_alone_decides() -> None:
    assert return_to_service_problems(_context(None)) == []
