"""Issue 18 on the `cold-cycle` lab, judged by the lab's truth (boots, power cycles, faults,
Slurm) and its audit: NVIDIA's order for a GPU that will not come back, and a GPU missing with
no Xid line and no `gpus=` anywhere.

cold-cycle (src/fleetfix/lab/scenarios/cold-cycle.yml, HGX H100, driver 580, inventory without
gpus=, BMCs at 127.110.R.N): gpu002 Xid 79 that only a cold cycle cures; gpu003 Xid 79 nothing
cures; gpu004 a GPU that failed to initialise (no Xid) a reboot cures; gpu006 / gpu007 the
driver asks System Reboot / Bus Reset; gpu008 a GPU that failed to initialise and stays so;
gpu009 a BMC that refuses the inventory's password; gpu010 no BMC; gpu001, gpu005 healthy.

First a sweep over the healthy nodes and the two short ones changes nothing and exits 2 naming
the short ones. Then each faulty node is repaired by its own run (`--limit NODE`, its own
journal, `-e power_cycle=true`), two at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.labrun import Run, fleetfix_run, nodes, write_inventory
from tests.e2e.safety_support import is_reboot
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(900)

PLAYBOOK = {
    "gpu002": "xid79.yml",
    "gpu003": "xid79.yml",
    "gpu009": "xid79.yml",
    "gpu010": "xid79.yml",
    "gpu004": "recover.yml",
    "gpu006": "recover.yml",
    "gpu007": "recover.yml",
    "gpu008": "recover.yml",
}
SHORT = ("gpu004", "gpu008")
SWEPT = ("gpu001", "gpu004", "gpu005", "gpu008")
RMA_CANDIDATE = "RMA candidate: run the field diagnostic"
COLD_CYCLE = "needs a human: cold power cycle"


def left_code(node: str) -> int:
    """A repair that did not verify fails its node in the repairing play, and with `--limit
    NODE` that is a whole batch: max_fail_percentage stops the run, exit 6 (docs/decisions.md).
    The node is drained all the same, saying what it needs next."""
    assert node in PLAYBOOK
    return 6


@dataclass(frozen=True, slots=True)
class Repaired:
    run: Run
    before: dict[str, Any]
    after: dict[str, Any]
    audit: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Lab:
    sweep: Run
    swept_before: dict[str, Any]
    swept_after: dict[str, Any]
    repaired: dict[str, Repaired]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("cold-cycle")
    with running_lab("cold-cycle", base / "lab", reboot_time=0.3) as handle:
        inventory = write_inventory(handle, base / "lab.ini")
        assert "gpus=" not in inventory.read_text()
        (base / "sweep").mkdir()
        before = nodes(handle.truth())
        sweep = fleetfix_run(
            "health-sweep.yml", inventory, base / "sweep", "--limit", ",".join(SWEPT), timeout=600
        )
        swept = nodes(handle.truth())

        def repair(node: str) -> Run:
            workdir = base / node
            workdir.mkdir()
            extra = ("--limit", node, "-e", "drain_wait=3s", "-e", "power_cycle=true")
            return fleetfix_run(PLAYBOOK[node], inventory, workdir, *extra, timeout=600)

        with ThreadPoolExecutor(2, thread_name_prefix="repair") as pool:
            runs = dict(zip(PLAYBOOK, pool.map(repair, PLAYBOOK), strict=True))
        after, audit = nodes(handle.truth()), handle.audit()
        yield Lab(
            sweep,
            {n: before[n] for n in SWEPT},
            {n: swept[n] for n in SWEPT},
            {
                node: Repaired(runs[node], swept[node], after[node], audit.get(node, []))
                for node in PLAYBOOK
            },
        )


def test_the_sweep_finds_a_gpu_missing_without_an_xid_or_gpus_and_touches_nothing(
    lab: Lab,
) -> None:
    out = lab.sweep.output
    assert lab.sweep.returncode == 2, out
    assert sorted(lab.sweep.left) == list(SHORT), out
    for node in SHORT:
        assert "7 of 8 GPUs visible" in lab.sweep.left[node], out
    for node in SHORT:  # still in service, not rebooted: the sweep reports, it does not repair
        before, after = lab.swept_before[node], lab.swept_after[node]
        assert after["boots"] == before["boots"] and after["slurm"] == before["slurm"]


def test_a_gpu_only_a_cold_cycle_brings_back_gets_one_after_the_warm_reboot(lab: Lab) -> None:
    result = lab.repaired["gpu002"]
    out = result.run.output
    assert result.run.returncode == 0, out
    assert result.after["power_cycles"] == 1, result.audit
    kinds = ["ipmitool" if e["tool"] == "ipmitool" else "reboot" for e in _downs(result)]
    assert kinds == ["reboot", "ipmitool"], result.audit  # warm first, then one cold cycle
    assert result.after["faults"] == [], result.after["faults"]
    assert result.after["slurm"]["drain"] is False, result.after["slurm"]


def test_a_gpu_nothing_brings_back_is_an_rma_candidate_only_after_the_cold_cycle(
    lab: Lab,
) -> None:
    for node in ("gpu003", "gpu008"):
        result = lab.repaired[node]
        out = result.run.output
        assert result.run.returncode == left_code(node), out
        assert result.after["power_cycles"] == 1, result.audit
        kinds = ["ipmitool" if e["tool"] == "ipmitool" else "reboot" for e in _downs(result)]
        assert kinds == ["reboot", "ipmitool"], result.audit
        reason = str(result.after["slurm"]["reason"])
        assert result.after["slurm"]["drain"] is True, result.after["slurm"]
        assert "persists after a cold power cycle" in reason and RMA_CANDIDATE in reason
        assert "needs RMA" not in reason
        assert not [e for e in result.audit if "State=RESUME" in " ".join(e["argv"])]


def test_a_gpu_that_failed_to_initialise_is_rebooted_without_a_cold_cycle(lab: Lab) -> None:
    result = lab.repaired["gpu004"]
    out = result.run.output
    assert result.run.returncode == 0, out
    assert result.after["boots"] == result.before["boots"] + 1
    assert result.after["power_cycles"] == 0, result.audit
    assert result.after["faults"] == [], result.after["faults"]
    assert result.after["slurm"]["drain"] is False, result.after["slurm"]


@pytest.mark.parametrize("node", ["gpu006", "gpu007"])
def test_system_reboot_and_bus_reset_get_a_cold_cycle_not_a_warm_reboot(
    lab: Lab, node: str
) -> None:
    result = lab.repaired[node]
    out = result.run.output
    assert result.run.returncode == 0, out
    kinds = ["ipmitool" if e["tool"] == "ipmitool" else "reboot" for e in _downs(result)]
    assert kinds == ["ipmitool"], result.audit
    assert result.after["power_cycles"] == 1
    assert result.after["faults"] == [], result.after["faults"]
    assert result.after["slurm"]["drain"] is False, result.after["slurm"]


@pytest.mark.parametrize(
    ("node", "because"),
    [("gpu009", "the power cycle through the BMC failed"), ("gpu010", "")],
)
def test_without_a_usable_bmc_the_node_needs_a_human_not_an_rma(
    lab: Lab, node: str, because: str
) -> None:
    result = lab.repaired[node]
    out = result.run.output
    assert result.run.returncode == left_code(node), out
    assert result.after["power_cycles"] == 0, result.audit
    reason = str(result.after["slurm"]["reason"])
    assert result.after["slurm"]["drain"] is True, result.after["slurm"]
    assert "persists after a warm reboot" in reason and COLD_CYCLE in reason, reason
    assert because in reason and RMA_CANDIDATE not in reason, reason


def _downs(result: Repaired) -> list[dict[str, Any]]:
    """The audit entries that took the node down: warm reboots and BMC power commands."""
    return [
        e
        for e in result.audit
        if is_reboot(e) or (e["tool"] == "ipmitool" and "cycle" in e["argv"])
    ]
