"""Two controllers, two journals, one fleet: the lease on the node keeps them apart where no
shared journal can (issue 19: two engineers' laptops, each with its own SQLite journal, sent
`systemctl reboot` twice to the same nodes). Judged by the lab's audit of reboots, its Slurm
records and the lease files on its nodes.

The `xid79` lab (src/fleetfix/lab/scenarios/xid79.yml): gpu003 has an Xid 79 a reboot fixes;
gpu001 and gpu002, in its rack, are healthy. (gpu011's rack has bob's drained gpu014, which
xid79.yml's cap of one node out per rack counts: gpu011 is held there, whoever runs.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.engine.node_lease import SECONDS_ENV
from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import REPO, node_shell, run_argv, write_inventory
from tests.e2e.safety_support import reboots, started_run
from tests.lab.support import running_lab
from tests.support import wait_until

pytestmark = pytest.mark.timeout(600)

XID79_NODES = ("gpu003",)
HEALTHY = ("gpu001", "gpu002")
DRAIN_WAIT_REBOOT = REPO / "tests" / "fixtures" / "playbooks" / "team" / "drain-wait-reboot.yml"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabHandle]:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.3) as handle:
        yield handle


def _expires(node: str, lab: LabHandle) -> int:
    lease = lab.truth()["nodes"][node]["lease"]
    return int(lease["expires"]) if lease else 0


def _run_id(output: str) -> str:
    found = re.search(r"run id: (\S+)", output)
    assert found is not None, output
    return found[1]


def test_two_controllers_with_their_own_journals_reboot_each_node_once(
    lab: LabHandle, tmp_path: Path
) -> None:
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    limit = ("--limit", ":".join((*HEALTHY, *XID79_NODES)), "-e", "drain_wait=3s")
    first = run_argv("xid79.yml", inventory, tmp_path / "a.sqlite", *limit)
    second = run_argv("xid79.yml", inventory, tmp_path / "b.sqlite", *limit)
    with started_run(first, tmp_path, "a") as one, started_run(second, tmp_path, "b") as two:
        codes = (one.wait(300), two.wait(300))
        outputs = (one.output(), two.output())
    said = "\n".join(outputs)
    assert "Traceback" not in said, said
    assert all(code in (0, 2) for code in codes), (codes, said)  # 2: a node left to the other
    runs = {_run_id(out) for out in outputs}
    assert len(runs) == 2
    # A run that met the other's lease names it; it never names itself.
    for out in outputs:
        for named in re.findall(r"being remediated by run (\S+) from controller", out):
            assert named in runs and named != _run_id(out), out

    rebooted = reboots(lab.audit())
    expected = {**dict.fromkeys(HEALTHY, 0), **dict.fromkeys(XID79_NODES, 1)}
    assert {name: rebooted.get(name, 0) for name in expected} == expected, said
    truth = lab.truth()["nodes"]
    for name in XID79_NODES:  # fixed and back in service: nobody's drain left over
        slurm = truth[name]["slurm"]
        assert (slurm["state"], slurm["drain"]) == ("IDLE", False), (name, slurm, said)
    assert all(truth[name]["lease"] is None for name in expected)  # both released


def test_a_second_controller_leaves_a_node_another_one_holds_naming_it(
    lab: LabHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run takes gpu003's lease at its drain and waits for a gate, renewing a lease
    of 2 s all the while; the second, with its own journal, finds the lease and leaves gpu003
    owned, naming the first run; then the first reboots it and releases the lease."""
    monkeypatch.setenv(SECONDS_ENV, "2")
    inventory = write_inventory(lab, tmp_path / "lab.ini")
    gate = tmp_path / "gate"
    extra = ("--limit", "gpu003", "-e", f"gate={gate}")
    holder = run_argv(DRAIN_WAIT_REBOOT, inventory, tmp_path / "a.sqlite", *extra)
    with started_run(holder, tmp_path, "holder") as first:
        assert wait_until(lambda: "TASK [wait for the gate]" in first.output(), 120), first.output()
        first_run = _run_id(first.output())
        lease = lab.truth()["nodes"]["gpu003"]["lease"]
        assert lease is not None and lease["run"] == first_run, lease
        assert lease["expires"] - lease["since"] == 2
        # Renewed while the run lives (every 0.5 s): never lapses while it waits.
        assert wait_until(lambda: _expires("gpu003", lab) >= lease["expires"] + 3, 30)
        other = run_argv(DRAIN_WAIT_REBOOT, inventory, tmp_path / "b.sqlite", *extra)
        with started_run(other, tmp_path, "other") as second:
            assert second.wait(120) == 2, second.output()
            refused = second.output()
        node_shell(lab, "gpu003", f"touch {gate}")
        assert first.wait(120) == 0, first.output()
    assert f"being remediated by run {first_run} from controller" in refused, refused
    assert "Traceback" not in refused
    assert reboots(lab.audit()).get("gpu003") == 1
    node = lab.truth()["nodes"]["gpu003"]
    assert node["lease"] is None
    # Drained by the first run (the playbook does not resume), its reason naming that run.
    assert node["slurm"]["reason"] == f"fleetfix: test (run {first_run})", node["slurm"]
