"""No shipped playbook reboots, resets or reloads a busy node, a node a human drained, or a node
whose Slurm state cannot be read: judged on the lab by outcome, for every playbook in
playbooks/ (a playbook added there is covered without a change here).

The `protected` lab (src/fleetfix/lab/scenarios/protected.yml) gives every such node a fault a
playbook fixes (ECC, driver, Xid 79), so each playbook finds work on it; and one unprotected
node per fault, which the playbooks that fix it must fix (the test is never vacuous). Each
playbook runs on its own fresh lab with `-e drain_wait=3s`; the runs start together, three at a
time, when the module's fixture is first used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.labrun import PLAYBOOKS, Run, fault_kinds, fleetfix_run, nodes, write_inventory
from tests.e2e.safety_support import ActionRow, action_rows, harmful, query, unjournaled
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(900)

SHIPPED = sorted(path.name for path in PLAYBOOKS.glob("*.yml"))
BUSY = {"gpu01": 61001, "gpu05": 61002, "gpu09": 61003}
"""Busy node -> the job that must still run on it afterwards."""
HUMAN = ("gpu02", "gpu06", "gpu10")
UNREADABLE = ("gpu03", "gpu07", "gpu11")
FIXED_BY = {
    "ecc.yml": ("gpu04", "row_remap_pending"),
    "driver-reload.yml": ("gpu08", "modules_unloaded"),
    "xid79.yml": ("gpu12", "xid"),
    "shm.yml": ("gpu04", "stale_shm"),
    "persistence.yml": ("gpu04", "persistence_off"),
}
"""Playbook -> (the unprotected node, the fault kind it must remove there)."""
REMEDIATING = ("ecc.yml", "driver-reload.yml", "xid79.yml")
"""Playbooks whose plan targets each protected node with a disruptive action."""


@dataclass(frozen=True, slots=True)
class Played:
    run: Run
    before: dict[str, dict[str, Any]]
    after: dict[str, dict[str, Any]]
    audit: dict[str, list[dict[str, Any]]]
    rows: list[ActionRow]
    left: dict[str, str]
    """host -> kind of the run's HostLeft event (owned, refused, deferred, unhealthy)."""


def _play(playbook: str, base: Path) -> Played:
    with running_lab("protected", base / "lab", reboot_time=0.3) as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        before = nodes(lab.truth())
        run = fleetfix_run(playbook, inventory, base, "-e", "drain_wait=3s", timeout=600)
        journal = base / "j.sqlite"
        left = {
            body["host"]: body["kind"]
            for body in (
                json.loads(row[0])
                for row in query(journal, "SELECT body FROM events WHERE type='HostLeft'")
            )
        }
        return Played(run, before, nodes(lab.truth()), lab.audit(), action_rows(journal), left)


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Played]]]:
    with ThreadPoolExecutor(3, thread_name_prefix="protected") as pool:
        yield {
            playbook: pool.submit(_play, playbook, tmp_path_factory.mktemp(playbook[:-4]))
            for playbook in SHIPPED
        }


def _result(played: dict[str, Future[Played]], playbook: str) -> Played:
    return played[playbook].result(timeout=850)


@pytest.mark.parametrize("playbook", SHIPPED)
def test_protected_nodes_are_never_rebooted_reset_or_reloaded(
    played: dict[str, Future[Played]], playbook: str
) -> None:
    result = _result(played, playbook)
    out = result.run.output
    for name in (*BUSY, *HUMAN, *UNREADABLE):
        calls = [e for e in result.audit.get(name, []) if harmful(e)]
        assert calls == [], f"{playbook} on {name}: {calls}\n{out}"
        assert result.after[name]["boots"] == result.before[name]["boots"], f"{name}\n{out}"
    for name in (*HUMAN, *UNREADABLE):
        assert result.audit.get(name, []) == [], f"{playbook} touched {name}\n{out}"
        assert result.after[name]["slurm"] == result.before[name]["slurm"], name
    for name, job in BUSY.items():
        slurm = result.after[name]["slurm"]
        assert slurm["job_id"] == job, f"{playbook}: {name}'s job is gone: {slurm}\n{out}"
        if slurm["drain"]:
            assert slurm["reason"].startswith("fleetfix: "), slurm
    assert unjournaled(result.audit, result.rows) == [], out


@pytest.mark.parametrize("playbook", SHIPPED)
def test_every_run_that_leaves_faults_behind_says_so(
    played: dict[str, Future[Played]], playbook: str
) -> None:
    """Faults stay on the protected nodes whatever the playbook: no run may exit 0."""
    result = _result(played, playbook)
    assert result.run.returncode in (2, 6), result.run.output


@pytest.mark.parametrize("playbook", sorted(FIXED_BY))
def test_the_unprotected_node_is_fixed(played: dict[str, Future[Played]], playbook: str) -> None:
    result = _result(played, playbook)
    name, fault = FIXED_BY[playbook]
    assert fault in fault_kinds(result.before[name]), "the lab lost its fault"
    assert fault not in fault_kinds(result.after[name]), f"{name}\n{result.run.output}"
    assert result.after[name]["slurm"]["drain"] is False, result.after[name]["slurm"]


@pytest.mark.parametrize("playbook", REMEDIATING)
def test_each_protected_node_is_reported_with_why_it_was_left(
    played: dict[str, Future[Played]], playbook: str
) -> None:
    """The remediating playbooks find a fault on every protected node of their kind: a human's
    node is reported owned, an unreadable one refused (fail closed), a busy one deferred."""
    result = _result(played, playbook)
    column = REMEDIATING.index(playbook)
    busy, human, unreadable = list(BUSY)[column], HUMAN[column], UNREADABLE[column]
    expected = {busy: "deferred", human: "owned", unreadable: "refused"}
    assert {name: result.left.get(name) for name in expected} == expected, result.run.output
